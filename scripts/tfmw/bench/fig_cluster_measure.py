"""Figure 6 measured (fig_cluster says what): the cluster's start, the chart's release on it and
`make local` beside it, the fault pairs, the voluntary disruptions, the resizes and the node
partition; and the figure's entry."""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from entrypoint.lifecycle import rfc3339
from tfmw.chart.helmkit import ToolError
from tfmw.devcluster import controlplane
from tfmw.faults import cluster as fault_cluster
from tfmw.faults import local as fault_local
from tfmw.faults.kube import FaultError
from tfmw.k8s.api import ApiError, ns_path
from tfmw.localrun.podspec import LocalRunError

from . import fig_cluster, fig_cluster_report
from .cluster_kit import (
    checked_args,
    cluster_down,
    cluster_parts,
    cluster_up,
    fresh_namespace,
    has_first_step,
    helm_run,
    pods_line,
    run_sets,
    wait_until,
)
from .fig_cluster import (
    CLUSTER_FAULT,
    DISRUPTIONS,
    FAULT_AFTER_STEP,
    FAULT_CHECKPOINT_EVERY,
    FAULT_STEPS,
    FAULT_TIMEOUT,
    LOCAL_FAULT,
    NAN,
    NODE_FAULT,
    RESIZE_EVERY,
    RESIZE_SETS,
    RESIZES,
    WORKERS,
    ClusterRound,
    Resize,
    Summary,
    fault_pair,
    not_counted,
    resize_marks,
    running_workers,
    summarize,
    wants_second_up,
)
from .fig_launcher import time_to_first_step
from .figure import BenchRun, measured
from .procs import PY, BenchError, base_env

TITLE = "Figure 6: the local Kubernetes cluster"
# what one_measurement shows and draws: the figure's table and plot (fig_cluster's)
HEADERS, table_rows, plot = fig_cluster.HEADERS, fig_cluster.table_rows, fig_cluster.plot


def run_figure(bench: BenchRun) -> str:
    return measured(
        bench, sys.modules[__name__], "Figure 6: the local cluster", "fig6_cluster.png", fig_cluster_report.section
    )


def measure_cluster_round(state, round_index: int, log=print) -> tuple[float, float, float]:
    """(helm install seconds, return -> pods Running, install start -> first step) of one release
    in a namespace of its own, deleted afterwards."""

    namespace = f"bench-{round_index}-{os.getpid()}"
    release = "bench"
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker"
    args = checked_args(release, namespace, run_sets(f"bench-cluster-{round_index}"))
    with fresh_namespace(state, namespace, log) as api:
        log(f"  figure 6: round {round_index + 1}: helm install on the cluster")
        started = time.monotonic()
        helm_run(state, *args)
        returned = time.monotonic()
        wait_until(
            lambda: running_workers(api.items(ns_path(namespace, "pods"), labelSelector=selector)) == WORKERS,
            120,
            "both worker pods Running",
        )
        running = time.monotonic()
        chief = f"{release}-tf-multiworker-0"

        def chief_stepped() -> bool:
            try:
                text = api.request("GET", ns_path(namespace, "pods", chief) + "/log", raw=True)
            except ApiError:
                return False  # the container's log is not there yet
            return has_first_step(text.decode(errors="replace"))

        wait_until(chief_stepped, 300, "the chief's first training step")
        first_step = time.monotonic()
        return returned - started, running - returned, first_step - started


def _fault_line(where: str, result) -> str:
    return (
        f"  figure 6: {where} {result.scenario}: "
        f"{'recovered' if result.completed else 'NOT recovered: ' + result.reason}"
        f"; fault at step {result.step_at_fault}, resumed from {result.resume_step}, "
        f"fault → resumed {result.seconds_to_resume:.1f} s"
    )


def measure_cluster_fault(state, round_index: int, log=print, scenario: str = CLUSTER_FAULT):
    """The fault harness's `delete-worker` (or `scenario`) on the figure's cluster, in a
    namespace of its own; its FaultResult."""

    namespace = f"bench-{scenario}-{round_index}-{os.getpid()}"[:63]
    log(f"  figure 6: round {round_index + 1}: {scenario} on the cluster (scripts/tfmw/faults --cluster)")
    last_lines = collections.deque(maxlen=40)  # the pods' last lines, shown if the run fails
    with fresh_namespace(state, namespace, log):
        try:
            result = fault_cluster.run_cluster_scenario(
                scenario,
                Path(state.kubeconfig),
                namespace=namespace,
                release="bench-fault",
                steps=FAULT_STEPS,
                checkpoint_every=FAULT_CHECKPOINT_EVERY,
                fault_after_step=FAULT_AFTER_STEP,
                timeout=FAULT_TIMEOUT,
                out=last_lines.append,
            )
        except (ToolError, FaultError) as err:
            raise BenchError(f"figure 6: {scenario}: {err}") from None
        if not result.completed:
            log("\n".join(last_lines) or "  figure 6: (no line from the pods)")
            log(pods_line(state, namespace))
    log(_fault_line("cluster", result) + f", fault → the replacement pod Running {result.seconds_to_pod_running:.1f} s")
    return result


def _resize_once(state, api, namespace: str, release: str, workers: tuple, log=print) -> Resize:
    """`helm upgrade` of the running release to workers[1], then the chief's log until the
    group's first step at that size."""
    chief = f"{release}-tf-multiworker-0"
    status = ns_path(namespace, "configmaps", f"{release}-tf-multiworker-status")
    log(f"  figure 6: resize {workers[0]} -> {workers[1]} workers (helm upgrade)")
    upgraded_at = time.time()
    helm_run(state, *_release_args("upgrade", release, namespace, workers[1]))

    def resumed() -> Resize | None:
        data = (api.get_or_none(status) or {}).get("data") or {}
        if f"{workers[1]} workers training" not in data.get("message", ""):
            return None
        since = rfc3339(upgraded_at - 1)
        try:
            text = api.request(
                "GET",
                ns_path(namespace, "pods", chief) + "/log",
                query={"timestamps": "true", "sinceTime": since},
                raw=True,
            )
        except ApiError:
            return None
        return resize_marks(text.decode(errors="replace"), workers, upgraded_at)

    try:
        result = wait_until(resumed, 300, f"the group's first step at {workers[1]} workers")
    except BenchError as err:
        log(pods_line(state, namespace))
        return Resize(workers, problem=str(err).removeprefix("figure 6: "))
    log(
        f"  figure 6: resized to {workers[1]}: re-forming after {result.reformed:.1f} s, first step after "
        f"{result.resumed:.1f} s, resumed from step {result.resumed_from} (stopped at {result.stopped_at})"
    )
    return result


def _release_args(verb: str, release: str, namespace: str, workers: int) -> list[str]:
    return checked_args(release, namespace, (*RESIZE_SETS, f"workers.replicas={workers}"), verb=verb)


def measure_resizes(state, log=print) -> list[Resize]:
    """A 2-worker release grown and shrunk by `helm upgrade` once it has a checkpoint: one
    Resize per size in RESIZES; the rest not measured once one fails."""
    namespace, release = f"bench-resize-{os.getpid()}", "bench-resize"
    status = ns_path(namespace, "configmaps", f"{release}-tf-multiworker-status")
    results: list[Resize] = []
    with fresh_namespace(state, namespace, log) as api:
        log(f"  figure 6: a {WORKERS}-worker run to resize (helm install)")
        helm_run(state, *_release_args("install", release, namespace, WORKERS))
        try:
            wait_until(
                lambda: (
                    int(((api.get_or_none(status) or {}).get("data") or {}).get("lastCheckpointStep") or 0)
                    >= 2 * RESIZE_EVERY
                ),
                300,
                "the run's first checkpoints",
            )
        except BenchError as err:
            return [Resize((WORKERS, RESIZES[0]), problem=str(err).removeprefix("figure 6: "))]
        before = WORKERS
        for after in RESIZES:
            results.append(_resize_once(state, api, namespace, release, (before, after), log))
            if results[-1].problem:
                break
            before = after
    return results


def measure_local_fault(runs_dir, round_index: int, log=print):
    """The fault harness's `kill-worker` on `make local`'s runner; its FaultResult."""

    log(f"  figure 6: round {round_index + 1}: {LOCAL_FAULT} on make local (scripts/tfmw/faults/)")
    try:
        result = fault_local.run_scenario(
            LOCAL_FAULT,
            runs_dir=Path(runs_dir),
            steps=FAULT_STEPS,
            checkpoint_every=FAULT_CHECKPOINT_EVERY,
            fault_after_step=FAULT_AFTER_STEP,
            timeout=FAULT_TIMEOUT,
        )
    except (ToolError, LocalRunError) as err:
        raise BenchError(f"figure 6: {LOCAL_FAULT}: {err}") from None
    log(_fault_line("make local", result))
    if not result.completed:
        log("\n".join(result.log_tail[-20:]) or "  figure 6: (no line from the pods)")
    return result


def _stop_local_run(proc: subprocess.Popen) -> None:
    """Let `make local` finish its short run (it removes its network namespaces), then make sure."""
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # its handler stops the pods and cleans up
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def measure_local_round(runs_dir, round_index: int, log=print) -> float:
    """`make local` start -> its first training step, seconds."""
    command = [
        PY,
        "-m",
        "tfmw.localrun",
        "--runs-dir",
        str(runs_dir),
        "--release",
        f"bench-local-{round_index}",
        "--fresh",
        "--timeout",
        "300",
    ]
    for item in run_sets(f"bench-local-{round_index}"):
        command += ["--set", item]
    log(f"  figure 6: round {round_index + 1}: make local")
    # The local pods get the environment `make local` passes on (not figure 1's one-thread limit:
    # the cluster's pods do not have it either).
    timing = time_to_first_step(
        command, base_env(one_thread=False), timeout=300, stop=_stop_local_run, figure="figure 6"
    )
    return timing.first_step


def measure(quick: bool, log=print) -> Summary:
    bins, archive = cluster_parts(log)
    rounds = 1 if quick else 3
    work = tempfile.mkdtemp(prefix="tfmw-bench-cluster-")
    state_dir = os.path.join(work, "state")
    results, fault_pairs, ups = [], [], []
    disruption_pairs: dict = {scenario: [] for scenario in DISRUPTIONS}
    try:
        state, first = cluster_up(controlplane, state_dir, bins, archive, log)
        ups.append(first)
        try:
            if wants_second_up(first):
                log("  figure 6: the first up imported the image: cluster-down and up again, the image now cached")
                cluster_down(controlplane, state_dir, log)
                state, second = cluster_up(controlplane, state_dir, bins, archive, log)
                ups.append(second)
            for r in range(rounds):
                local_dir = os.path.join(work, "local")
                # Alternate which goes first so neither always gets the warmer page cache.
                if r % 2 == 0:
                    cluster = measure_cluster_round(state, r, log)
                    local = measure_local_round(local_dir, r, log)
                    cluster_fault = measure_cluster_fault(state, r, log)
                    local_fault = measure_local_fault(local_dir, r, log)
                else:
                    local = measure_local_round(local_dir, r, log)
                    cluster = measure_cluster_round(state, r, log)
                    local_fault = measure_local_fault(local_dir, r, log)
                    cluster_fault = measure_cluster_fault(state, r, log)
                results.append(ClusterRound(*cluster, local_first_step=local))
                fault_pairs.append(fault_pair(cluster_fault, local_fault))
                deleted = NAN if not_counted("cluster", cluster_fault) else cluster_fault.seconds_to_resume
                for scenario in DISRUPTIONS:
                    disruption_pairs[scenario].append((measure_cluster_fault(state, r, log, scenario), deleted))
            resizes = measure_resizes(state, log)  # three workers: before a node is cut off
            # Last: it taints, and for a while loses, one of the two nodes.
            node = measure_cluster_fault(state, rounds, log, scenario=NODE_FAULT)
        finally:
            down_seconds = cluster_down(controlplane, state_dir, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summarize(ups, down_seconds, results, fault_pairs, node, resizes, disruption_pairs)
