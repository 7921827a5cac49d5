"""`make local`'s runner end to end: the rendered chart trains for real across processes.

Real helm, real TensorFlow, one process per worker (in its own network namespace when
run as root, as CI is). Slow: a few tens of seconds each.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from repo import REPO

from entrypoint import loglines

pytestmark = pytest.mark.slow


def local_run(tmp_path: Path, *sets: str, release: str = "e2e", timeout: float = 600, set_files=()):
    argv = [
        sys.executable,
        "-m",
        "tfmw.localrun",
        "--runs-dir",
        str(tmp_path),
        "--release",
        release,
        "--fresh",
        "--timeout",
        "400",
    ]
    for item in sets:
        argv += ["--set", item]
    for item in set_files:
        argv += ["--set-file", item]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def by_pod(stdout: str) -> dict[str, list[str]]:
    """Each pod's lines of `make local`'s output (it prefixes every line with `[<pod>] `)."""
    lines: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        match = re.match(r"^\[(?P<pod>[^\]]+)\] (?P<rest>.*)$", line)
        if match:
            lines.setdefault(match.group("pod"), []).append(match.group("rest"))
    return lines


def pod_lines(stdout: str, kind: str) -> dict[str, list[loglines.LogLine]]:
    """Each pod's `tfmw <kind>` lines, parsed, for the pods that printed any."""
    found = {pod: loglines.find(lines, kind) for pod, lines in by_pod(stdout).items()}
    return {pod: parsed for pod, parsed in found.items() if parsed}


def example_lines(stdout: str) -> dict[str, dict[str, str]]:
    """Each pod's last `example done k=v ...` line (the user script's own report), as fields."""
    return {
        pod: loglines.key_values(done[-1])
        for pod, lines in by_pod(stdout).items()
        if (done := [line for line in lines if line.startswith("example done ")])
    }


def test_builtin_trainer_two_workers_complete_with_identical_weights(tmp_path):
    proc = local_run(tmp_path, "training.config.steps=30", "training.config.checkpoint.everySteps=10")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    done = pod_lines(proc.stdout, loglines.DONE)
    assert sorted(done) == ["e2e-tf-multiworker-0", "e2e-tf-multiworker-1"]
    records = [lines[-1].fields for lines in done.values()]
    assert {r["steps"] for r in records} == {"30"}
    assert len({r["weights_digest"] for r in records}) == 1, "workers ended with different weights"
    progress = pod_lines(proc.stdout, loglines.PROGRESS)["e2e-tf-multiworker-0"]
    assert progress[-1].float_field("loss") < progress[0].float_field("loss"), "loss did not fall"
    assert "weights identical on every worker: yes" in proc.stdout
    assert "already completed" not in proc.stdout
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
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfmw.localrun",
            "--runs-dir",
            str(tmp_path),
            "--release",
            "e2e",
            "--timeout",
            "120",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-2000:]
    assert "this run had already completed: nothing was trained again" in again.stdout
    assert not pod_lines(again.stdout, loglines.PROGRESS)


def test_user_command_reading_tf_config_like_the_tutorial(tmp_path):
    script = REPO / "examples" / "keras_tutorial_worker.py"
    proc = local_run(tmp_path, f"training.command={{python,{script}}}", release="user")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    done = example_lines(proc.stdout)
    assert sorted(done) == ["user-tf-multiworker-0", "user-tf-multiworker-1"]
    for record in done.values():
        assert float(record["loss"]) < float(record["first_loss"])
    assert Path(done["user-tf-multiworker-0"]["model"]).is_dir()
    # the launcher recorded completion for the user command, and the summary says it trained
    assert (tmp_path / "user" / "shared" / "user" / "COMPLETED").is_file()
    assert "  trained: the training command ran to the end on every worker" in proc.stdout
    assert "already completed" not in proc.stdout


def test_the_tutorials_two_files_train_with_set_file_and_no_image(tmp_path):
    # TF's multi-worker tutorial as two files, shipped in the release's values (training.files),
    # mounted where training.command names them: nothing is built.
    tutorial = REPO / "examples" / "tutorial"
    proc = local_run(
        tmp_path,
        "training.command={python,/opt/tf-multiworker/files/main.py}",
        "training.args={--epochs,2,--steps-per-epoch,10}",
        release="tut",
        set_files=[
            f"training.files.main\\.py={tutorial / 'main.py'}",
            f"training.files.mnist_setup\\.py={tutorial / 'mnist_setup.py'}",
        ],
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    pods = by_pod(proc.stdout)
    for pod in ("tut-tf-multiworker-0", "tut-tf-multiworker-1"):
        assert any(line.startswith("Epoch 2/2") for line in pods[pod]), pod  # the tutorial's fit ran
    assert "tutorial saved model=" in "\n".join(pods["tut-tf-multiworker-0"])
    shared = tmp_path / "tut" / "shared" / "tut"
    assert (shared / "model" / "saved_model.pb").is_file() and (shared / "COMPLETED").is_file()
    # the files as the pods saw them: the release's ConfigMap, read-only mount rewritten locally
    assert (tmp_path / "tut" / "configmaps" / "tut-tf-multiworker-files" / "mnist_setup.py").read_text() == (
        tutorial / "mnist_setup.py"
    ).read_text()


def test_the_evaluator_evaluates_the_final_checkpoint(tmp_path):
    proc = local_run(
        tmp_path,
        "evaluator.enabled=true",
        "training.config.steps=30",
        "training.config.checkpoint.everySteps=10",
        "training.config.evaluation.examples=256",
        release="ev",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    evals = pod_lines(proc.stdout, loglines.EVAL)
    (pod,) = [name for name in evals if "-evaluator-" in name]
    results = [line.fields for line in evals[pod] if "step" in line.fields]
    assert results[-1]["step"] == "30" and results[-1]["final"] == "true"
    assert [r["final"] for r in results].count("true") == 1
    # each checkpoint evaluated once, in order (a result the run ended on is published again as final)
    evaluated = [int(r["step"]) for r in results if r["final"] == "false"]
    assert evaluated == sorted(set(evaluated))
    record = json.loads((tmp_path / "ev" / "shared" / "ev" / "eval.json").read_text())
    assert record["step"] == 30 and record["final"] is True and record["examples"] == 256
    assert "tf-multiworker local run completed" in proc.stdout and "(2 workers)" in proc.stdout
    assert (
        f"  evaluator: step=30 loss={results[-1]['loss']} accuracy={results[-1]['accuracy']} "
        "(the final checkpoint;" in proc.stdout
    )


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
    sets = [
        "--set",
        "training.config.steps=150",
        "--set",
        "training.config.checkpoint.everySteps=10",
        "--set",
        "training.config.logEverySteps=10",
    ]
    argv = [sys.executable, "-m", "tfmw.localrun", "--runs-dir", str(tmp_path), "--release", "intr", *sets]
    # As from a terminal: SIGINT at its default, even when this test itself was started in the
    # background of a non-interactive shell (which ignores SIGINT, an ignore Python keeps).
    proc = subprocess.Popen(
        argv + ["--fresh"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if (loglines.progress_step(line) or 0) >= 30:
            break
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the runner (pods have their own sessions)
    rest, _ = proc.communicate(timeout=180)
    out = "".join(seen) + rest
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted (Ctrl-C)" in out
    stopped = [
        s
        for lines in pod_lines(out, loglines.STOPPED).values()
        for s in lines
        if s.fields.get("reason") == "sigterm" and s.fields.get("step", "").endswith("/150")
    ]
    assert stopped, "the trainer did not checkpoint on SIGTERM:\n" + out[-3000:]
    assert _processes_with_env(str(tmp_path)) == [], "orphan pod processes left behind"
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"tfmw{proc.pid}" not in namespaces

    # The next start picks up from the checkpoint written on the way out: no work lost.
    resumed = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    starts = [s for lines in pod_lines(resumed.stdout, loglines.START).values() for s in lines]
    assert stopped[0].int_field("step") in {s.int_field("resume_step") for s in starts}, resumed.stdout[-3000:]
    done = pod_lines(resumed.stdout, loglines.DONE)
    assert {lines[-1].fields["steps"] for lines in done.values()} == {"150"}


def test_loopback_network_mode_trains_without_namespaces(tmp_path):
    # What a non-root developer gets: every worker on 127.0.0.1, worker j on port+j.
    argv = [
        sys.executable,
        "-m",
        "tfmw.localrun",
        "--runs-dir",
        str(tmp_path),
        "--release",
        "lo",
        "--fresh",
        "--network",
        "loopback",
        "--set",
        "training.config.steps=10",
        "--set",
        "training.config.checkpoint.everySteps=5",
    ]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "loopback 127.0.0.1 ports" in proc.stdout
    done = pod_lines(proc.stdout, loglines.DONE)
    assert len(done) == 2 and len({line[-1].fields["weights_digest"] for line in done.values()}) == 1


def _scrape(port: int) -> dict[str, list]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(body)}


def _sample(families: dict, name: str, **labels) -> float:
    """The one sample called `name` (a family's own name, or `_total`, `_count` ... of one)."""
    [value] = [
        s.value
        for samples in families.values()
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    return value


def test_every_worker_serves_metrics_through_the_run(tmp_path):
    # The chart's default metrics.enabled: each launcher serves /metrics; read with
    # prometheus-client's own parser while training and once the run has ended.
    from tfmw.chart import render
    from tfmw.localrun.kubelet import LocalCluster
    from tfmw.localrun.podspec import build_pods, find_workload
    from tfmw.localrun.run import base_env, choose_network, metrics_enabled

    rendered = render.prepare(
        "local",
        ["training.config.steps=40", "training.config.checkpoint.everySteps=10", "training.config.logEverySteps=5"],
        release="metrics",
    )
    workload = find_workload(rendered.objects, "default")
    assert metrics_enabled(workload)
    pods = build_pods(workload, tmp_path / "metrics")
    network, described = choose_network("loopback", 2222, len(pods), metrics=True)  # reachable from here
    metrics = [network.metrics_port + j for j in range(len(pods))]
    assert f"metrics {metrics[0]}..{metrics[-1]}" in described
    cluster = LocalCluster(pods, network, base_env(), grace_seconds=20, out=lambda line: None)
    try:
        cluster.start()
        seen = cluster.wait_for_line(
            0, lambda line: bool(loglines.parse_kind(line, loglines.CHECKPOINT)) and "saved" in line, 300
        )
        assert seen is not None, cluster.states[0].lines[-20:]
        during = [_scrape(port) for port in metrics]
        assert cluster.wait(300).ok
        after = _scrape(metrics[0])
    finally:
        cluster.shutdown()
    for ordinal, families in enumerate(during):
        assert _sample(families, "tfmw_run_info", worker=str(ordinal), role="chief" if ordinal == 0 else "worker") == 1
        assert _sample(families, "tfmw_phase", tfmw_phase="Running") == 1
        assert _sample(families, "tfmw_step") >= 5 and _sample(families, "tfmw_total_steps") == 40
        assert _sample(families, "tfmw_examples_per_second") > 0
    chief = during[0]
    assert _sample(chief, "tfmw_last_checkpoint_step") >= 10
    assert _sample(chief, "tfmw_checkpoint_seconds_count") >= 1
    assert _sample(after, "tfmw_phase", tfmw_phase="Succeeded") == 1
    assert _sample(after, "tfmw_step") == 40
    productive = _sample(after, "tfmw_productive_seconds_total")
    badput = {s.labels["cause"]: s.value for s in after["tfmw_badput_seconds"] if s.name.endswith("_total")}
    assert badput["startup"] > 0 and badput["restart"] == 0 and badput["lostWork"] == 0
    assert _sample(after, "tfmw_goodput_ratio") == pytest.approx(
        productive / (productive + sum(badput.values())), abs=1e-3
    )
