"""One launcher's run, as the policies of its life share it (docs/lifecycle.md).

`entrypoint.launcher` runs the life as a short sequence; each policy keeps its own file:
`regroup` (the group's size: read, watched, re-formed; the peer wait), `peerwatch` (peers not
running and why, peers lost with their node) and `ending` (record, scale to zero, idle). They
share what is here: the group as this launcher knows it (its TF_CONFIG parsed, encoded and
size-checked once), the run, the one API client, and the few things a policy may ask of the
launcher (say a line, see a stop, reach the supervisor).
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .cluster import TRAINING_TASK_TYPES, build_tf_config, check_tf_config_size, is_chief, task_hosts, worker_addresses
from .identity import PodIdentity
from .kubeapi import KubeAPI
from .lifecycle import Reason, RunState, StartPlan
from .peers import needed_peers
from .runowner import Ownership
from .settings import LauncherSettings
from .status import StatusRecorder
from .supervisor import Supervisor
from .tracker import RunTracker
from .waiting import Waiting, WaitingNote

JITTER = 0.2  # every periodic request waits its period +/- this fraction


def jittered(seconds: float) -> float:
    """A period with its jitter, so that launchers started together do not ask together."""
    return seconds * random.uniform(1 - JITTER, 1 + JITTER)


@dataclass(frozen=True)
class Group:
    """The training group as this launcher knows it: its TF_CONFIG (parsed, encoded and
    checked against the environment's size limit once), each task's host name in rank order,
    and this pod's identity (a StatefulSet pod's; None for a platform's TF_CONFIG)."""

    tf_config: dict
    encoded: str
    hosts: tuple[str, ...]
    identity: PodIdentity | None = None

    @classmethod
    def of(cls, tf_config: dict, identity: PodIdentity | None = None) -> Group:
        encoded = json.dumps(tf_config, separators=(",", ":"))
        check_tf_config_size(encoded)  # refused now, not as an exec error of the training command
        return cls(tf_config, encoded, tuple(task_hosts(tf_config)), identity)

    def at_size(self, settings: LauncherSettings, size: int) -> Group:
        """The same pod's group at `size` workers (a StatefulSet pod's only)."""
        assert self.identity is not None
        return Group.of(build_tf_config(replace(settings, replicas=size), self.identity), self.identity)

    def at_members(self, settings: LauncherSettings, members: tuple[int, ...]) -> Group:
        """This pod's group of `members` (ordinals, rank order) of the configured workers: an
        elastic epoch's (entrypoint.elastic); its task index is its place among them."""
        assert self.identity is not None and self.identity.ordinal in members
        addresses = worker_addresses(settings, self.identity.host_prefix)
        tf_config = {
            "cluster": {"worker": [addresses[o] for o in members]},
            "task": {"type": "worker", "index": members.index(self.identity.ordinal)},
        }
        return Group.of(tf_config, self.identity)

    @property
    def workers(self) -> int:
        return sum(len(v) for v in self.tf_config["cluster"].values())

    @property
    def rank(self) -> int:
        """This task's rank in the collective: the chief 0, then the workers in index order."""
        task = self.tf_config["task"]
        if is_chief(self.tf_config):
            return 0
        chiefs = len(self.tf_config["cluster"].get("chief") or [])
        return task["index"] + chiefs if task["type"] in TRAINING_TASK_TYPES else 0

    def hosts_to_wait_for(self) -> list[str]:
        """The peer names this task resolves before it starts TensorFlow (entrypoint.peers)."""
        return needed_peers(list(self.hosts), self.rank)


@dataclass(frozen=True)
class Hooks:
    """What a policy may ask of its launcher."""

    log: Callable[[str], None]  # one line of the pod's log (printed, and kept with the run)
    say: Callable[[str], None]  # one `tfmw launcher <text>` line
    stopping: threading.Event  # set once the pod is told to stop (SIGTERM)
    supervisor: Callable[[], Supervisor | None]  # the training command's supervisor, once there


@dataclass
class Run:
    """One launcher's view of the run, as the steps of its life share it."""

    group: Group
    settings: LauncherSettings
    platform: bool  # a platform (JobSet, TFJob, ...) owns the lifecycle: no run record
    api: KubeAPI | None  # the one API client (None: no API access)
    run_id: str
    run_dir: Path | None  # on mounted shared storage; None for an object store or no storage
    recorder: StatusRecorder
    recorded: RunState | None  # the status ConfigMap's record when this launcher started
    plan: StartPlan
    tracker: RunTracker
    unreadable: str | None  # why the COMPLETED marker could not be read, if so
    base_env: dict[str, str]  # the pod's environment: the training command's, without TF_CONFIG
    deadline: float | None  # training.activeDeadlineSeconds on time.monotonic() (lifecycle.RunClock)
    heartbeat: Path | None = None  # the trainer's heartbeat file, chosen before training
    resize_to: int | None = None  # the size a resize was asked for, until the group re-forms
    resized_from: int | None = None  # the size before the last resize (its new workers: from there up)
    in_peer_wait: bool = False  # in the DNS peer wait (its deadline: peers.timeoutSeconds)
    waiting: WaitingNote | None = field(default=None)  # the chief's one "waiting for workers" message
    ownership: Ownership | None = None  # OWNER as this start found it (entrypoint.runowner); None: not kept
    group_note: str = ""  # an elastic group below its size: `members 3/4 (elastic, micro-batches 4)`

    @property
    def identity(self) -> PodIdentity | None:
        return self.group.identity

    @property
    def workers(self) -> int:
        """The workers training together now (an elastic group's members)."""
        return self.group.workers

    @property
    def size(self) -> int:
        """The group's configured size (workers.replicas): what a resize changes. An elastic
        group may train with fewer (`workers`)."""
        return self.settings.replicas or self.group.workers

    @property
    def child_env(self) -> dict[str, str]:
        """The training command's environment."""
        return dict(self.base_env, TF_CONFIG=self.group.encoded)

    def waiting_state(self) -> Waiting:
        return Waiting(
            phase=self.tracker.state.phase,
            workers=self.size,
            resized_from=self.resized_from,
            in_peer_wait=self.in_peer_wait,
            peer_timeout_seconds=self.settings.peer_timeout_seconds,
        )


class Stopped(Exception):
    """SIGTERM while waiting (for peers, for the group's size): the pod is going away."""


class SizeChanged(Exception):
    """The group's size changed while waiting for its peers: wait for the new group instead."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


class Failure(Exception):
    """What no restart can fix: the run is Failed with this reason."""

    def __init__(self, reason: Reason, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class EndedElsewhere(Exception):
    """A peer recorded the run's end: this launcher adopts it."""

    def __init__(self, state: RunState):
        super().__init__(state.phase)
        self.state = state
