"""Start N trainer processes on loopback as one MWMS group (distinct ports, shared dir)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import repo

from entrypoint import loglines

REPO = str(repo.REPO)  # a str: the trainer tests join and pass it as cwd

QUIET_TF_ENV = {
    "OMP_NUM_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "CUDA_VISIBLE_DEVICES": "",
    "PYTHONUNBUFFERED": "1",
}


def free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        ports.append(s.getsockname()[1])
    for s in sockets:
        s.close()
    return ports


def tf_config(ports: list[int], index: int) -> str:
    return json.dumps(
        {"cluster": {"worker": [f"localhost:{p}" for p in ports]}, "task": {"type": "worker", "index": index}}
    )


def base_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(QUIET_TF_ENV)
    env.update(extra or {})
    return env


@dataclass
class Group:
    procs: list[subprocess.Popen]
    logs: list[str]
    outputs: list[str] = field(default_factory=list)

    def wait(self, timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=max(deadline - time.monotonic(), 1)))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"workers did not finish in {timeout}s:\n" + self.read_all()) from None
        self.outputs = [self.read(i) for i in range(len(self.procs))]
        return codes

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def read(self, i: int) -> str:
        with open(self.logs[i], encoding="utf-8", errors="replace") as f:
            return f.read()

    def read_all(self) -> str:
        return "\n".join(f"--- worker {i} ---\n{self.read(i)}" for i in range(len(self.procs)))


def start_group(
    cmd: list[str],
    workers: int,
    log_dir: str,
    env: dict | None = None,
    tag: str = "run",
    per_worker_env: list[dict] | None = None,
) -> Group:
    ports = free_ports(workers)
    procs, logs = [], []
    for i in range(workers):
        log_path = os.path.join(log_dir, f"{tag}-worker{i}.log")
        with open(log_path, "w") as log_file:
            procs.append(
                subprocess.Popen(
                    cmd,
                    cwd=REPO,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=base_env(
                        {
                            **(env or {}),
                            **(per_worker_env[i] if per_worker_env else {}),
                            "TF_CONFIG": tf_config(ports, i),
                        }
                    ),
                )
            )
        logs.append(log_path)
    return Group(procs, logs)


def trainer_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "entrypoint.training", *args]


def parse_line(output: str, kind: str) -> list[dict]:
    """The fields of every `tfmw <kind> k=v ...` line in `output` (entrypoint.loglines)."""
    return [parsed.fields for parsed in loglines.find(output.splitlines(), kind)]


# Runs main() and reports whether tensorflow got imported: refusals must not pay for it.
_PROBE = (
    "import sys; from entrypoint.training.__main__ import main; rc = main(sys.argv[1:]); "
    "sys.stderr.write('TF_IMPORTED\\n' if 'tensorflow' in sys.modules else ''); sys.exit(rc)"
)


def run_trainer(args, env_extra=None, tmp_path=None):
    env = base_env(env_extra)
    env.setdefault("TFMW_SHARED_DIR", str(tmp_path))
    env.pop("TFMW_TRAINING_CONFIG", None)
    env.pop("TF_CONFIG", None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-c", _PROBE, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
