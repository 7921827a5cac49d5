"""Figure 1: distribution overhead — per-step time of N-worker MWMS vs. one worker.

Same per-replica batch, one intra/inter-op thread per process, synthetic in-memory data,
the trainer's step function (scripts/bench/mwms_step.py). Rounds alternate one-worker and
N-worker runs; each round's ratio is taken from its own pair and the figure reports the
median ratio over rounds (the machine is shared: slow drift cancels within a pair).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from . import stats
from .parse import bench_cases
from .procs import BenchError, run_workers

BATCH = 32
IMAGE = [28, 28, 1]
MAIN_MODEL = "resnet-w16"


@dataclass(frozen=True)
class Case:
    id: str
    model: str
    args: dict
    input_shape: list
    k: int
    steps: int  # timed steps (a multiple of k)
    label: str  # what a reader sees in the table

    def spec(self, warmup_calls: int = 2) -> dict:
        return {"id": self.id, "model": self.model, "args": self.args, "input_shape": self.input_shape,
                "batch": BATCH, "k": self.k, "warmup_calls": warmup_calls, "calls": self.steps // self.k}


def _resnet(width: int) -> dict:
    return {"width": width, "blocks": 1, "stages": 3}


def plan(quick: bool) -> list[Case]:
    """Model sizes at K=1, then steps per execution K on the tiny and the main model.

    `tiny` (a 610-parameter MLP on 8x8 inputs) has almost no compute: its N-worker step time
    is the collective latency floor. resnet-wW is the trainer's `resnet` model (1 block per
    stage, 3 stages) at width W: compute grows about 4x per doubling of W, so the same
    collective becomes a smaller share of the step. `cnn` is the trainer's default model:
    little compute but 3.2 M parameters (a 12.9 MB gradient per step) — bandwidth-bound.
    """
    scale = 0.3 if quick else 1.0

    def steps(n: int, k: int = 1) -> int:
        return max(k, int(n * scale) // k * k)

    cases = [
        Case("tiny", "mlp", {"hidden": 8}, [8, 8], 1, steps(150), "tiny MLP (610 params)"),
        Case("cnn", "cnn", {}, IMAGE, 1, steps(40), "cnn (default model)"),
        Case("resnet-w8", "resnet", _resnet(8), IMAGE, 1, steps(60), "resnet width 8"),
        Case("resnet-w16", "resnet", _resnet(16), IMAGE, 1, steps(36), "resnet width 16"),
        Case("resnet-w32", "resnet", _resnet(32), IMAGE, 1, steps(16), "resnet width 32"),
    ]
    if quick:  # the floor, the bandwidth-bound and one compute-bound model
        cases = [c for c in cases if c.id in ("tiny", "cnn", MAIN_MODEL)]
    ks = (16,) if not quick else (8,)
    for k in ks:
        cases.append(Case(f"tiny-k{k}", "mlp", {"hidden": 8}, [8, 8], k, steps(160, k), f"tiny MLP, K={k}"))
        cases.append(Case(f"{MAIN_MODEL}-k{k}", "resnet", _resnet(16), IMAGE, k, steps(32, k),
                          f"resnet width 16, K={k}"))
    return cases


def measure(cases: list[Case], workers: int, rounds: int, gpus: int = 0, log=print) -> dict:
    """{case id: {"t1": [s per round], "tn": [...], "params": int}} — raw per-step seconds."""
    specs = json.dumps([c.spec() for c in cases], separators=(",", ":"))
    raw = {c.id: {"t1": [], "tn": [], "c1": [], "cn": [], "params": None} for c in cases}
    timeout = 600.0
    for r in range(rounds):
        for n, key, cpu_key in ((1, "t1", "c1"), (workers, "tn", "cn")):
            log(f"  figure 1: round {r + 1}/{rounds}, {n} worker(s)")
            outputs = run_workers(["scripts.bench.mwms_step", specs], n, timeout,
                                  one_thread=not gpus, gpus=gpus)
            per_worker = [bench_cases(out) for out in outputs]
            for case in cases:
                found = [w[case.id] for w in per_worker if case.id in w]
                if len(found) != n:
                    raise BenchError(f"figure 1: case {case.id} missing from {n - len(found)} worker(s)")
                # Lockstep workers: the slowest one is the group's step time.
                raw[case.id][key].append(max(f["step_seconds"] for f in found))
                raw[case.id][cpu_key].append(sum(f["cpu_seconds"] for f in found) / n)
                raw[case.id]["params"] = found[0]["params"]
    return raw


@dataclass(frozen=True)
class Row:
    id: str
    label: str
    k: int
    params: int
    t1_ms: float
    tn_ms: float
    ratio: float
    efficiency: float
    ratio_min: float
    ratio_max: float
    cpu1_ms: float
    cpun_ms: float


def summarize(cases: list[Case], raw: dict) -> list[Row]:
    rows = []
    for case in cases:
        data = raw[case.id]
        ratios = stats.paired_ratios(data["tn"], data["t1"])
        lo, hi = stats.spread(ratios)
        t1, tn = stats.median(data["t1"]), stats.median(data["tn"])
        ratio = stats.median(ratios)
        rows.append(Row(case.id, case.label, case.k, data["params"], t1 * 1e3, tn * 1e3, ratio,
                        1.0 / ratio, lo, hi, stats.median(data["c1"]) * 1e3, stats.median(data["cn"]) * 1e3))
    return rows


HEADERS = ["case", "K", "params", "1 worker ms/step", "N workers ms/step", "ratio tN/t1",
           "(min-max)", "scaling efficiency", "added ms/step", "CPU ms/step 1 worker", "CPU ms/step per worker, N"]


def table_rows(rows: list[Row]) -> list[list]:
    return [[r.label, r.k, r.params, r.t1_ms, r.tn_ms, r.ratio, f"{r.ratio_min:.2f}-{r.ratio_max:.2f}",
             r.efficiency, r.tn_ms - r.t1_ms, r.cpu1_ms, r.cpun_ms] for r in rows]


def plot(rows: list[Row], workers: int, path, subtitle: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_id = {r.id: r for r in rows}
    sizes = [r for r in rows if r.k == 1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    xs = range(len(sizes))
    left.bar([x - 0.2 for x in xs], [r.t1_ms for r in sizes], 0.4, label="1 worker")
    left.bar([x + 0.2 for x in xs], [r.tn_ms for r in sizes], 0.4, label=f"{workers} workers (MWMS)")
    for x, r in zip(xs, sizes):
        left.annotate(f"x{r.ratio:.2f}\neff {r.efficiency:.0%}", (x + 0.2, r.tn_ms), ha="center",
                      va="bottom", fontsize=8)
    left.set_xticks(list(xs))
    left.set_xticklabels([r.label.replace(" (", "\n(") for r in sizes], fontsize=8)
    left.set_yscale("log")
    top = max(max(r.tn_ms, r.t1_ms) for r in sizes)
    left.set_ylim(None, top * 4)  # room for the ratio labels above the tallest bar
    left.set_ylabel("ms per step (log)")
    left.set_title("Per-step time by model (K=1 step per call)")
    left.legend(fontsize=8)

    for base, marker in (("tiny", "o"), (MAIN_MODEL, "s")):
        series = [r for r in rows if r.id == base or r.id.startswith(base + "-k")]
        series.sort(key=lambda r: r.k)
        if series:
            right.plot([r.k for r in series], [r.tn_ms - r.t1_ms for r in series], marker=marker,
                       label=f"{by_id[base].label if base in by_id else base}")
            for r in series:
                right.annotate(f"x{r.ratio:.2f}", (r.k, r.tn_ms - r.t1_ms), textcoords="offset points",
                               xytext=(4, 4), fontsize=8)
    right.set_xscale("log", base=2)
    right.set_ylim(0, None)
    right.set_xlabel("steps per tf.function call (K)")
    right.set_ylabel(f"added ms per step, t{workers} - t1")
    right.set_title("Distribution cost per step vs. steps per execution\n(labels: ratio tN/t1)", fontsize=10)
    right.legend(fontsize=8)
    fig.suptitle(f"Figure 1: distribution overhead, {workers}-worker MWMS vs. 1 worker\n{subtitle}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
