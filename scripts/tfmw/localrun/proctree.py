"""A process and everything below it, from /proc: what a container's PID namespace holds.

A local pod has no PID namespace of its own, so stopping, freezing or killing "the container"
means signalling its whole process tree. Used by `make local`'s kubelet (kubelet.py).
"""

from __future__ import annotations

import os


def descendants(root: int) -> list[int]:
    """root and every process below it, from /proc (children first found, root first)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def signal_tree(root: int, sig: int) -> None:
    """Send `sig` to root and every process below it (those already gone are skipped)."""
    for pid in descendants(root):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
