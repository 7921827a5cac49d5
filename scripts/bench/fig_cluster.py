"""Figure 6: the local Kubernetes cluster (`make cluster`), and the chart on it beside `make local`.

One run measures, on a cluster of its own (scripts/kube/controlplane.py, binaries built once
beforehand and not timed):

- `make cluster` ready time: controlplane.up's own `ready_seconds` (state folder made ->
  the worker image imported into both real nodes, every node Ready, CoreDNS ready and the
  default ServiceAccount there), and `make cluster-down` time;
- per round, a 2-worker release of the chart (values/local.yaml, a short run): how long
  `helm install` (no --wait) takes, the time from its return until both worker pods are
  Running (the API polled every 0.1 s), and the time from `helm install` starting to the
  chief's first training step (`tfmw progress step=1/..`, its log polled through the API
  server every 0.1 s);
- in the same round, `make local` (`python -m scripts.local_run`, the same values and --set
  items) from process start to the first step, figure 2's machinery (`time_to_first_step`);
- the ratio cluster / `make local` per round (paired: measured back to back, alternating
  which goes first), median and spread.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from entrypoint.loglines import progress_step

from . import plots, stats
from .fig_launcher import time_to_first_step
from .procs import PY, REPO, BenchError, base_env

CHART = REPO / "charts" / "tf-multiworker"
VALUES = REPO / "values" / "local.yaml"
READY_TARGET_S = 20.0     # issue 10: `make cluster` ready within 20 s once built
RUNNING_TARGET_S = 5.0    # issue 10: a 2-worker release's pods Running within 5 s of helm install returning
WORKERS = 2
POLL = 0.1


def run_sets(run_id: str) -> list[str]:
    """The --set items of every measured run, cluster and local alike: a short run whose first
    step is logged; each run a fresh id (pure)."""
    return ["training.config.steps=10", "training.config.logEverySteps=1",
            "training.config.checkpoint.everySteps=10", f"training.runId={run_id}"]


def running_workers(pods: list[dict]) -> int:
    """Worker pods in phase Running and not being deleted (pure)."""
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp"))


def has_first_step(log_text: str) -> bool:
    return any(progress_step(line) is not None for line in log_text.splitlines())


@dataclass(frozen=True)
class ClusterRound:
    install_seconds: float         # helm install, start to return
    return_to_running: float       # helm install returned -> both worker pods Running
    install_to_first_step: float   # helm install started -> the chief's first step
    local_first_step: float        # make local started -> its chief's first step


@dataclass(frozen=True)
class Summary:
    ready_seconds: float
    up_seconds: float
    down_seconds: float
    install_seconds: float
    return_to_running: float
    return_to_running_max: float
    install_to_first_step: float
    running_to_first_step: float  # the pods' own start: Running -> the chief's first step
    local_first_step: float
    ratio: float                  # median of the per-round ratios cluster / local
    ratio_min: float
    ratio_max: float
    rounds: int
    pairs: tuple = ()             # (cluster, local) seconds to the first step, per round


def summarize(ready_seconds: float, up_seconds: float, down_seconds: float, rounds: list[ClusterRound]) -> Summary:
    if not rounds:
        raise ValueError("no rounds measured")
    ratios = stats.paired_ratios([r.install_to_first_step for r in rounds], [r.local_first_step for r in rounds])
    lo, hi = stats.spread(ratios)
    return Summary(ready_seconds=ready_seconds, up_seconds=up_seconds, down_seconds=down_seconds,
                   install_seconds=stats.median([r.install_seconds for r in rounds]),
                   return_to_running=stats.median([r.return_to_running for r in rounds]),
                   return_to_running_max=max(r.return_to_running for r in rounds),
                   install_to_first_step=stats.median([r.install_to_first_step for r in rounds]),
                   running_to_first_step=stats.median([r.install_to_first_step - r.install_seconds
                                                       - r.return_to_running for r in rounds]),
                   local_first_step=stats.median([r.local_first_step for r in rounds]),
                   ratio=stats.median(ratios), ratio_min=lo, ratio_max=hi, rounds=len(rounds),
                   pairs=tuple((r.install_to_first_step, r.local_first_step) for r in rounds))


def verdict(measured: float, target: float) -> str:
    return f"met (target ≤ {target:g} s)" if measured <= target else f"MISSED (target ≤ {target:g} s)"


HEADERS = ["measurement", "seconds", "against"]


def table_rows(s: Summary) -> list[list]:
    return [
        ["`make cluster` ready (controlplane.up's ready_seconds, binaries built)", s.ready_seconds,
         verdict(s.ready_seconds, READY_TARGET_S)],
        ["`make cluster` wall time (up() call, incl. bridge and certificates)", s.up_seconds, "-"],
        ["`make cluster-down` (every process, namespace and the bridge gone)", s.down_seconds, "-"],
        ["`helm install` of a 2-worker release (no --wait), median", s.install_seconds, "-"],
        ["helm install returned → both worker pods Running, median (max)",
         f"{s.return_to_running:.2f} ({s.return_to_running_max:.2f})", verdict(s.return_to_running_max, RUNNING_TARGET_S)],
        ["helm install → first training step on the cluster, median", s.install_to_first_step, "-"],
        ["of which: pods Running → first training step, median", s.running_to_first_step, "-"],
        ["`make local` start → first training step, median", s.local_first_step, "-"],
        ["ratio cluster / `make local` (paired per round), median", f"{s.ratio:.2f}x",
         f"min {s.ratio_min:.2f}x, max {s.ratio_max:.2f}x over {s.rounds} round(s): "
         + ", ".join(f"{c:.1f} / {l:.1f} s" for c, l in s.pairs)],
    ]


# ---------------------------------------------------------------- measuring

def _kubeconfig_env(state) -> dict:
    return dict(os.environ, KUBECONFIG=str(state.kubeconfig))


def _helm(state, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    from scripts.helmkit import find_helm, helm_error_line
    proc = subprocess.run([find_helm(), *args], capture_output=True, text=True, env=_kubeconfig_env(state),
                          timeout=timeout)
    if proc.returncode != 0:
        raise BenchError(f"figure 6: helm {args[0]} exited {proc.returncode}: {helm_error_line(proc.stderr)}")
    return proc


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(POLL)
    raise BenchError(f"figure 6: {what} not within {timeout:g}s")


def measure_cluster_round(state, round_index: int, log=print) -> tuple[float, float, float]:
    """(helm install seconds, return -> pods Running, install start -> first step) of one release
    in a namespace of its own, deleted afterwards."""
    from scripts.kube.api import ApiError, ns_path
    api = state.api("admin")
    namespace = f"bench-{round_index}-{os.getpid()}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    _wait(lambda: api.get_or_none(ns_path(namespace, "serviceaccounts", "default")), 60,
          f"the default ServiceAccount of namespace {namespace}")
    release = "bench"
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker"
    args = ["install", release, str(CHART), "-n", namespace, "-f", str(VALUES)]
    for item in run_sets(f"bench-cluster-{round_index}"):
        args += ["--set", item]
    try:
        log(f"  figure 6: round {round_index + 1}: helm install on the cluster")
        started = time.monotonic()
        _helm(state, *args)
        returned = time.monotonic()
        _wait(lambda: running_workers(api.items(ns_path(namespace, "pods"), labelSelector=selector)) == WORKERS,
              120, "both worker pods Running")
        running = time.monotonic()
        chief = f"{release}-tf-multiworker-0"

        def chief_stepped() -> bool:
            try:
                text = api.request("GET", ns_path(namespace, "pods", chief) + "/log", raw=True)
            except ApiError:
                return False   # the container's log is not there yet
            return has_first_step(text.decode(errors="replace"))

        _wait(chief_stepped, 300, "the chief's first training step")
        first_step = time.monotonic()
        return returned - started, running - returned, first_step - started
    finally:
        # Every pod stopped before the next measurement: they would share its CPUs.
        api.delete(f"/api/v1/namespaces/{namespace}")
        try:
            _wait(lambda: not api.items(ns_path(namespace, "pods")), 180, f"the pods of namespace {namespace} to stop")
        except BenchError as err:
            log(f"  figure 6: {err}")


def _stop_local_run(proc: subprocess.Popen) -> None:
    """Let `make local` finish its short run (it removes its network namespaces), then make sure."""
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)   # its handler stops the pods and cleans up
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def measure_local_round(runs_dir, round_index: int, log=print) -> float:
    """`make local` start -> its first training step, seconds."""
    command = [PY, "-m", "scripts.local_run", "--runs-dir", str(runs_dir), "--release", f"bench-local-{round_index}",
               "--fresh", "--timeout", "300"]
    for item in run_sets(f"bench-local-{round_index}"):
        command += ["--set", item]
    log(f"  figure 6: round {round_index + 1}: make local")
    # The local pods get the environment `make local` passes on (not figure 1's one-thread limit:
    # the cluster's pods do not have it either).
    timing = time_to_first_step(command, base_env(one_thread=False), timeout=300, stop=_stop_local_run,
                                figure="figure 6")
    return timing.first_step


def measure(quick: bool, log=print) -> Summary:
    if os.geteuid() != 0:
        raise BenchError("figure 6: the local cluster needs root (network namespaces, a bridge); run make bench as root")
    from scripts.kube import controlplane
    from scripts.kube.build import KubeBuildError, ensure_binaries
    try:
        bins = ensure_binaries(progress=lambda line: log(f"  figure 6: {line}"))
    except KubeBuildError as err:
        raise BenchError(f"figure 6: the cluster binaries could not be built: {err}") from None
    from scripts import image
    try:
        # The nodes run the worker image: built once (not timed), imported at every `up`.
        ref = image.ensure_image(variant="cpu", base="debian", progress=lambda line: log(f"  figure 6: {line}"))
        archive = image.save_archive(ref, controlplane.IMAGE_CACHE)
    except image.ImageError as err:
        raise BenchError(f"figure 6: the worker image could not be built: {err}") from None
    rounds = 1 if quick else 3
    work = tempfile.mkdtemp(prefix="tfmw-bench-cluster-")
    state_dir = os.path.join(work, "state")
    results = []
    try:
        log("  figure 6: make cluster (controlplane.up)")
        started = time.monotonic()
        try:
            state = controlplane.up(state_dir, nodes=2, bins=bins, images=[archive],
                                    say=lambda line: log(f"  figure 6: {line}"))
        except controlplane.ClusterError as err:
            raise BenchError(f"figure 6: make cluster failed: {err}") from None
        up_seconds = time.monotonic() - started
        try:
            for r in range(rounds):
                # Alternate which goes first so neither always gets the warmer page cache.
                if r % 2 == 0:
                    cluster = measure_cluster_round(state, r, log)
                    local = measure_local_round(os.path.join(work, "local"), r, log)
                else:
                    local = measure_local_round(os.path.join(work, "local"), r, log)
                    cluster = measure_cluster_round(state, r, log)
                results.append(ClusterRound(*cluster, local_first_step=local))
        finally:
            log("  figure 6: make cluster-down (controlplane.down)")
            stopped = time.monotonic()
            controlplane.down(state_dir, say=lambda line: log(f"  figure 6: {line}"))
            down_seconds = time.monotonic() - stopped
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summarize(state.ready_seconds, up_seconds, down_seconds, results)


def plot(s: Summary, path, subtitle: str) -> None:
    fig, ax = plots.subplots(figsize=(10, 4.2))
    rows = ["make cluster: ready", "make cluster-down", "cluster: helm install → first step",
            "make local: start → first step"]
    ax.barh(rows[0], s.ready_seconds, color="tab:blue", height=0.55)
    ax.barh(rows[1], s.down_seconds, color="tab:blue", height=0.55)
    left = 0.0
    for width, color, label in ((s.install_seconds, "tab:green", "helm install (returns)"),
                                (s.return_to_running, "yellowgreen", "→ both pods Running"),
                                (s.running_to_first_step, "tab:orange", "→ first step (pods' own start)")):
        ax.barh(rows[2], width, left=left, color=color, height=0.55, label=label)
        left += width
    ax.barh(rows[3], s.local_first_step, color="tab:purple", height=0.55)
    for y, value in enumerate([s.ready_seconds, s.down_seconds, s.install_to_first_step, s.local_first_step]):
        ax.text(value, y, f" {value:.1f} s", va="center", fontsize=8)
    ax.axvline(READY_TARGET_S, color="tab:blue", ls=":", lw=1, label=f"ready target {READY_TARGET_S:g} s")
    ax.invert_yaxis()
    ax.set_xlim(0, max(s.ready_seconds, s.install_to_first_step, s.local_first_step, READY_TARGET_S) * 1.2)
    ax.set_xlabel("seconds (medians)")
    ax.set_title(f"Figure 6: the local cluster; helm install → first step is {s.ratio:.2f}x make local's "
                 f"(median of {s.rounds} paired round(s))\n{subtitle}", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    plots.save(fig, path)
