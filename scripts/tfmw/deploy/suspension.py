"""The chart's suspend, done and waited for one way: `make suspend` (change.suspend), a change
Kueue refuses in place (apply, through zero) and the fault harness's `suspend` scenario
(tfmw.faults.disruptions) all upgrade the release's own values with `suspend: true` through the
checked, watched upgrade (upgrade.run), then wait until the workers are gone and the chief has
recorded the run Suspended; `make resume` and the harness undo it one way too (resume). It sits
below apply and change, which both use it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from entrypoint.lifecycle import Phase
from tfmw.deploy import observe, upgrade
from tfmw.deploy.release import Release, api, current_run, say, values_now


@dataclass(frozen=True)
class Suspension:
    """How a suspend ended: the run as recorded when the wait ended, its workers, and the
    seconds the wait allowed (the pods' terminationGracePeriodSeconds + 60)."""

    record: observe.RunRecord | None
    workers: observe.Workers
    waited: int

    @property
    def suspended(self) -> bool:
        return self.record is not None and self.record.phase is Phase.SUSPENDED


def grace_seconds(values: dict) -> int:
    """The workers' terminationGracePeriodSeconds in the release's values (the chart's 120 unset) (pure)."""
    return int(((values.get("workers") or {}).get("terminationGracePeriodSeconds")) or 120)


def is_done(pods_left: bool, record: observe.RunRecord | None) -> bool:
    """Whether a suspend has nothing left to wait for (pure): the workers are gone and the run is
    recorded Suspended, or there is nothing to record (no run recorded, or it had ended)."""
    return not pods_left and (record is None or record.phase is Phase.SUSPENDED or record.terminal)


def wait_until_suspended(rel: Release, workers: observe.Workers, seconds: float) -> observe.RunRecord | None:
    """Until the workers are gone and the chief has recorded Suspended (or `seconds` pass); once
    they are gone, also when there is nothing to record (no run recorded, or it had ended)."""
    client = api(rel.kube_context, rel.kubeconfig_env)
    deadline, record = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        record = current_run(client, workers)
        if is_done(bool(observe.list_pods(client, workers)), record):
            return record
        time.sleep(2)
    return record


def suspend_and_wait(
    rel: Release,
    helm: str,
    options: upgrade.Upgrade,
    values: dict | None = None,
    out: Callable[[str], None] = say,
) -> Suspension:
    """Upgrade the release, as deployed (`values`: read from helm when None), with `suspend:
    true`, and wait for the group to stop at its checkpoint and its pods to go. The caller says
    what an unfinished wait means (Suspension.suspended, pods still there)."""
    if values is None:
        values = values_now(rel, helm)
    suspended = upgrade.with_values(rel, values, {"suspend": True})
    workers = observe.workers_of(suspended.objects, rel.namespace)  # the run as deployed now
    asyncio.run(upgrade.run(rel, suspended, helm, options, report=False, out=out))
    waited = grace_seconds(values) + 60
    return Suspension(wait_until_suspended(rel, workers, waited), workers, waited)


def resume(
    rel: Release,
    helm: str,
    options: upgrade.Upgrade,
    values: dict | None = None,
    report: bool = True,
    out: Callable[[str], None] = say,
) -> int:
    """Upgrade the release, as deployed (`values`: read from helm when None), with `suspend:
    false`: its workers come back and the group goes on from its checkpoint."""
    if values is None:
        values = values_now(rel, helm)
    resumed = upgrade.with_values(rel, values, {"suspend": False})
    return asyncio.run(upgrade.run(rel, resumed, helm, options, report=report, out=out))
