"""`make local`'s run: the chart's rendered workers as local processes, training for real (its
command line is tfmw.localrun.cli).

Renders the chart (values/<env>.yaml + --set, through tfmw.chart.render: the same path as
`make template`/`make deploy`), takes the StatefulSet's pod template and starts one local
"pod" per replica with the rendered command and env (downward-API fields filled in),
peers reachable under their cluster DNS names (network namespaces when root) or through a
documented loopback port mapping otherwise. Restarts pods that exit (restartPolicy:
Always), streams every pod's log prefixed with its name, stops cleanly on Ctrl-C, ends
when every worker has completed and prints a summary. No Kubernetes API server or
container runtime is involved: this runs the pod spec, not a cluster.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from entrypoint import loglines
from entrypoint.goodput import read_line_fields
from entrypoint.rundir import MarkerUnreadable, RunDir, is_uri, read_completed
from tfmw import REPO
from tfmw.chart import render
from tfmw.localrun.kubelet import LocalCluster, LocalRunResult
from tfmw.localrun.network import LoopbackNetwork, NetnsNetwork, cleanup_stale, free_port_range, netns_available
from tfmw.localrun.podspec import LocalPod, LocalRunError, build_pods, find_workload, image_env

DEFAULT_RUNS = REPO / ".local-runs"
# Host variables a local pod inherits (a container inherits none; these only make the
# local interpreter work). TF_CONFIG is never inherited: the launcher derives it.
INHERITED = (
    "PATH",
    "LANG",
    "LC_ALL",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_NUM_INTEROP_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "OMP_NUM_THREADS",
)
EXIT_INTERRUPTED = 128 + signal.SIGINT  # Ctrl-C (or SIGTERM) stopped the local run: what a shell reports


def base_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in INHERITED if k in os.environ}
    env.update(image_env((REPO / "Dockerfile").read_text()) if (REPO / "Dockerfile").exists() else {})
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def metrics_enabled(workload) -> bool:
    """The rendered workers serve /metrics (metrics.enabled sets TFMW_METRICS_PORT)."""
    return (workload.env_value("TFMW_METRICS_PORT") or "0") != "0"


def choose_network(mode: str, port: int, replicas: int, metrics: bool = False):
    """netns (root) or loopback ports; on loopback, with metrics, one free range holds the
    workers' gRPC ports and then their metrics ports."""
    if mode == "netns" or (mode == "auto" and netns_available()):
        if not netns_available():
            raise LocalRunError("--network netns needs root and iproute2 (`ip`); use --network loopback")
        cleanup_stale()
        return NetnsNetwork(), "network namespaces (one per pod, cluster DNS names)"
    base = free_port_range(port, replicas * (2 if metrics else 1))
    described = f"loopback 127.0.0.1 ports {base}..{base + replicas - 1}"
    if metrics:
        described += f", metrics {base + replicas}..{base + 2 * replicas - 1}"
    return LoopbackNetwork(base_port=base, metrics_port=base + replicas if metrics else None), described


def run_dir_of(pods: list[LocalPod]) -> RunDir | None:
    """The run's directory in shared storage as the pods' launchers see it (their
    TFMW_SHARED_DIR and TFMW_RUN_ID), or None when it is not a folder on this machine (an
    object-store URI, no shared storage or no run id: the launcher records nothing there)."""
    env = pods[0].env if pods else {}
    shared, run_id = env.get("TFMW_SHARED_DIR"), env.get("TFMW_RUN_ID")
    if not shared or not run_id or is_uri(shared):
        return None
    return RunDir.of(shared, run_id)


def completed_before_start(record: RunDir | None) -> bool | None:
    """Was the run's COMPLETED marker there before the pods started? None: not known here (no
    run directory on this machine, or a marker that cannot be read: the pods' lines say)."""
    if record is None:
        return None
    try:
        return read_completed(record) is not None
    except MarkerUnreadable:
        return None


def summary(
    cluster: LocalCluster, result: LocalRunResult, elapsed: float, run_dir: Path, completed_before: bool | None
) -> list[str]:
    """What the local run did. Trained or not is the run's recorded state, whatever the training
    command: `completed_before` (its COMPLETED marker was there before the pods started; None:
    the marker is not on this machine) and every pod's `tfmw completed` (result.ok). The
    built-in trainer's `tfmw done` lines only add its numbers (steps, loss, weights digests)."""
    every = sorted(cluster.states.values(), key=lambda s: s.pod.ordinal)
    states = [s for s in every if s.pod.restart_policy == "Always"]  # the workers
    evaluators = [s for s in every if s.pod.restart_policy != "Always"]  # evaluator.enabled
    done = {s.pod.name: found[-1].fields for s in states if (found := loglines.find(s.lines, loglines.DONE))}
    restarts = ", ".join(f"{s.pod.name}={max(s.starts - 1, 0)}" for s in every)
    head = "completed" if result.ok else f"FAILED: {result.reason}"
    lines = [f"tf-multiworker local run {head} in {elapsed:.1f}s ({len(states)} workers)"]
    if result.ok and completed_before:
        lines.append(
            "  this run had already completed: nothing was trained again "
            "(make local FRESH=1, or --set training.runId=<new id>, to train anew)"
        )
    elif result.ok and completed_before is None:
        lines.append(
            "  the run's COMPLETED marker is not on this machine: the pods' lines above say whether it trained"
        )
    elif result.ok and not done:
        lines.append(
            "  trained: the training command ran to the end on every worker and the run "
            "is recorded complete (its own output is above)"
        )
    if done:
        chief = done.get(states[0].pod.name) or next(iter(done.values()))
        lines.append(
            f"  steps={chief.get('steps')} final_loss={chief.get('final_loss')} "
            f"examples_per_sec(chief)={chief.get('examples_per_sec')}"
        )
        digests = {d.get("weights_digest") for d in done.values()}
        same = len(digests) == 1 and len(done) == len(states)
        lines.append(
            f"  weights identical on every worker: {'yes' if same else 'NO'} "
            f"({', '.join(sorted(str(d)[:12] for d in digests))})"
        )
        lines.append(f"  model: {chief.get('model')}")
    ended = loglines.find(states[0].lines, loglines.COMPLETED) if states else []
    account = read_line_fields(ended[-1].fields) if ended else None
    if account is not None:
        goodput, wall, badput = account
        lines.append(
            f"  goodput (chief): {goodput:.1%} of {wall:.1f}s; badput seconds: "
            + (" ".join(f"{c}={s:.1f}" for c, s in badput.items()) or "-")
        )
    for state in evaluators:
        evaluated = [e.fields for e in loglines.find(state.lines, loglines.EVAL) if "step" in e.fields]
        if evaluated:
            last = evaluated[-1]
            lines.append(
                f"  evaluator: step={last['step']} loss={last.get('loss')} accuracy={last.get('accuracy')} "
                f"({'the final checkpoint' if last.get('final') == 'true' else 'not the final checkpoint'}; "
                f"{len(evaluated)} evaluated)"
            )
        else:
            lines.append("  evaluator: no checkpoint evaluated")
    lines.append(f"  pod restarts: {restarts}")
    lines.append(f"  run state: {run_dir}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Render, start the pods, wait for the run to end, stop the pods (always), summarise."""
    rendered = render.prepare(
        args.env,
        args.sets,
        release=args.release,
        namespace=args.namespace,
        set_files=args.set_files,
        set_strings=getattr(args, "set_strings", []),
        values_files=getattr(args, "values_files", []),
        set_jsons=getattr(args, "set_jsons", []),
    )
    for warning in rendered.warnings:
        print(f"make local: {warning}", file=sys.stderr, flush=True)
    workload = find_workload(rendered.objects, args.namespace)
    run_dir = args.runs_dir / args.release
    shutil.rmtree(run_dir / "pods", ignore_errors=True)  # per-pod emptyDirs start empty
    pods = build_pods(workload, run_dir.resolve())
    record = run_dir_of(pods)
    if args.fresh and record is not None:
        shutil.rmtree(record.root, ignore_errors=True)
    completed_before = completed_before_start(record)
    port = int(workload.env_value("TFMW_PORT") or 2222)
    network, described = choose_network(args.network, port, len(pods), metrics_enabled(workload))
    workers = sum(p.restart_policy == "Always" for p in pods)
    print(
        f"tf-multiworker local run: {workers} workers of {workload.name}"
        f"{' and the evaluator' if workload.evaluator else ''} "
        f"({rendered.layered}), "
        f"{described}; run state in {run_dir}",
        flush=True,
    )
    cluster = LocalCluster(pods, network, base_env(), grace_seconds=min(workload.grace_seconds, 60))

    def on_signal(_signum, _frame):  # SIGTERM stops the run like Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        cluster.start()
        result = cluster.wait(args.timeout)
    except KeyboardInterrupt:
        result = LocalRunResult(False, "interrupted (Ctrl-C): pods stopped, last checkpoint kept", EXIT_INTERRUPTED)
    finally:
        cluster.shutdown()
    for line in summary(cluster, result, time.monotonic() - started, run_dir, completed_before):
        print(line, flush=True)
    return result.exit_code


if __name__ == "__main__":  # the command's old spelling: say where it went rather than do nothing
    sys.exit("python -m tfmw.localrun.run is now python -m tfmw.localrun (make local)")
