"""Elastic membership: which workers train together, as a pure rule (docs/lifecycle.md, "Elastic
epochs"; the files are entrypoint.elastic's).

The model is torch elastic's rendezvous (torch/distributed/elastic/rendezvous): a group forms
from the workers that can run, between `min_nodes` and `max_nodes`, and re-forms when one is
lost or one more can join; each forming is numbered (its "round", here the epoch) and a worker
trains only in the round it joined. What differs: MultiWorkerMirroredStrategy cannot change its
members while it runs, so every change is a restart of the group from its last checkpoint, and
the global batch never changes: N configured workers x k micro-batches per step is kept by M'
members x k' micro-batches, N*k = M'*k'. A size whose k' is not a whole number is never used
(refused at install when no size can shrink; else skipped, and said).

An epoch is (number, members in rank order, N). Member 0 is the chief, whichever ordinal it is.
The decider is the lowest ordinal whose launcher is alive: `decide` is what it does with what it
saw (pure); claiming the next epoch is fenced by the epoch's number (entrypoint.elastic).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

# The configured group size N the launcher gives an elastic run's trainer (unset: not elastic).
ELASTIC_REPLICAS_ENV = "TFMW_ELASTIC_REPLICAS"


@dataclass(frozen=True)
class Epoch:
    """One forming of the group: `members` (ordinals, rank order: member 0 is the chief) of a
    group configured at `replicas` workers."""

    number: int
    members: tuple[int, ...]
    replicas: int
    reason: str = "start"  # start | shrink | grow | reform | resize
    by: int = -1  # the ordinal that claimed it (-1: the implicit first epoch)

    @classmethod
    def first(cls, replicas: int) -> Epoch:
        """Epoch 0, never written: every configured worker."""
        return cls(0, tuple(range(replicas)), replicas)

    def to_json(self) -> dict:
        return {
            "epoch": self.number,
            "members": list(self.members),
            "replicas": self.replicas,
            "reason": self.reason,
            "by": self.by,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> Epoch:
        members = data["members"]
        if not isinstance(members, list) or not all(type(m) is int and m >= 0 for m in members) or not members:
            raise ValueError(f"members {members!r} is not a list of ordinals")
        return cls(int(data["epoch"]), tuple(members), int(data["replicas"]), str(data["reason"]), int(data["by"]))

    def rank_of(self, ordinal: int) -> int | None:
        return self.members.index(ordinal) if ordinal in self.members else None


def keeps_batch(replicas: int, micro_batches: int, size: int) -> bool:
    """Can `size` workers take the global batch of `replicas` x `micro_batches` exactly?"""
    return size >= 1 and (replicas * micro_batches) % size == 0


def member_micro_batches(replicas: int, micro_batches: int, size: int) -> int:
    """k' = N*k / M': each member's micro-batches per step (ValueError when not whole)."""
    if not keeps_batch(replicas, micro_batches, size):
        raise ValueError(
            f"{size} workers cannot take {replicas} x {micro_batches} micro-batches per step in equal shares"
        )
    return replicas * micro_batches // size


def usable_sizes(replicas: int, micro_batches: int, minimum: int) -> list[int]:
    """The group sizes from `minimum` to `replicas` that keep the global batch, smallest first."""
    return [m for m in range(max(minimum, 1), replicas + 1) if keeps_batch(replicas, micro_batches, m)]


def bounds_problem(replicas: int, micro_batches: int, minimum: int) -> str | None:
    """Why training.elastic.minReplicas cannot work with this group, in one line; None if it can."""
    where = f"training.elastic.minReplicas={minimum}"
    if minimum < 1:
        return f"{where} must be at least 1 (leave it unset, null, to turn elastic training off)"
    if minimum >= replicas:
        return (
            f"{where} must be below workers.replicas={replicas}: a group that cannot shrink is not "
            "elastic (lower it, or leave it unset to turn elastic training off)"
        )
    if usable_sizes(replicas, micro_batches, minimum) == [replicas]:
        total = replicas * micro_batches
        fit = [m for m in range(minimum, replicas) if m > 0]
        return (
            f"{where}: no group of {', '.join(map(str, fit))} workers keeps the global batch of "
            f"{replicas} workers x {micro_batches} micro-batches ({total} micro-batches per step do not "
            f"split evenly); set training.config.gradientAccumulationSteps to a multiple of "
            f"{fit[-1]}, or minReplicas to a divisor of {total}"
        )
    return None


class Kind(enum.Enum):
    KEEP = "keep"  # the epoch stands (every member runs, or one is missing within the grace)
    WAIT = "wait"  # members are lost, but too few workers run to train: wait for capacity
    SHRINK = "shrink"
    GROW = "grow"
    REFORM = "reform"  # as many members, another set (a member lost, a waiting worker joins)
    RESIZE = "resize"  # workers.replicas changed: a new epoch at the new size


@dataclass(frozen=True)
class Change:
    kind: Kind
    members: tuple[int, ...] = ()
    why: str = ""

    @property
    def claims(self) -> bool:
        """Does the decider claim a new epoch?"""
        return self.kind in (Kind.SHRINK, Kind.GROW, Kind.REFORM, Kind.RESIZE)


def decide(
    epoch: Epoch,
    alive: frozenset[int],
    absent_seconds: Mapping[int, float],
    replicas: int,
    micro_batches: int,
    minimum: int,
    grace_seconds: float,
) -> Change:
    """What the decider does with what it saw: `alive` (ordinals whose launcher runs), for each
    member not alive how long it has been gone, the configured N, k and minReplicas."""
    minimum = min(minimum, replicas)  # resized below minReplicas (kubectl scale): the whole group
    running = sorted(o for o in alive if 0 <= o < replicas)
    fitting = [m for m in usable_sizes(replicas, micro_batches, minimum) if m <= len(running)]
    size = fitting[-1] if fitting else 0
    chosen = tuple(running[:size])
    left_out = running[size:]
    skipped = (
        f"; {len(running)} can run but {len(running)} x k' != {replicas * micro_batches} micro-batches, "
        f"so {', '.join(map(str, left_out))} wait"
        if left_out and size
        else ""
    )
    if epoch.replicas != replicas:
        if not size:
            return Change(Kind.WAIT, why=f"resized to {replicas} workers; {len(running)} run, fewer than {minimum}")
        return Change(Kind.RESIZE, chosen, f"workers.replicas {epoch.replicas} -> {replicas}{skipped}")
    missing = [m for m in epoch.members if m not in alive]
    overdue = [m for m in missing if absent_seconds.get(m, float("inf")) >= grace_seconds]
    if missing and not overdue:
        return Change(Kind.KEEP, epoch.members, f"waiting up to {grace_seconds:g}s for {_names(missing)}")
    if chosen == epoch.members:
        return Change(Kind.KEEP, epoch.members)
    if not size:
        return Change(
            Kind.WAIT,
            why=f"{_names(overdue)} not running for {grace_seconds:g}s and only {len(running)} of {replicas} "
            f"workers run, fewer than training.elastic.minReplicas={minimum}: waiting for capacity",
        )
    if missing and len(chosen) < len(epoch.members):
        kind = Kind.SHRINK
        why = f"{_names(overdue)} not running for {grace_seconds:g}s"
    elif len(chosen) > len(epoch.members):
        kind = Kind.GROW
        why = f"{_names(sorted(set(chosen) - set(epoch.members)))} running again"
    elif len(chosen) < len(epoch.members):
        # every member runs, yet fewer are chosen: cannot happen (running covers the members)
        return Change(Kind.KEEP, epoch.members)
    else:
        if not missing:
            return Change(Kind.KEEP, epoch.members)  # same size, members all run: nothing to gain
        kind = Kind.REFORM
        joining = _names(sorted(set(chosen) - set(epoch.members)))
        why = f"{_names(overdue)} not running for {grace_seconds:g}s, {joining} running"
    return Change(kind, chosen, why + skipped)


def _names(ordinals) -> str:
    ordinals = list(ordinals)
    return ("worker " if len(ordinals) == 1 else "workers ") + ", ".join(map(str, ordinals))


def describe(epoch: Epoch, micro_batches: int) -> str:
    """`members 3/4 (elastic, micro-batches 4)`: what the status and the log say."""
    k = member_micro_batches(epoch.replicas, micro_batches, len(epoch.members))
    return f"members {len(epoch.members)}/{epoch.replicas} (elastic, micro-batches {k})"
