"""Supervisor: restart in place on retryable failures, stop on permanent ones, watchdog,
completion, signal forwarding. Real child processes (small Python scripts), no TF."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from entrypoint.supervisor import (DONE, PERMANENT, RETRY, Supervisor, SupervisorConfig,
                                   backoff_seconds, classify_exit)


def test_classify_exit():
    assert classify_exit(0) == DONE
    assert classify_exit(2) == PERMANENT
    assert classify_exit(75) == RETRY
    assert classify_exit(1) == RETRY
    assert classify_exit(-9) == RETRY


def test_backoff_is_exponential_and_capped():
    assert [backoff_seconds(n) for n in (1, 2, 3, 4, 10)] == [1, 2, 4, 8, 30]


def script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def make(tmp_path, command, **kw):
    logs = []
    cfg = SupervisorConfig(command=command, env=dict(os.environ, TFMW_RUN_ID="r1"),
                           run_dir=kw.pop("run_dir", tmp_path / "run"),
                           heartbeat_file=tmp_path / "hb", poll_seconds=0.05,
                           backoff_first_seconds=0.01, exit_on_completion=True,
                           log=logs.append, **kw)
    return Supervisor(cfg), logs


# A child that fails with the given codes on successive attempts (counted in a file).
FLAKY = """
    import pathlib, sys
    counter = pathlib.Path(sys.argv[0]).with_name("attempts")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    codes = {codes}
    sys.exit(codes[n] if n < len(codes) else 0)
"""


def attempts(tmp_path):
    return int((tmp_path / "attempts").read_text())


def test_retryable_failures_restart_in_place_until_success(tmp_path):
    sup, logs = make(tmp_path, script(tmp_path, FLAKY.format(codes=[75, 1])))
    assert sup.run() == 0
    assert attempts(tmp_path) == 3
    assert any("restarting training in place" in l and "exit 75" in l for l in logs)
    assert any(l.startswith("tfmw completed run=r1") for l in logs)


def test_bad_training_config_is_not_retried(tmp_path):
    sup, logs = make(tmp_path, script(tmp_path, FLAKY.format(codes=[2])))
    assert sup.run() == 2
    assert attempts(tmp_path) == 1
    assert "not retrying" in logs[-1]


def test_retries_exhausted_exit_5_with_reason(tmp_path):
    sup, logs = make(tmp_path, script(tmp_path, FLAKY.format(codes=[1] * 10)), max_restarts=2)
    assert sup.run() == 5
    assert attempts(tmp_path) == 3
    assert "giving up: 2 restarts without progress (limit 2)" in logs[-1]
    assert "training exited with 1" in logs[-1]


def test_completed_run_is_never_trained_again(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "COMPLETED").write_text(json.dumps({"steps": 10, "finalLoss": 0.1, "model": "/m"}))
    sup, logs = make(tmp_path, script(tmp_path, FLAKY.format(codes=[])), run_dir=run_dir)
    assert sup.run() == 0
    assert not (tmp_path / "attempts").exists()
    assert logs[0] == "tfmw completed run=r1 steps=10 final_loss=0.1 model=/m"


def test_hang_watchdog_kills_and_restarts(tmp_path):
    body = """
        import pathlib, sys, time
        counter = pathlib.Path(sys.argv[0]).with_name("attempts")
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
        if n == 0:
            time.sleep(60)  # silent, no heartbeat: a hang
    """
    sup, logs = make(tmp_path, script(tmp_path, body), hang_timeout_seconds=1, max_restarts=2)
    start = time.monotonic()
    assert sup.run() == 0
    assert time.monotonic() - start < 20
    assert attempts(tmp_path) == 2
    assert any("watchdog: no training progress" in l for l in logs)
    assert any("hang: no progress for 1s" in l for l in logs)


def test_heartbeat_counts_as_progress(tmp_path):
    # Writes a rising step to the heartbeat file, silently, for longer than the timeout.
    body = """
        import os, time, pathlib
        hb = pathlib.Path(os.environ["TFMW_HEARTBEAT_FILE"])
        for step in range(1, 13):
            hb.write_text(str(step)); time.sleep(0.25)
    """
    sup, logs = make(tmp_path, script(tmp_path, body), hang_timeout_seconds=1)
    assert sup.run() == 0
    assert not any("watchdog" in l for l in logs)


def test_progress_resets_the_restart_budget(tmp_path):
    # Every attempt makes progress (heartbeat) then dies: the limit counts only
    # failures without progress, so a long job survives many preemptions.
    body = """
        import os, pathlib, sys, time
        counter = pathlib.Path(sys.argv[0]).with_name("attempts")
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
        pathlib.Path(os.environ["TFMW_HEARTBEAT_FILE"]).write_text(str(n + 1))
        time.sleep(0.2)
        sys.exit(75 if n < 4 else 0)
    """
    sup, _ = make(tmp_path, script(tmp_path, body), max_restarts=1)
    assert sup.run() == 0
    assert attempts(tmp_path) == 5


def test_sigterm_is_forwarded_and_nothing_restarts(tmp_path):
    body = """
        import signal, sys, time, pathlib
        def stop(*_):
            pathlib.Path(sys.argv[0]).with_name("got-term").write_text("yes")
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(60)
    """
    sup, logs = make(tmp_path, script(tmp_path, body))
    threading.Timer(1.5, sup.request_stop).start()
    assert sup.run() == 143
    assert (tmp_path / "got-term").read_text() == "yes"
    assert sum("starting training" in l for l in logs) == 1


def test_launcher_cli_supervises_and_forwards_sigterm(tmp_path):
    child = tmp_path / "child.py"
    child.write_text("import json,os,time\nprint('TF_CONFIG', os.environ['TF_CONFIG'], flush=True)\n"
                     "time.sleep(60)\n")
    env = {"TFMW_POD_NAME": "w-0", "TFMW_NAMESPACE": "ns", "TFMW_SERVICE": "svc",
           "TFMW_REPLICAS": "1", "TFMW_LOOPBACK_PORTS": "1", "PATH": os.environ["PATH"]}
    proc = subprocess.Popen([sys.executable, "-m", "entrypoint", "run", "--", sys.executable,
                             str(child)], env=env, stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("TF_CONFIG"):
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert json.loads(lines[-1].split(" ", 1)[1])["cluster"]["worker"] == ["127.0.0.1:2222"]


def test_chief_records_completion_for_a_user_command(tmp_path):
    sup, _ = make(tmp_path, script(tmp_path, FLAKY.format(codes=[])), is_chief=True)
    assert sup.run() == 0
    record = json.loads((tmp_path / "run" / "COMPLETED").read_text())
    assert record["by"] == "launcher"
    # ... and the next start of any pod of this run trains nothing.
    again, logs = make(tmp_path, script(tmp_path, FLAKY.format(codes=[])))
    assert again.run() == 0
    assert attempts(tmp_path) == 1
    assert logs[0].startswith("tfmw completed run=r1")


def test_non_chief_does_not_record_completion(tmp_path):
    sup, _ = make(tmp_path, script(tmp_path, FLAKY.format(codes=[])), is_chief=False)
    assert sup.run() == 0
    assert not (tmp_path / "run" / "COMPLETED").exists()
