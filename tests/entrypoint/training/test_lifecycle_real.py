"""A whole run's life with the real launcher and the real trainer (slow: real TensorFlow): two
StatefulSet-style workers on the loopback, a worker's trainer killed mid-run, the run still
Succeeds; the status ConfigMap, the Events and the scale subresource of a local HTTPS API
(tests/support/fakeapi.py) see each transition."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from workers import REPO, base_env, free_ports

from entrypoint.standby import WAITING_NAME
from tfmw.devcluster import fakeapi

pytestmark = pytest.mark.slow


TRAIN = [
    "--set",
    "model.name=mlp",
    "--set",
    "data.synthetic.inputShape=[8,8]",
    "--set",
    "export.enabled=false",
    "--set",
    "steps=200",
    "--set",
    "checkpoint.everySteps=20",
    "--set",
    "logEverySteps=10",
    "--set",
    "timeoutSeconds=30",
]


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def wait_for(condition, timeout: float, what: str, logs) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} never happened:\n" + "\n".join(p.read_text() for p in logs))
        time.sleep(0.2)


def test_a_killed_worker_is_restarted_and_the_run_succeeds_on_the_record(tmp_path):
    cert, key = fakeapi.make_certificate(tmp_path)
    api = fakeapi.FakeAPI(
        api_dir=tmp_path / "api",
        cert=cert,
        key=key,
        configmaps={"train-status": {"data": {}, "rv": 1}},
        replicas={"train": 2},
    )
    base = free_ports(1)[0]
    base = base if base < 65000 else 40000
    procs, logs = [], []
    try:
        for index in (0, 1):
            env = base_env(
                {
                    **api.env(),
                    "TFMW_POD_NAME": f"train-{index}",
                    "TFMW_NAMESPACE": "ml",
                    "TFMW_STATEFULSET": "train",
                    "TFMW_SERVICE": "train-headless",
                    "TFMW_REPLICAS": "2",
                    "TFMW_PORT": str(base),
                    "TFMW_LOOPBACK_PORTS": "1",
                    "TFMW_RUN_ID": "r1",
                    "TFMW_SHARED_DIR": str(tmp_path / "shared"),
                    "TFMW_STATUS_CONFIGMAP": "train-status",
                    "TFMW_POD_REVISION": "rev-a",
                    "TFMW_ON_SUCCESS": "scaleToZero",
                }
            )
            log = tmp_path / f"worker{index}.log"
            logs.append(log)
            with open(log, "w") as fh:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "entrypoint",
                            "run",
                            "--",
                            sys.executable,
                            "-m",
                            "entrypoint.training",
                            *TRAIN,
                        ],
                        cwd=REPO,
                        env=env,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                    )
                )

        # The chief has published the checkpoint of step 60 (a progress line of step 60 comes
        # before the boundary's vote and save: on a loaded machine the kill could land first).
        def reached():
            return any(int(m) >= 60 for m in re.findall(r"tfmw checkpoint saved step=(\d+)", logs[0].read_text()))

        wait_for(reached, 240, "checkpoint of step 60 saved", logs)
        # the launcher's children: the trainer (itself started as a warm standby, the first
        # attempt's) and, once it trains, the next warm standby, waiting with TensorFlow
        # imported under the name WAITING_NAME
        trainer = [c for c in children(procs[1].pid) if Path(f"/proc/{c}/comm").read_text().strip() != WAITING_NAME]
        assert len(trainer) == 1
        os.kill(trainer[0], signal.SIGKILL)  # the trainer dies, its launcher restarts it in place
        wait_for(lambda: all("tfmw launcher idle:" in log.read_text() for log in logs), 300, "both idle", logs)

        status = api.status("train-status")
        assert (status["phase"], status["reason"], status["step"], status["totalSteps"]) == (
            "Succeeded",
            "Completed",
            "200",
            "200",
        )
        assert status["lastCheckpointStep"] == "200" and int(status["restarts"]) >= 1
        assert float(status["loss"]) > 0
        reasons = [e["reason"] for e in api.events]
        assert reasons[0] == "Started" and reasons[-1] == "Succeeded" and "Restarted" in reasons
        restarted = next(e for e in api.events if e["reason"] == "Restarted")
        # The chief learns of the loss as UnavailableError (the heartbeat), or as AbortedError
        # when the restarted worker reconnects first ("a different incarnation"): both name it.
        assert re.match(r"worker 1 lost: (UnavailableError|AbortedError): ", restarted["message"]), restarted["message"]
        resumed_from = int(restarted["message"].rsplit("resuming from step ", 1)[1])
        assert resumed_from >= 60 and resumed_from % 20 == 0
        assert api.replicas["train"] == 0  # released by the chief
        started = [line for line in logs[1].read_text().splitlines() if "tfmw launcher start standby=yes" in line]
        # the first attempt ran in the standby started with the launcher, the restart in the next one
        assert "started with the launcher" in started[0], started
        assert any("the waiting process runs the training command" in line for line in started[1:]), started
        assert "tfmw launcher scaled to zero: statefulset/train has 0 replicas" in logs[0].read_text()
        for proc in procs:  # the StatefulSet controller deletes the idle pods
            proc.send_signal(signal.SIGTERM)
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        api.close()
