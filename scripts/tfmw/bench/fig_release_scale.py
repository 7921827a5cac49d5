"""Figure 15: the release at 16 to 1,024 workers on a real control plane. Figure 8 counts what
the launchers ask, against an API server double that answers at once; here the real API
server, etcd, scheduler, StatefulSet and EndpointSlice controllers carry the chart's release at
N, on kwok's fake GPU nodes (tfmw.devcluster.kwok: no kubelet, no container, so N can reach
1,024 on this machine; the launchers do not run, their traffic is figure 8's). Per N:

- `helm install` (its wall time) and the release's pods all Ready (from the install's start);
- the API server's own metrics over that window: requests (apiserver_request_total) per
  worker, and the p99 latency (apiserver_request_duration_seconds) of single-object mutations,
  single-object reads and namespace LISTs, against the Kubernetes API call latency SLOs (1 s,
  1 s, 5 s); the API server's and etcd's CPU seconds;
- the chief's read of the group (the LIST of the release's pods, entrypoint.peerwatch): its
  size and time, from etcd and from the API server's watch cache (`resourceVersion=0`);
- `make status` (tfmw status: its time and how many lines it prints), `helm upgrade` (a change
  that rolls no pod: its wall time).
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfmw.devcluster import controlplane, kueue, kwok, onebinary
from tfmw.devcluster.build_kwok import KWOK
from tfmw.k8s.api import ns_path

from . import cluster_kit, plots
from .fig_kueue import admitted
from .figure import BenchRun, measured
from .procs import REPO, BenchError, proc_usage
from .report import image, paragraphs, settings_line, table

FIGURE = "figure 15"
TITLE = "Figure 15: the release at 16 to 1,024 workers on a real control plane"
SIZES = (16, 64, 256, 1024)
QUICK_SIZES = (16, 256)
GPUS_PER_NODE = 8  # a kwok node; one GPU a worker
RACKS_PER_BLOCK, NODES_PER_RACK = 4, 8
READY_SECONDS = 600
LIST_ROUNDS = 3
SLO_SECONDS = {"mutating": 1.0, "read": 1.0, "list": 5.0}  # Kubernetes API call latency SLOs (p99)
STATUS_TARGET_SECONDS = 5.0
HEADERS = [
    "workers",
    "helm install (s)",
    "all Ready (s)",
    "API requests per worker",
    "p99 mutating (s)",
    "p99 read (s)",
    "p99 LIST (s)",
    "API server + etcd CPU (s)",
    "pods LIST (MiB)",
    "pods LIST (s)",
    "from cache (s)",
    "make status (s)",
    "make status lines",
    "helm upgrade (s)",
]
NAN = float("nan")


@dataclass
class Point:
    workers: int
    install_seconds: float = NAN
    ready_seconds: float = NAN
    requests: dict = field(default_factory=dict)  # (verb, resource) -> count over install..Ready
    p99: dict = field(default_factory=dict)  # "mutating" | "read" | "list" -> seconds
    cpu_seconds: float = NAN
    list_bytes: int = 0
    list_seconds: float = NAN
    cached_list_seconds: float = NAN
    status_seconds: float = NAN
    status_lines: int = 0
    upgrade_seconds: float = NAN

    @property
    def requests_per_worker(self) -> float:
        return sum(self.requests.values()) / self.workers


@dataclass
class Queued:
    """Kueue (topology-aware) at scale: one release of `big` workers, then `releases` of `each`
    under a quota of half of them."""

    big: int
    admit_seconds: float = NAN  # helm install -> its Workload admitted
    ready_seconds: float = NAN  # helm install -> every pod Ready
    racks: int = 0  # racks its workers were placed in
    releases: int = 0
    each: int = 0
    admitted_at_once: int = 0  # of `releases`, with half their GPUs in quota
    partial: int = 0  # releases with some but not all pods bound, 5 s after the last admission
    next_admit_seconds: float = NAN  # the admitted ones uninstalled -> every other one admitted


@dataclass
class Result:
    points: list[Point]
    nodes: int
    kwok_version: str = ""
    queued: Queued | None = None


# ---------------------------------------------------------------- the API server's metrics (pure)


def parse_metrics(text: str) -> dict[tuple, float]:
    """Prometheus text -> {(sample name, sorted label pairs): value} (prometheus_client's parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def delta(before: dict, after: dict, name: str) -> list[tuple[dict, float]]:
    """Each series of `name` as (labels, after - before), the ones that moved."""
    moved = []
    for (sample, labels), value in after.items():
        if sample == name:
            change = value - before.get((sample, labels), 0.0)
            if change > 0:
                moved.append((dict(labels), change))
    return moved


def call_class(labels: dict) -> str | None:
    """The SLO a request counts against (pure): single-object mutations and reads, namespace
    LISTs; None for the rest (watches, cluster-wide LISTs, proxies)."""
    verb, scope = labels.get("verb", ""), labels.get("scope", "")
    if verb in ("POST", "PUT", "PATCH", "DELETE") and scope in ("resource", "namespace"):
        return "mutating"
    if verb == "GET" and scope == "resource":
        return "read"
    if verb == "LIST" and scope == "namespace":
        return "list"
    return None


def request_counts(before: dict, after: dict) -> dict[tuple[str, str], float]:
    """(verb, resource) -> requests over the window (apiserver_request_total)."""
    counts: dict[tuple[str, str], float] = {}
    for labels, change in delta(before, after, "apiserver_request_total"):
        if labels.get("verb") in ("WATCH", "CONNECT"):
            continue
        key = (labels.get("verb", ""), labels.get("resource", ""))
        counts[key] = counts.get(key, 0.0) + change
    return counts


def p99_by_class(before: dict, after: dict) -> dict[str, float]:
    """The p99 latency of each SLO class over the window, from the histogram's bucket deltas:
    the upper bound of the first bucket holding 99% of the class's calls (pure)."""
    buckets: dict[str, dict[float, float]] = {}
    for labels, change in delta(before, after, "apiserver_request_duration_seconds_bucket"):
        kind = call_class(labels)
        if kind is None:
            continue
        le = float(labels["le"])
        buckets.setdefault(kind, {})
        buckets[kind][le] = buckets[kind].get(le, 0.0) + change
    p99 = {}
    for kind, counts in buckets.items():
        total = counts.get(math.inf, max(counts.values()))
        p99[kind] = next((le for le in sorted(counts) if counts[le] >= 0.99 * total), math.inf)
    return p99


# ---------------------------------------------------------------- the table and the reading (pure)


def _cell(value: float, fmt: str = ".2f") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def table_rows(result: Result) -> list[list]:
    rows = []
    for p in result.points:
        rows.append(
            [
                f"{p.workers:,}",
                _cell(p.install_seconds, ".1f"),
                _cell(p.ready_seconds, ".1f"),
                _cell(p.requests_per_worker, ".1f"),
                _cell(p.p99.get("mutating", NAN), ".3g"),
                _cell(p.p99.get("read", NAN), ".3g"),
                _cell(p.p99.get("list", NAN), ".3g"),
                _cell(p.cpu_seconds, ".1f"),
                _cell(p.list_bytes / 2**20, ".2f"),
                _cell(p.list_seconds, ".3f"),
                _cell(p.cached_list_seconds, ".3f"),
                _cell(p.status_seconds, ".1f"),
                f"{p.status_lines:,}",
                _cell(p.upgrade_seconds, ".1f"),
            ]
        )
    return rows


def slo_misses(result: Result) -> list[str]:
    """Each SLO or target a size missed, as "N workers: what" (pure)."""
    misses = []
    for p in result.points:
        for kind, limit in SLO_SECONDS.items():
            if p.p99.get(kind, 0.0) > limit:
                misses.append(f"{p.workers:,} workers: p99 {kind} {p.p99[kind]:g} s > {limit:g} s")
        if p.status_seconds > STATUS_TARGET_SECONDS:
            misses.append(f"{p.workers:,} workers: make status {p.status_seconds:.1f} s > {STATUS_TARGET_SECONDS:g} s")
    return misses


def reading(result: Result) -> str:
    """The figure's reading (pure)."""
    small, big = result.points[0], result.points[-1]
    misses = slo_misses(result)
    growth = big.requests_per_worker / small.requests_per_worker if small.requests_per_worker else NAN
    list_ratio = big.list_bytes / small.list_bytes if small.list_bytes else NAN
    parts = [
        ("**Every SLO and target met** at every size measured" if not misses else "**Missed:** " + "; ".join(misses))
        + f" (single-object calls p99 at most {SLO_SECONDS['mutating']:g} s, namespace LISTs "
        f"{SLO_SECONDS['list']:g} s, `make status` {STATUS_TARGET_SECONDS:g} s).",
        f"The release's own requests per worker, install to all Ready: {small.requests_per_worker:.1f} at "
        f"{small.workers:,}, {big.requests_per_worker:.1f} at {big.workers:,} ({growth:.2f}x): O(N) in all, the "
        "StatefulSet controller's pod creates, the scheduler's bindings and the status writes of each pod.",
        f"The chief's read of the group at {big.workers:,} workers is one LIST of "
        f"{big.list_bytes / 2**20:.2f} MiB ({list_ratio:.0f}x the {small.workers:,}-worker one) in "
        f"{big.list_seconds:.3f} s from etcd, {big.cached_list_seconds:.3f} s from the API server's cache.",
        f"`make status` at {big.workers:,} workers: {big.status_seconds:.1f} s, {big.status_lines:,} lines.",
    ]
    q = result.queued
    if q is not None:
        parts.append(
            f"Under Kueue (topology-aware, racks of {GPUS_PER_NODE * NODES_PER_RACK} GPUs): one {q.big:,}-worker "
            f"release admitted {q.admit_seconds:.1f} s after its install, every pod Ready at {q.ready_seconds:.1f} s, "
            f"in {q.racks} racks; {q.releases} releases of {q.each} with quota for half of them: "
            f"{q.admitted_at_once} admitted at once, {q.partial} of the {q.releases} with some but not all of its "
            "pods bound 5 s after the last admission (Kueue ungates an admitted group's pods one by one; a bound "
            "pod of a release not admitted fails the figure), the others admitted "
            f"{q.next_admit_seconds:.1f} s after the first were uninstalled."
        )
    return " ".join(parts)


def section(result: Result, rows, headers, load: str) -> str:

    sizes = ", ".join(f"{p.workers:,}" for p in result.points)
    return paragraphs(
        f"## {TITLE}",
        image("fig15_release_scale.png", "install, Ready and status times and API p99 against the release's size"),
        settings_line(
            f"`make cluster` (1 real node) and kwok {result.kwok_version} with {result.nodes} fake nodes of "
            f"{GPUS_PER_NODE} GPUs ({RACKS_PER_BLOCK} racks of {NODES_PER_RACK} a block), the chart at {sizes} "
            "workers of one GPU (values/local.yaml, `storage.type=emptyDir`, tolerating kwok's taint), one size "
            "after the other in a fresh namespace. The API server's metrics read before the install and once "
            "every pod is Ready; CPU from /proc. The pods LIST is the chief's (its label selector), median of "
            f"{LIST_ROUNDS}. `make status` is `python -m tfmw.cli status`; `helm upgrade` changes the disruption "
            "budget (no pod rolls). Under Kueue: a topology-aware ClusterQueue over the fake nodes (levels block, "
            "rack, hostname; `scheduling.topology.key` the rack); its manager restarted once the queued releases "
            "were installed (v0.19.2's topology cache still counted the GPUs of the deleted first release's pods, "
            "and the queue waited on `doesn't allow to fit` until then; kwok deletes pods at once, and this was "
            "not tried with kubelets). "
            "No container runs on a fake node: the launchers' own traffic is figure 8's. "
            "Run by `tfmw.bench.fig_release_scale.run_figure` (`--only 15`).",
            load,
        ),
        table(headers, rows),
        "**Reading it.** " + reading(result),
    )


def plot(result: Result, path, subtitle: str) -> None:
    fig, (times, p99) = plots.subplots(1, 2, figsize=(10, 3.4))
    sizes = [p.workers for p in result.points]
    for label, values in (
        ("helm install", [p.install_seconds for p in result.points]),
        ("all Ready", [p.ready_seconds for p in result.points]),
        ("make status", [p.status_seconds for p in result.points]),
        ("helm upgrade", [p.upgrade_seconds for p in result.points]),
    ):
        times.plot(sizes, values, marker="o", label=label)
    times.set_xscale("log", base=2)
    times.set_xlabel("workers")
    times.set_ylabel("seconds")
    times.legend(fontsize=7)
    for kind in SLO_SECONDS:
        p99.plot(sizes, [p.p99.get(kind, NAN) for p in result.points], marker="o", label=f"p99 {kind}")
    p99.axhline(SLO_SECONDS["mutating"], color="grey", linestyle="--", linewidth=0.8, label="SLO 1 s")
    p99.set_xscale("log", base=2)
    p99.set_yscale("log")
    p99.set_xlabel("workers")
    p99.set_ylabel("API latency p99 (s)")
    p99.legend(fontsize=7)
    fig.suptitle(f"{TITLE}\n{subtitle}", fontsize=10)
    plots.save(fig, path)


# ---------------------------------------------------------------- measuring


def _metrics(api) -> dict:
    return parse_metrics(api.request("GET", "/metrics", raw=True).decode())


def _ready(api, namespace: str, name: str, n: int) -> bool:

    sts = api.get_or_none(ns_path(namespace, "statefulsets", name, group="apps/v1")) or {}
    return (sts.get("status") or {}).get("readyReplicas", 0) >= n


def _timed_list(api, namespace: str, selector: str, **query) -> tuple[float, int]:

    started = time.monotonic()
    raw = api.request("GET", ns_path(namespace, "pods"), query={"labelSelector": selector, **query}, raw=True)
    return time.monotonic() - started, len(raw)


def measure_one(state, api, n: int, log=print) -> Point:
    point = Point(n)
    release, namespace = "scale", f"bench-scale-{n}"
    args = _install_args(release, namespace, n)
    server = [state.pids["kube-apiserver"], state.pids["etcd"]]
    with cluster_kit.fresh_namespace(state, namespace, log=log, figure=FIGURE):
        before, cpu_before = _metrics(api), proc_usage(server)[1]
        started = time.monotonic()
        cluster_kit.helm_run(state, *args, figure=FIGURE)
        point.install_seconds = time.monotonic() - started
        cluster_kit.wait_until(
            lambda: _ready(api, namespace, f"{release}-tf-multiworker", n),
            READY_SECONDS,
            f"{n} workers Ready",
            figure=FIGURE,
        )
        point.ready_seconds = time.monotonic() - started
        after, cpu_after = _metrics(api), proc_usage(server)[1]
        point.cpu_seconds = cpu_after - cpu_before
        point.requests = request_counts(before, after)
        point.p99 = p99_by_class(before, after)
        selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker"
        lists = [_timed_list(api, namespace, selector) for _ in range(LIST_ROUNDS)]
        point.list_seconds, point.list_bytes = statistics.median(s for s, _ in lists), lists[0][1]
        point.cached_list_seconds = statistics.median(
            _timed_list(api, namespace, selector, resourceVersion="0")[0] for _ in range(LIST_ROUNDS)
        )
        env = dict(os.environ, KUBECONFIG=str(state.kubeconfig))
        started = time.monotonic()
        shown = subprocess.run(
            [sys.executable, "-m", "tfmw.cli", "status", "--namespace", namespace, "--release", release],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=300,
        )
        point.status_seconds = time.monotonic() - started
        if shown.returncode != 0:
            raise BenchError(f"{FIGURE}: make status at {n} workers exited {shown.returncode}: {shown.stderr.strip()}")
        point.status_lines = len(shown.stdout.splitlines())
        started = time.monotonic()
        cluster_kit.helm_run(
            state, *(["upgrade", *args[1:]]), "--set", "podDisruptionBudget.maxUnavailable=2", figure=FIGURE
        )
        point.upgrade_seconds = time.monotonic() - started
    log(
        f"  {FIGURE}: {n} workers: install {point.install_seconds:.1f} s, Ready {point.ready_seconds:.1f} s, "
        f"{point.requests_per_worker:.1f} requests a worker, p99 {point.p99}, status {point.status_seconds:.1f} s"
    )
    return point


def _workloads(api, namespace: str) -> list[dict]:
    return api.items(f"{kueue.KUEUE_API}/namespaces/{namespace}/workloads")


def _install_args(release: str, namespace: str, n: int, extra=()) -> list[str]:
    sets = [f"workers.replicas={n}", *kwok.release_sets(), *extra]
    args = ["install", release, str(REPO / "charts" / "tf-multiworker"), "-n", namespace]
    args += ["-f", str(REPO / "values" / "local.yaml")]
    for item in sets:
        args += ["--set", item]
    return args


def _quota(gpus: int) -> dict[str, str]:
    """A queue's quota for `gpus` workers of _install_args (500m CPU and 2Gi requested each)."""
    return {"cpu": str(gpus), "memory": f"{4 * gpus}Gi", "nvidia.com/gpu": str(gpus)}


def measure_kueue(state, api, nodes, big: int, releases: int, log=print) -> Queued:
    """Kueue installed on the cluster, a topology-aware queue over the fake nodes; one release of
    `big` workers (preferred: one rack), then `releases` of big / releases each under a quota of
    half of them; Kueue uninstalled after."""
    queued = Queued(big, releases=releases, each=big // releases)
    levels = [kwok.BLOCK_LABEL, kwok.RACK_LABEL, kwok.HOSTNAME_LABEL]
    rack_of = {node.name: node.rack for node in nodes}
    say = lambda line: log(f"  {FIGURE}: {line}")  # noqa: E731
    kueue.install(state, say=say)
    try:
        # one Topology and flavor; the second ClusterQueue holds half the GPUs of the same flavor
        queues = [
            kueue.topology_queue_objects("bench-big", levels, {kwok.FAKE_LABEL: "kwok"}, _quota(big)),
            [kueue.cluster_queue("bench-half", "bench-big", _quota(big // 2))],
        ]
        for path, obj in (item for objects in queues for item in objects):
            api.create_or_keep(path, obj)
        extra = ("scheduling.gang=kueue", f"scheduling.topology.key={kwok.RACK_LABEL}")
        namespace = f"bench-kueue-{big}"
        with cluster_kit.fresh_namespace(state, namespace, log=log, figure=FIGURE):
            kueue.manage_namespace(api, namespace)
            api.create_or_keep(*kueue.local_queue(namespace, "bench-big"))
            started = time.monotonic()
            cluster_kit.helm_run(
                state,
                *_install_args("big", namespace, big, (*extra, "scheduling.kueue.queueName=bench-big")),
                figure=FIGURE,
            )
            cluster_kit.wait_until(
                lambda: any(admitted(w) for w in _workloads(api, namespace)), READY_SECONDS, "admitted", figure=FIGURE
            )
            queued.admit_seconds = time.monotonic() - started
            cluster_kit.wait_until(
                lambda: _ready(api, namespace, "big-tf-multiworker", big), READY_SECONDS, "Ready", figure=FIGURE
            )
            queued.ready_seconds = time.monotonic() - started
            placed = {p["spec"].get("nodeName") for p in api.items(ns_path(namespace, "pods"))}
            queued.racks = len({rack_of[n] for n in placed if n in rack_of})
        namespace = f"bench-kueue-{releases}x{queued.each}"
        with cluster_kit.fresh_namespace(state, namespace, log=log, figure=FIGURE):
            kueue.manage_namespace(api, namespace)
            api.create_or_keep(*kueue.local_queue(namespace, "bench-half"))
            names = [f"q{i}" for i in range(releases)]
            for name in names:
                cluster_kit.helm_run(
                    state,
                    *_install_args(name, namespace, queued.each, (*extra, "scheduling.kueue.queueName=bench-half")),
                    figure=FIGURE,
                )
            # v0.19.2's topology cache still counted the deleted release's GPUs as used (its pods
            # gone, deleted at once by kwok): these waited on "doesn't allow to fit any of 128 pod(s)"
            # until its manager restarted
            kueue.restart_manager(api)
            fits = releases // 2
            cluster_kit.wait_until(
                lambda: sum(admitted(w) for w in _workloads(api, namespace)) >= fits,
                READY_SECONDS,
                f"{fits} of {releases} admitted",
                figure=FIGURE,
            )
            time.sleep(5.0)  # what Kueue admits beyond the quota would show by now
            workloads = _workloads(api, namespace)
            queued.admitted_at_once = sum(admitted(w) for w in workloads)
            pods = api.items(ns_path(namespace, "pods"))
            admitted = {
                (w["metadata"].get("ownerReferences") or [{}])[0].get("name", "").removesuffix("-tf-multiworker")
                for w in workloads
                if admitted(w)
            }
            for name in names:
                mine = [p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/instance") == name]
                bound = sum(1 for p in mine if p["spec"].get("nodeName"))
                if name not in admitted and bound:
                    raise BenchError(f"{FIGURE}: {bound} pods of {name} bound while Kueue has not admitted it")
                queued.partial += 0 < bound < queued.each
            admitted_names = sorted(admitted)
            started = time.monotonic()
            for name in admitted_names:
                cluster_kit.helm_run(state, "uninstall", name, "-n", namespace, figure=FIGURE)
            cluster_kit.wait_until(
                lambda: sum(admitted(w) for w in _workloads(api, namespace)) >= releases - len(admitted_names),
                READY_SECONDS,
                "the rest admitted",
                figure=FIGURE,
            )
            queued.next_admit_seconds = time.monotonic() - started
        for objects in reversed(queues):
            kueue.delete_objects(api, list(reversed(objects)))
    finally:
        kueue.uninstall(state)
    log(f"  {FIGURE}: Kueue: {queued}")
    return queued


def measure(quick: bool, log=print) -> Result:

    sizes = QUICK_SIZES if quick else SIZES
    blocks = math.ceil(max(sizes) / GPUS_PER_NODE / (RACKS_PER_BLOCK * NODES_PER_RACK))
    nodes = kwok.topology(blocks, RACKS_PER_BLOCK, NODES_PER_RACK, gpus=GPUS_PER_NODE)
    bins, archive = cluster_kit.cluster_parts(log=log, figure=FIGURE)
    with tempfile.TemporaryDirectory(prefix="tfmw-bench-scale-") as tmp:
        state_dir = str(Path(tmp) / "state")
        state, _ = cluster_kit.cluster_up(controlplane, state_dir, bins, archive, log=log, figure=FIGURE, nodes=1)
        try:
            kwok.start(state, say=lambda line: log(f"  {FIGURE}: {line}"))
            api = state.api("admin", timeout=120.0)
            kwok.add_nodes(api, nodes, timeout=300.0)
            points = [measure_one(state, api, n, log=log) for n in sizes]
            queued = measure_kueue(state, api, nodes, max(sizes), 8, log=log)
        finally:
            kwok.stop(state)
            cluster_kit.cluster_down(controlplane, state_dir, log=log, figure=FIGURE)
    return Result(points, len(nodes), onebinary.read_pins(KWOK).version, queued)


def run_figure(bench: BenchRun) -> str:
    return measured(bench, sys.modules[__name__], TITLE, "fig15_release_scale.png", section)
