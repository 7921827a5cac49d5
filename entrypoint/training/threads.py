"""TensorFlow's thread pools sized to the CPUs the container may use, not to the node's cores.

TensorFlow sizes its intra-op, inter-op and tf.data pools to the cores it can schedule on (the
CPU affinity: every core of a 64-224-core GPU node), and knows nothing of the container's CFS
quota (`workers.resources.limits.cpu`). A pod limited to 8 CPUs on a 96-core node then runs 96
intra-op threads that share 8 CPUs of time per period: the kernel throttles the container for
most of each period, and a step's threads wait on each other across the throttled gaps.

So the trainer reads the quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`,
the smallest along the process's cgroup and its ancestors: the pod's and the container's) and
the affinity, and sizes every pool to the CPUs they allow, rounded up: intra-op, inter-op (at
least 2) and each tf.data pipeline's private pool. A user who set TensorFlow's own variables
(`TF_NUM_INTRAOP_THREADS`, `TF_NUM_INTEROP_THREADS`, in `workers.env`) keeps them. Pure:
TensorFlow is not imported here.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
USER_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
MIN_INTER_OP = 2


@dataclass(frozen=True)
class ThreadPlan:
    """The pools' sizes (None: TensorFlow's own) and why, for the one log line."""

    intra_op: int | None
    inter_op: int | None
    data: int | None
    why: str


def _v2_quota(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def _along(mount: Path, path: str, read) -> list[float]:
    """The quotas of the process's cgroup directory under `mount` and of its ancestors up to the
    mount. Inside a container the mount is often the container's own cgroup already (the path
    /proc/self/cgroup names is then not below it): the mount alone is read."""
    directory = mount / path.lstrip("/")
    if not directory.is_dir():
        directory = mount
    found = []
    while True:
        quota = read(directory)
        if quota is not None:
            found.append(quota)
        if directory == mount or mount not in directory.parents:
            return found
        directory = directory.parent


def cpu_quota(proc_self_cgroup: str, root: Path = CGROUP_ROOT) -> float | None:
    """The CPUs per period the CFS quota allows this process (1.5 for `limits.cpu: 1500m`), the
    smallest along its cgroups; None when nothing limits it. `proc_self_cgroup` is the text of
    /proc/self/cgroup."""
    quotas: list[float] = []
    for line in proc_self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # cgroup v2, the unified hierarchy
            quotas += _along(root, path, _v2_quota)
        elif "cpu" in controllers.split(","):
            for name in (controllers, "cpu", "cpu,cpuacct"):
                if (root / name).is_dir():
                    quotas += _along(root / name, path, _v1_quota)
                    break
    return min(quotas) if quotas else None


def plan(env: dict, quota: float | None, affinity: int) -> ThreadPlan:
    """The pools' sizes for a process allowed `quota` CPUs per period (None: no quota) on
    `affinity` schedulable cores; a pool whose TensorFlow variable `env` sets is left to it."""
    usable = max(1, min(affinity, math.ceil(quota - 1e-9) if quota is not None else affinity))
    source = f"cpu quota {quota:g} of {affinity} cores" if quota is not None else f"{affinity} schedulable cores"
    user = [name for name in USER_VARIABLES if env.get(name, "").strip()]
    intra = None if "TF_NUM_INTRAOP_THREADS" in user else usable
    # At least 2 inter-op threads: with one, an op that blocks its thread (a py_function, a
    # queue) holds up every other op of the step; TensorFlow itself never picks fewer here.
    inter = None if "TF_NUM_INTEROP_THREADS" in user else max(MIN_INTER_OP, usable)
    why = source + (f"; {', '.join(user)} set by the user" if user else "")
    return ThreadPlan(intra, inter, usable, why)


@functools.cache
def this_process() -> ThreadPlan:
    """The plan for this process, from its environment, /proc/self/cgroup and its affinity; read
    once (the trainer's set-up and each tf.data pipeline ask for it)."""
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        text = ""
    return plan(dict(os.environ), cpu_quota(text), len(os.sched_getaffinity(0)))
