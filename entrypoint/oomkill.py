"""Was the trainer OOM-killed? The container's memory cgroup says (standard library only).

On a node the container's memory limit is the kernel's: when the training process grows
past it, the kernel's OOM killer SIGKILLs the biggest process in the container's memory
cgroup, the trainer, and the launcher (PID 1, small) only sees `returncode == -9`, exactly
as for a `kill -9`. The cgroup counts its OOM kills: the supervisor reads the counter before
starting the trainer and again after a SIGKILL; if it went up, the cause is OOMKilled and
the message names the limit and the two values that fix it.

    cgroup v2: <root>/memory.events          `oom_kill N`; limit <root>/memory.max ("max": none)
    cgroup v1: <root>/memory/memory.oom_control `oom_kill N` (kernel >= 4.13);
               limit <root>/memory/memory.limit_in_bytes (about 2**63: none)

Inside a container <root> (/sys/fs/cgroup) is the container's own cgroup (runc bind-mounts
it on v1; a cgroup namespace on v2). Anything unreadable (no cgroup file system, an older
kernel, `make local` as plain processes) is "unknown" (None): the failure is reported as
before. The kernel counts the kill before it sends SIGKILL, so the counter is up by the time
the launcher reaps the child.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ROOT = "/sys/fs/cgroup"
OOM_KILLED = "OOMKilled"  # the cause's name, as the kubelet names a container the OOM killer ended
UNLIMITED = 1 << 62  # v1 reports "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712)
FIX = "raise workers.resources.limits.memory or lower training.config.batchSizePerReplica"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except (OSError, ValueError):
        return None


def _counter(text: str | None, key: str) -> int | None:
    """N of the `key N` line in a flat-keyed cgroup file (memory.events, memory.oom_control)."""
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return None


@dataclass(frozen=True)
class MemoryCgroup:
    """The memory cgroup under `root` (tests pass a folder of fake files)."""

    root: str = ROOT

    def _v2(self) -> bool:
        return os.path.exists(os.path.join(self.root, "memory.events"))

    def oom_kills(self) -> int | None:
        """How many processes the OOM killer has killed in this cgroup; None: unknown."""
        if self._v2():
            return _counter(_read(os.path.join(self.root, "memory.events")), "oom_kill")
        return _counter(_read(os.path.join(self.root, "memory", "memory.oom_control")), "oom_kill")

    def limit(self) -> int | None:
        """The memory limit in bytes; None: no limit, or unknown."""
        if self._v2():
            text = (_read(os.path.join(self.root, "memory.max")) or "").strip()
        else:
            text = (_read(os.path.join(self.root, "memory", "memory.limit_in_bytes")) or "").strip()
        if not text.isdigit():
            return None  # "max" (v2: no limit), empty, unreadable
        value = int(text)
        return value if 0 < value < UNLIMITED else None


def human_bytes(size: int) -> str:
    """As the limit was most likely written: 2147483648 -> '2.0 GiB', 1572864000 (1500Mi) ->
    '1500 MiB', 1000000000 (1G) -> '954 MiB'; what the kernel enforces, to the MiB."""
    gib, mib = 1 << 30, 1 << 20
    if size % gib == 0 or (size >= gib and size % mib):
        return f"{size / gib:.1f} GiB"
    if size >= mib:
        return f"{size / mib:.0f} MiB"
    return f"{size} bytes"


def oom_message(limit: int | None) -> str:
    """The one line that says why, and what to change."""
    if limit is None:  # no container limit: the node itself ran out of memory
        return (
            "the trainer was killed by the kernel's OOM killer (the container has no memory limit: the "
            "node ran out of memory): set workers.resources.limits.memory or lower "
            "training.config.batchSizePerReplica"
        )
    return (
        f"the trainer was killed by the kernel's OOM killer at the container's memory limit "
        f"({human_bytes(limit)}): {FIX}"
    )


def oom_cause(before: int | None, cgroup: MemoryCgroup) -> str | None:
    """After the trainer died by SIGKILL: 'OOMKilled: <message>' if the cgroup's OOM-kill
    counter went up since `before` (read before the trainer started); None if it did not, or
    either reading is unknown (then it was some other SIGKILL: a `kill -9`, the watchdog)."""
    if before is None:
        return None
    after = cgroup.oom_kills()
    if after is None or after <= before:
        return None
    return f"{OOM_KILLED}: {oom_message(cgroup.limit())}"
