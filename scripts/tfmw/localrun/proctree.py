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
