"""A process and everything below it: what a container's PID namespace holds.

A local pod has no PID namespace of its own, so stopping, freezing or killing "the container"
means signalling its whole process tree. Used by `make local`'s kubelet (kubelet.py).
"""

from __future__ import annotations

import os

import psutil


def descendants(root: int) -> list[int]:
    """root and every process below it (root first)."""
    try:
        return [root] + [child.pid for child in psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return [root]


def signal_tree(root: int, sig: int) -> None:
    """Send `sig` to root and every process below it (those already gone are skipped)."""
    for pid in descendants(root):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_tree(root: int, timeout: float = 10.0) -> list[int]:
    """SIGKILL root and every process below it, found before the first signal (a launcher's
    training command runs in its own session: killing the launcher's process group misses
    it), then wait until each is gone. Returns the PIDs still there after `timeout`."""
    procs = []
    for pid in descendants(root):
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return [proc.pid for proc in alive]
