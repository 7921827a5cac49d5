"""`make local`'s runner end to end: the rendered chart trains for real across processes.

Real helm, real TensorFlow, one process per worker (in its own network namespace when
run as root, as CI is). Slow: a few tens of seconds each.
"""
from __future__ import annotations

import re
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
