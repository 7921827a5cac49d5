"""`make local`'s runner end to end: the rendered chart trains for real across processes.

Real helm, real TensorFlow, one process per worker (in its own network namespace when
run as root, as CI is). Slow: a few tens of seconds each.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def local_run(tmp_path: Path, *sets: str, release: str = "e2e", timeout: float = 600):
    argv = [sys.executable, "-m", "scripts.local_run", "--runs-dir", str(tmp_path),
            "--release", release, "--fresh", "--timeout", "400"]
    for item in sets:
        argv += ["--set", item]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def pod_lines(stdout: str, prefix: str) -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        match = re.match(r"^\[(?P<pod>[^\]]+)\] (?P<rest>.*)$", line)
        if match and match.group("rest").startswith(prefix):
            lines.setdefault(match.group("pod"), []).append(match.group("rest"))
    return lines


def kv(line: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in line.split() if "=" in w)


def test_builtin_trainer_two_workers_complete_with_identical_weights(tmp_path):
    proc = local_run(tmp_path, "training.config.steps=30", "training.config.checkpoint.everySteps=10")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    done = pod_lines(proc.stdout, "tfmw done ")
    assert sorted(done) == ["e2e-tf-multiworker-0", "e2e-tf-multiworker-1"]
    records = [kv(lines[-1]) for lines in done.values()]
    assert {r["steps"] for r in records} == {"30"}
    assert len({r["weights_digest"] for r in records}) == 1, "workers ended with different weights"
    progress = [kv(l) for l in pod_lines(proc.stdout, "tfmw progress ")["e2e-tf-multiworker-0"]]
    assert float(progress[-1]["loss"]) < float(progress[0]["loss"]), "loss did not fall"
    assert "weights identical on every worker: yes" in proc.stdout
    model = Path(records[0]["model"])
    assert model.is_dir() and tmp_path in model.parents

    # The chief's export reloads in a fresh process (no TF_CONFIG, no strategy) and predicts.
    check = textwrap.dedent(f"""
        import os; os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import numpy as np, tf_keras as keras
        model = keras.models.load_model({str(model)!r}, compile=False)
        shape = (2,) + tuple(model.input_shape[1:])
        out = model.predict(np.zeros(shape, dtype="float32"), verbose=0)
        assert out.shape[0] == 2 and np.all(np.isfinite(out)), out
        print("predicted", out.shape)
    """)
    reload = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert reload.returncode == 0, reload.stderr[-2000:]
    assert "predicted (2, " in reload.stdout

    # Completion is durable: the same run started again trains nothing.
    again = subprocess.run([sys.executable, "-m", "scripts.local_run", "--runs-dir", str(tmp_path),
                            "--release", "e2e", "--timeout", "120"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:]
    assert "already completed" in again.stdout
    assert not pod_lines(again.stdout, "tfmw progress ")


def test_user_command_reading_tf_config_like_the_tutorial(tmp_path):
    script = REPO / "examples" / "keras_tutorial_worker.py"
    proc = local_run(tmp_path, f"training.command={{python,{script}}}", release="user")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    done = pod_lines(proc.stdout, "example done ")
    assert sorted(done) == ["user-tf-multiworker-0", "user-tf-multiworker-1"]
    for lines in done.values():
        record = kv(lines[-1])
        assert float(record["loss"]) < float(record["first_loss"])
    chief = kv(done["user-tf-multiworker-0"][-1])
    assert Path(chief["model"]).is_dir()
    # the launcher recorded completion for the user command
    assert (tmp_path / "user" / "shared" / "user" / "COMPLETED").is_file()


def _processes_with_env(needle: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if needle.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_ctrl_c_stops_cleanly_keeps_the_checkpoint_and_resumes(tmp_path):
    sets = ["--set", "training.config.steps=150", "--set", "training.config.checkpoint.everySteps=10",
            "--set", "training.config.logEverySteps=10"]
    argv = [sys.executable, "-m", "scripts.local_run", "--runs-dir", str(tmp_path), "--release", "intr", *sets]
    proc = subprocess.Popen(argv + ["--fresh"], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "tfmw progress step=30/" in line:
            break
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the runner (pods have their own sessions)
    rest, _ = proc.communicate(timeout=180)
    out = "".join(seen) + rest
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted (Ctrl-C)" in out
    match = re.search(r"tfmw stopped step=(\d+)/150 reason=sigterm", out)
    assert match, "the trainer did not checkpoint on SIGTERM:\n" + out[-3000:]
    assert _processes_with_env(str(tmp_path)) == [], "orphan pod processes left behind"
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"tfmw{proc.pid}" not in namespaces

    # The next start picks up from the checkpoint written on the way out: no work lost.
    resumed = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert f"resume_step={match.group(1)} " in resumed.stdout
    done = pod_lines(resumed.stdout, "tfmw done ")
    assert {kv(lines[-1])["steps"] for lines in done.values()} == {"150"}


def test_loopback_network_mode_trains_without_namespaces(tmp_path):
    # What a non-root developer gets: every worker on 127.0.0.1, worker j on port+j.
    argv = [sys.executable, "-m", "scripts.local_run", "--runs-dir", str(tmp_path), "--release", "lo",
            "--fresh", "--network", "loopback", "--set", "training.config.steps=10",
            "--set", "training.config.checkpoint.everySteps=5"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "loopback 127.0.0.1 ports" in proc.stdout
    done = pod_lines(proc.stdout, "tfmw done ")
    assert len(done) == 2 and len({kv(l[-1])["weights_digest"] for l in done.values()}) == 1
