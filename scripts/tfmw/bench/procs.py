"""Start benchmark processes: free loopback ports, TF_CONFIG per worker, one-thread env."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tfmw import REPO

PY = sys.executable

# One intra-op and one inter-op thread per process: N workers on N cores compare like with like.
ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1"}
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}


class BenchError(Exception):
    """A benchmark step failed; str() is one line saying which and why."""


def free_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel says are free right now (bound then released)."""
    sockets, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def tf_config(ports: list[int], index: int) -> str:
    return json.dumps(
        {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": index}},
        separators=(",", ":"),
    )


def base_env(extra: dict | None = None, one_thread: bool = True) -> dict:
    env = dict(os.environ)
    for key in ("TF_CONFIG", "TFMW_HEARTBEAT_FILE"):
        env.pop(key, None)
    env.update(QUIET)
    if one_thread:
        env.update(ONE_THREAD)
    env.update(extra or {})
    return env


def run_workers(
    module_args: list[str],
    workers: int,
    timeout: float,
    env_extra: dict | None = None,
    one_thread: bool = True,
    gpus: int = 0,
) -> list[str]:
    """Run `python -m <module_args>` as `workers` MWMS processes on loopback; return each one's
    stdout. Raises BenchError (with the tail of the failing worker's output) on failure."""
    ports = free_ports(workers)
    procs = []
    for i in range(workers):
        extra = dict(env_extra or {}, TF_CONFIG=tf_config(ports, i))
        if gpus:
            first = i * gpus
            extra.update(CUDA_VISIBLE_DEVICES=",".join(str(first + g) for g in range(gpus)), TFMW_BENCH_GPUS=str(gpus))
        procs.append(
            subprocess.Popen(
                [PY, "-m", *module_args],
                cwd=REPO,
                env=base_env(extra, one_thread),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for i, proc in enumerate(procs):
            try:
                out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                raise BenchError(
                    f"{module_args[0]}: worker {i} of {workers} did not finish in {timeout:.0f}s"
                ) from None
            outputs.append(out)
            if proc.returncode != 0:
                tail = " | ".join(out.strip().splitlines()[-3:])
                raise BenchError(f"{module_args[0]}: worker {i} of {workers} exited {proc.returncode}: {tail}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outputs


def proc_usage(pids: list[int]) -> tuple[float, float]:
    """(resident MiB, CPU seconds) of these processes, summed, from /proc."""
    rss, cpu = 0.0, 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        rss += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 1024
        cpu += (int(stat[11]) + int(stat[12])) / ticks
    return rss, cpu
