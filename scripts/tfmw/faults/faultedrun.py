"""The one faulted run on a cluster (faulted_run) over what differs between runs (FaultedRun):
the chart's (tfmw.faults.cluster.ChartRun) and a peer's TFJob or JobSet (tfmw.peers.run)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from tfmw.chart.helmkit import ToolError
from tfmw.faults import disruptions
from tfmw.faults.analysis import FaultResult, fill_result
from tfmw.faults.kube import FaultError, Kube
from tfmw.faults.podlogs import (
    PodLogs,
    Stream,
    first_index_after,
    first_step_after,
    merge_incarnations,
    ready_for_fault,
)
from tfmw.k8s.api import ApiError


@dataclass
class Pods:
    """A run's workers as the harness follows them (PodLogs): `name` the StatefulSet's (or the
    workload's) name, `selector` their labels, `ordinal_of` a pod object's worker index (None: the
    StatefulSet's `<name>-<n>`), `since` when its measured start began (None: before the install)."""

    name: str
    selector: str
    ordinal_of: Callable[[dict], int | None] | None = None
    since: float | None = None


class FaultedRun:
    """What differs between faulted runs (faulted_run does the rest, the same for each): how the
    run is installed, how its victim gets the fault, what "ended" means and what is recorded at
    the end, and what is removed after it. The chart's run (ChartRun) and a peer's TFJob or
    JobSet (tfmw.peers.run) are the two. A step that cannot go on raises FaultError (or
    ApiError, or the checked deploy path's ToolError): the result's reason."""

    # No first step within the timeout: stop there and say so. Otherwise the wait for a
    # checkpoint and the fault step gives up later, saying why.
    needs_first_step = False

    def __init__(self, kube: Kube, namespace: str, result: FaultResult, timeout: float, out=lambda line: None):
        self.kube, self.namespace, self.result, self.timeout, self.out = kube, namespace, result, timeout, out
        self.logs: PodLogs | None = None  # set by faulted_run once the run is installed
        self.held: list[disruptions.Disruption] = []  # the disruptions to undo after the run

    def install(self) -> Pods:
        """Start the run in the namespace; its workers to follow."""
        raise NotImplementedError

    def fault(self) -> float:
        """Do the fault to the victim (the run is ready for it); the fault's time (monotonic)."""
        raise NotImplementedError

    def wait_end(self, fault_time: float):
        """Wait until the run has ended (at most the timeout); what its end was (None: not ended)."""
        raise NotImplementedError

    def record(self, started: float, fault_time: float, outcome) -> None:
        """Fill the result: `started` the install's start, `outcome` what wait_end said."""
        raise NotImplementedError

    def clean_up(self, own_namespace: bool) -> None:
        """Remove the run (the namespace, when it is the harness's own)."""
        if own_namespace:
            self.kube.delete_namespace(self.namespace)


def faulted_run(run: FaultedRun, fault_after_step: int, own_namespace: bool = True) -> None:
    """One faulted run on the cluster, its measurements in run.result: in run.namespace (made
    here, and removed after, when `own_namespace`), the run installed, every pod incarnation's
    log followed, the fault done once the chief has published a checkpoint and passed
    `fault_after_step`, the wait for the run's end, and what happened recorded. A FaultError
    (or ApiError, or ToolError) on the way is the result's reason; whatever happens, the disruptions held are
    undone, the logs closed and the run removed. Raises FaultError only when the namespace
    cannot be made."""
    kube, result = run.kube, run.result
    if own_namespace:
        kube.make_namespace(run.namespace)
    started = time.monotonic()
    try:
        pods = run.install()
        run.logs = PodLogs(kube, run.namespace, pods.name, pods.selector, out=run.out, ordinal_of=pods.ordinal_of)
        run.logs.start()
        since = started if pods.since is None else pods.since
        result.seconds_to_first_step = first_step_after(run.logs, since, run.timeout)
        if run.needs_first_step and math.isnan(result.seconds_to_first_step):
            raise FaultError(f"no first step within {run.timeout:g}s{_last_error(run.logs)}")
        wait_ready_for_fault(run.logs, fault_after_step, run.timeout)
        fault_time = run.fault()
        outcome = run.wait_end(fault_time)
        run.record(started, fault_time, outcome)
    except (FaultError, ApiError) as err:
        result.reason = str(err)
    except ToolError as err:  # the checked deploy path's refusal (a suspend's resume): the harness's one line
        result.reason = str(FaultError(str(err)))
    finally:
        for disruption in run.held:
            disruption.cleanup()
        if run.logs is not None:
            run.logs.stop()
        run.clean_up(own_namespace)


def _last_error(logs: PodLogs) -> str:
    return f" ({logs.last_error})" if logs.last_error else ""


def wait_ready_for_fault(logs: PodLogs, fault_after_step: int, timeout: float) -> None:
    """Until the chief has published a checkpoint and passed `fault_after_step`; FaultError
    when it has not within `timeout` seconds."""

    def checkpoint_and_step(pl: PodLogs):
        return ready_for_fault(merge_incarnations(pl.snapshot()).get(0, Stream()), fault_after_step)

    if logs.wait_for(checkpoint_and_step, timeout) is None:
        raise FaultError(f"never reached a checkpoint and step {fault_after_step} before the fault" + _last_error(logs))


def fill_from_logs(result: FaultResult, logs: PodLogs, started: float, fault_time: float) -> None:
    """The run's total time and what its trainers' lines say about the recovery (fill_result)."""
    time.sleep(1.0)  # a launcher's last lines (after `tfmw done`) arrive before the streams are read
    result.seconds_total = time.monotonic() - started
    streams = merge_incarnations(logs.snapshot())
    if 0 in streams:
        marks = {o: first_index_after(st.times, fault_time) for o, st in streams.items()}
        fill_result(result, streams, marks, fault_time)


def log_tail(logs: PodLogs, lines: int) -> list[str]:
    """Each incarnation's last `lines` lines, named by its pod and UID."""
    return [f"[{inc.name} {inc.uid[:8]}] {line}" for inc in logs.snapshot() for line in inc.lines[-lines:]]
