"""The launcher in a thread against fakeapi's HTTPS server, with small training commands that
print what the trainer prints (tests of the launcher, the kept log, the status)."""

from __future__ import annotations

import os
import sys
import textwrap
import threading
import time
from pathlib import Path

from entrypoint.launcher import Launcher

SUCCEEDS = """
    print("tfmw start run=r1 worker=0/1 replicas=1 resume_step=0 steps=40", flush=True)
    print("tfmw progress step=20/40 epoch=1 loss=0.5000 examples_per_sec=10.0", flush=True)
    print("tfmw checkpoint saved step=20 path=/x/ckpt-20", flush=True)
    print("tfmw progress step=40/40 epoch=2 loss=0.2500 examples_per_sec=10.0", flush=True)
    print("tfmw checkpoint saved step=40 path=/x/ckpt-40", flush=True)
    print("tfmw done steps=40 final_loss=0.2500 examples_per_sec=10.0 model=- weights_digest=abc", flush=True)
"""


def command(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def attempts(tmp_path: Path) -> int:
    counter = tmp_path / "attempts"
    return int(counter.read_text()) if counter.exists() else 0


# The chart's worker selector labels, as TFMW_POD_SELECTOR names them (the pods the chief lists).
WORKER_LABELS = {"app.kubernetes.io/instance": "r1", "app.kubernetes.io/component": "worker"}


def pod_env(fake, tmp_path, pod="train-0", replicas=1, **extra) -> dict:
    return {
        "TFMW_POD_NAME": pod,
        "TFMW_NAMESPACE": "ml",
        "TFMW_STATEFULSET": "train",
        "TFMW_SERVICE": "train-headless",
        "TFMW_POD_SELECTOR": ",".join(f"{k}={v}" for k, v in sorted(WORKER_LABELS.items())),
        "TFMW_REPLICAS": str(replicas),
        "TFMW_LOOPBACK_PORTS": "1",
        "TFMW_RUN_ID": "r1",
        "TFMW_SHARED_DIR": str(tmp_path / "shared"),
        "TFMW_STATUS_CONFIGMAP": "train-status",
        "TFMW_POD_REVISION": "rev-a",
        "PATH": os.environ["PATH"],
        **fake.env(),
        **extra,
    }


class Run:
    """A launcher in a thread, stopped (as by SIGTERM) once it idles."""

    def __init__(self, env, cmd, **kw):
        self.logs: list[str] = []
        self.launcher = Launcher(
            env,
            cmd,
            log=self.logs.append,
            flush_seconds=10,
            idle_retry=(0.2, 1),
            api_timeout=kw.pop("api_timeout", 2.0),
            **kw,
        )
        self.code = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self.code = self.launcher.run()

    def until(self, prefix: str, timeout: float = 60) -> Run:
        if not self.thread.is_alive() and self.code is None:
            self.thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.thread.is_alive():
            if any(line.startswith(prefix) for line in self.logs):
                return self
            time.sleep(0.02)
        assert any(line.startswith(prefix) for line in self.logs), f"no {prefix!r} line:\n" + "\n".join(self.logs)
        return self

    def stop(self) -> int:
        self.launcher.request_stop()
        self.thread.join(30)
        assert not self.thread.is_alive()
        return self.code

    def line(self, prefix: str) -> str:
        return next(line for line in self.logs if line.startswith(prefix))
