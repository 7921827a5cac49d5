"""Figure 4: scale of the control path — what grows with the number of workers N.

- `helm template` wall time and rendered bytes for N = 1 .. 1,000 (chart defaults plus
  `--set workers.replicas=N`), split per template source: the workers are one StatefulSet,
  so their objects do not grow with N; what does grow is shown as such.
- `entrypoint.peers.wait_for_peers` over N peer names with an injected resolver that takes
  a fixed delay per lookup (a DNS round trip), and one where every name only resolves after
  a fixed time (pods scheduled late: the backoff's overshoot).
- TF_CONFIG bytes per pod (the launcher's build_tf_config with the chart's rendered names),
  against Linux's limit on one environment string (MAX_ARG_STRLEN, 128 KiB).
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass

from entrypoint.peers import PARALLEL_LOOKUPS
from tfmw.chart import helmkit

from . import plots, stats
from .figure import BenchRun
from .machine import load_average
from .procs import REPO, BenchError
from .report import image, paragraphs, settings_line, table

CHART = REPO / "charts" / "tf-multiworker"
RELEASE = "tf-multiworker"
MAX_ARG_STRLEN = 32 * 4096  # Linux: one argv/env string, including "TF_CONFIG=" and the NUL


# ---------------------------------------------------------------- helm template


def split_by_source(manifest: str) -> dict[str, int]:
    """Bytes per `# Source: <chart>/templates/<file>` section of a rendered manifest."""
    sizes: dict[str, int] = {}
    current = "(header)"
    for chunk in re.split(r"(?m)^(?=# Source: )", manifest):
        match = re.match(r"# Source: [^/]+/templates/(\S+)", chunk)
        current = match.group(1) if match else current
        sizes[current] = sizes.get(current, 0) + len(chunk.encode())
    sizes.pop("(header)", None)
    return sizes


def render(helm: str, replicas: int) -> tuple[float, str]:
    started = time.perf_counter()
    result = helmkit.helm_template(helm, CHART, RELEASE, "default", sets=[f"workers.replicas={replicas}"])
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise BenchError(
            f"figure 4: helm template with workers.replicas={replicas} failed: {helmkit.helm_error_line(result.stderr)}"
        )
    return elapsed, result.stdout


def measure_helm(helm: str, sizes: list[int], repeats: int, log=print) -> list[dict]:
    render(helm, 1)  # warm the binary and the chart files into the page cache
    rows = []
    for n in sizes:
        log(f"  figure 4: helm template workers.replicas={n}")
        times, manifest = [], ""
        for _ in range(repeats):
            elapsed, manifest = render(helm, n)
            times.append(elapsed)
        rows.append(
            {
                "n": n,
                "seconds": stats.median(times),
                "bytes": len(manifest.encode()),
                "by_source": split_by_source(manifest),
                "manifest": manifest if n == sizes[-1] else None,
            }
        )
    return rows


def growth(rows: list[dict]) -> dict[str, float]:
    """Bytes added per worker, per template source, between the smallest and largest N (pure)."""
    first, last = rows[0], rows[-1]
    span = last["n"] - first["n"]
    if span <= 0:
        return {}
    sources = set(first["by_source"]) | set(last["by_source"])
    return {s: (last["by_source"].get(s, 0) - first["by_source"].get(s, 0)) / span for s in sorted(sources)}


# ---------------------------------------------------------------- peer wait


def delayed_resolver(delay: float, ready_at: float = 0.0, clock=time.monotonic, sleep=time.sleep):
    """A resolver that takes `delay` seconds per lookup and answers yes from `ready_at` on."""

    def resolve(_host: str) -> bool:
        if delay:
            sleep(delay)
        return clock() >= ready_at

    return resolve


def measure_peer_wait(counts: list[int], delays: list[float], late_seconds: float, log=print) -> list[dict]:
    from entrypoint.peers import wait_for_peers

    rows = []
    for n in counts:
        hosts = [f"tf-multiworker-{j}.tf-multiworker.default.svc.cluster.local" for j in range(n)]
        for delay in delays:
            log(f"  figure 4: peer wait, {n} names, {delay * 1e3:g} ms per lookup")
            started = time.perf_counter()
            wait_for_peers(hosts, 600, resolve=delayed_resolver(delay), log=lambda _line: None)
            rows.append(
                {"n": n, "delay_ms": delay * 1e3, "ready_after_s": 0.0, "seconds": time.perf_counter() - started}
            )
    n = counts[-1]
    hosts = [f"tf-multiworker-{j}.tf-multiworker.default.svc.cluster.local" for j in range(n)]
    log(f"  figure 4: peer wait, {n} names, all resolve only after {late_seconds:g} s")
    started = time.perf_counter()
    wait_for_peers(
        hosts, 600, resolve=delayed_resolver(0.0, ready_at=time.monotonic() + late_seconds), log=lambda _line: None
    )
    rows.append({"n": n, "delay_ms": 0.0, "ready_after_s": late_seconds, "seconds": time.perf_counter() - started})
    return rows


# ---------------------------------------------------------------- TF_CONFIG size


def pod_env(manifest: str) -> dict[str, str]:
    """The plain `value:` env of the worker StatefulSet's container in a rendered manifest."""
    import yaml

    for doc in yaml.safe_load_all(manifest):
        if doc and doc.get("kind") == "StatefulSet":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            return {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    raise BenchError("figure 4: no StatefulSet in the rendered chart")


def tf_config_bytes(env: dict[str, str], replicas: int, namespace: str = "default") -> int:
    """Bytes of the TF_CONFIG the launcher exports to the last pod of an N-worker StatefulSet."""
    from entrypoint.cluster import build_tf_config
    from entrypoint.identity import parse_pod_name
    from entrypoint.settings import load_settings

    pod_env_n = dict(
        env,
        TFMW_REPLICAS=str(replicas),
        TFMW_NAMESPACE=namespace,
        TFMW_POD_NAME=f"{env['TFMW_STATEFULSET']}-{replicas - 1}",
    )
    settings = load_settings(pod_env_n)
    identity = parse_pod_name(settings.pod_name, settings.replicas, settings.statefulset)
    return len(json.dumps(build_tf_config(settings, identity), separators=(",", ":")).encode())


def max_workers_for_env_limit(bytes_at: dict[int, int]) -> int:
    """Largest N whose TF_CONFIG still fits one environment string, extrapolated linearly from
    two measured sizes (pure). The per-worker cost is the address plus its quotes and comma."""
    (n1, b1), (n2, b2) = sorted(bytes_at.items())[0], sorted(bytes_at.items())[-1]
    per_worker = (b2 - b1) / (n2 - n1)
    budget = MAX_ARG_STRLEN - len("TF_CONFIG=") - 1
    return int(n2 + (budget - b2) // per_worker)


def measure_tf_config(env: dict[str, str], counts: list[int]) -> dict:
    # Helm release names are at most 53 characters; the chart names both after the release.
    longest = dict(env, TFMW_STATEFULSET="s" * 52, TFMW_SERVICE="s" * 52)
    default_sizes = {n: tf_config_bytes(env, n) for n in counts}
    long_sizes = {n: tf_config_bytes(longest, n, namespace="n" * 63) for n in counts}
    return {
        "default": default_sizes,
        "longest": long_sizes,
        "limit_default": max_workers_for_env_limit(default_sizes),
        "limit_longest": max_workers_for_env_limit(long_sizes),
    }


@dataclass(frozen=True)
class Result:
    helm: list
    peers: list
    tf_config: dict


def plot(result: Result, path, subtitle: str) -> None:
    fig, (a, b, c) = plots.subplots(1, 3, figsize=(15, 4.6))
    ns = [r["n"] for r in result.helm]
    growing = {s for s, v in growth(result.helm).items() if v > 1}
    constant = [sum(v for s, v in r["by_source"].items() if s not in growing) / 1024 for r in result.helm]
    a.plot(ns, [r["bytes"] / 1024 for r in result.helm], "o-", label="whole manifest")
    a.plot(ns, constant, "s-", label="without " + ", ".join(sorted(growing)) if growing else "workload")
    a.set_xscale("log")
    a.set_xlabel("workers.replicas (log)")
    a.set_ylabel("rendered KiB")
    a2 = a.twinx()
    a2.plot(ns, [r["seconds"] * 1e3 for r in result.helm], "^--", color="tab:green", label="helm template ms")
    a2.set_ylabel("helm template ms", color="tab:green")
    a2.set_ylim(0, None)
    a.set_ylim(0, None)
    a.legend(fontsize=8, loc="upper left")
    a.set_title("helm template: size and time")

    for delay in sorted({r["delay_ms"] for r in result.peers if not r["ready_after_s"]}):
        pts = [r for r in result.peers if r["delay_ms"] == delay and not r["ready_after_s"]]
        b.plot([r["n"] for r in pts], [max(r["seconds"], 1e-4) for r in pts], "o-", label=f"{delay:g} ms per lookup")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("peer names")
    b.set_ylabel("wait_for_peers seconds (log)")
    b.set_title(f"Peer wait (up to {PARALLEL_LOOKUPS} lookups at once)")
    b.legend(fontsize=8)

    for label, sizes in (
        ("chart default names", result.tf_config["default"]),
        ("longest allowed names", result.tf_config["longest"]),
    ):
        c.plot(list(sizes), [v / 1024 for v in sizes.values()], "o-", label=label)
    c.axhline(MAX_ARG_STRLEN / 1024, color="red", ls="--", lw=1, label="Linux limit per env string (128 KiB)")
    c.set_xlabel("workers")
    c.set_ylabel("TF_CONFIG KiB per pod")
    c.set_title("TF_CONFIG size")
    c.legend(fontsize=8)
    fig.suptitle(f"Figure 4: control path vs. number of workers\n{subtitle}", fontsize=10)
    plots.save(fig, path)


# ---------------------------------------------------------------- the figure

TITLE = "Figure 4: scale of the control path"


def run_figure(bench: BenchRun) -> str:
    load = load_average()
    sizes = [1, 100, 1000] if bench.quick else [1, 10, 100, 300, 1000]
    helm_rows = measure_helm(helmkit.find_helm(), sizes, 2 if bench.quick else 5, log=bench.log)
    peers = measure_peer_wait(
        [10, 1000] if bench.quick else [10, 100, 1000],
        [0.0, 0.001] if bench.quick else [0.0, 0.001, 0.005],
        1.0 if bench.quick else 2.0,
        log=bench.log,
    )
    env = pod_env(helm_rows[-1]["manifest"])
    tf_config = measure_tf_config(env, [1, 10, 100, 300, 1000])
    result = Result(helm_rows, peers, tf_config)
    bench.show(
        "Figure 4: helm template", ["N", "ms", "bytes"], [[r["n"], r["seconds"] * 1e3, r["bytes"]] for r in helm_rows]
    )
    bench.show(
        "Figure 4: peer wait",
        ["names", "ms per lookup", "ready after s", "seconds"],
        [[p["n"], p["delay_ms"], p["ready_after_s"], p["seconds"]] for p in peers],
    )
    bench.show(
        "Figure 4: TF_CONFIG bytes",
        ["workers", "default names", "longest names"],
        [[n, tf_config["default"][n], tf_config["longest"][n]] for n in sorted(tf_config["default"])],
    )
    plot(result, bench.plots / "fig4_control.png", bench.machine_line)
    return section(result, helm_rows, growth(helm_rows), load)


def section(result, helm_rows, growth: dict, load: str) -> str:
    """Figure 4's section of docs/benchmarks.md (pure)."""
    tc = result.tf_config
    ns = sorted(tc["default"])
    grows = {s: v for s, v in growth.items() if v > 1}
    constant = [s for s, v in growth.items() if v <= 1]
    helm_table = table(
        [
            "workers.replicas",
            "helm template ms (median)",
            "rendered bytes",
            "bytes excluding " + (", ".join(grows) or "nothing"),
        ],
        [
            [r["n"], r["seconds"] * 1e3, r["bytes"], sum(v for s, v in r["by_source"].items() if s not in grows)]
            for r in helm_rows
        ],
    )
    peer_rows = [
        [
            p["n"],
            p["delay_ms"],
            p["ready_after_s"] or "-",
            p["seconds"],
            (
                math.ceil(p["n"] / PARALLEL_LOOKUPS) * p["delay_ms"] / 1e3
                if not p["ready_after_s"]
                else p["ready_after_s"]
            ),
        ]
        for p in result.peers
    ]
    peer_table = table(
        ["peer names", "ms per lookup", "all resolve after s", "wait_for_peers s", "lower bound s"], peer_rows
    )
    tf_table = table(
        ["workers", "TF_CONFIG bytes (chart default names)", "TF_CONFIG bytes (52-char names, 63-char namespace)"],
        [[n, tc["default"][n], tc["longest"][n]] for n in ns],
    )
    growth_text = "; ".join(f"`{s}` grows {v:.0f} bytes per worker" for s, v in grows.items())
    return paragraphs(
        "## Figure 4: scale of the control path (1 to 1,000 workers)",
        image("fig4_control.png", "helm template size/time, peer wait, TF_CONFIG size vs workers"),
        settings_line(
            "`helm template` of the chart with its defaults and `--set workers.replicas=N`, median of "
            "the repeats; `entrypoint.peers.wait_for_peers` with an injected resolver (a sleep per "
            "lookup, no DNS), real clock; TF_CONFIG built by `entrypoint.cluster.build_tf_config` from "
            "the rendered StatefulSet's env, for the last pod.",
            load,
        ),
        helm_table,
        "**Rendered size.** The workers are one StatefulSet, so the workload objects "
        f"({', '.join('`' + s + '`' for s in constant)}) are the same size for 1 and for 1,000 workers "
        "(only the `replicas` number changes). "
        + (
            f"What grows: {growth_text} — the `helm test` pod lists every worker address as an argument "
            f"({sum(grows.values()) * helm_rows[-1]['n'] / 1000:.0f} KB at {helm_rows[-1]['n']:,} workers, "
            "far below "
            "Kubernetes' ~1.5 MB object limit). "
            if grows
            else ""
        )
        + f"`helm template` takes {helm_rows[-1]['seconds'] / helm_rows[0]['seconds']:.1f}x as long for "
        f"{helm_rows[-1]['n']:,} workers as for {helm_rows[0]['n']:,} "
        f"({helm_rows[0]['seconds'] * 1e3:.0f} vs. {helm_rows[-1]['seconds'] * 1e3:.0f} ms).",
        peer_table,
        f"**Peer wait.** `wait_for_peers` resolves up to {PARALLEL_LOOKUPS} names at once, so one pass over "
        f"N names costs about ceil(N / {PARALLEL_LOOKUPS}) lookup times (lower bound column; e.g. 1,000 names "
        "x a 5 ms DNS answer = 32 x 5 ms = 0.16 s per pass). Only the chief waits for all N names before "
        "TensorFlow starts; every other worker waits for the chief's alone (docs/contracts.md). The loop's "
        "own overhead is small (0 ms rows: thread start-up for each pass). When names appear "
        "late, the doubling backoff (0.25 s up to 5 s) overshoots the moment they resolve by up to the last "
        "sleep (the 'all resolve after' row).",
        tf_table,
        f"**TF_CONFIG.** Every pod's TF_CONFIG lists every worker, so it grows linearly: "
        f"{tc['default'][ns[-1]]:,} bytes at {ns[-1]:,} workers with the chart's default names. Linux refuses to "
        f"start a process with one environment string over 128 KiB (MAX_ARG_STRLEN; `exec` fails with E2BIG, "
        f"checked on this machine): the launcher could not start the training command above about "
        f"{tc['limit_default']:,} workers with the default names, and above about {tc['limit_longest']:,} "
        "workers with 52-character release names in a 63-character namespace — below the chart's schema "
        "maximum of 1,024 replicas.",
    )
