"""Figure 1: distribution overhead — per-step time of N-worker MWMS vs. one worker.

Same per-replica batch, one intra/inter-op thread per process, synthetic in-memory data,
the trainer's step function (scripts/tfmw/bench/mwms_step.py). Rounds alternate one-worker and
N-worker runs; each round's ratio is taken from its own pair and the figure reports the
median ratio over rounds (the machine is shared: slow drift cancels within a pair).

The physical floor is measured in the same rounds: two processes on loopback TCP each send and
receive, at once, the bytes a ring all-reduce moves per worker per step (2(N-1)/N times the
gradient; the gradient itself for N = 2). What distribution adds per step (tN - t1) reads as
a multiple of that floor.

    python -m tfmw.bench.fig_overhead exchange-peer <port> '<[bytes, ...]>' <repeats>
is the floor's second process (started by exchange_floor).
"""

from __future__ import annotations

import json
import selectors
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from . import plots, stats
from .figure import BenchRun
from .gpus import collective
from .machine import cpu_bf16_units, load_average
from .parse import bench_cases
from .procs import PY, REPO, BenchError, base_env, run_workers
from .report import image, settings_line, table

BATCH = 32
IMAGE = [28, 28, 1]
MAIN_MODEL = "resnet-w16"
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
BF16 = "mixed_bfloat16"


@dataclass(frozen=True)
class Case:
    id: str
    model: str
    args: dict
    input_shape: list
    k: int
    steps: int  # timed steps (a multiple of k)
    label: str  # what a reader sees in the table
    dtype: str = "float32"  # the trainer's allReduceDtype
    micro: int = 1  # the trainer's gradientAccumulationSteps: micro-batches of BATCH per step
    precision: str = "float32"  # the trainer's precision (Keras' mixed policy)
    jit: bool = False  # the trainer's jitCompile
    baseline: str | None = None  # a fast-step case: the id of its float32, K=1, no-XLA twin
    warmup_calls: int = 2  # untimed calls first: the trace, XLA's compile, the first collectives

    def spec(self) -> dict:
        return {
            "id": self.id,
            "model": self.model,
            "args": self.args,
            "input_shape": self.input_shape,
            "batch": BATCH,
            "k": self.k,
            "warmup_calls": self.warmup_calls,
            "calls": self.steps // self.k,
            "dtype": self.dtype,
            "micro": self.micro,
            "precision": self.precision,
            "jit": self.jit,
        }


def _resnet(width: int) -> dict:
    return {"width": width, "blocks": 1, "stages": 3}


def plan(quick: bool) -> list[Case]:
    """Model sizes at K=1, then steps per execution K on the tiny and the main model.

    `tiny` (a 610-parameter MLP on 8x8 inputs) has almost no compute: its N-worker step time
    is the collective latency floor. resnet-wW is the trainer's `resnet` model (1 block per
    stage, 3 stages) at width W: compute grows about 4x per doubling of W, so the same
    collective becomes a smaller share of the step. `cnn` is the trainer's default model:
    little compute but 3.2 M parameters (a 12.9 MB gradient per step) — bandwidth-bound; it
    is also measured with `allReduceDtype: bfloat16` (half the bytes) and with
    `gradientAccumulationSteps` 2 and 4 (one all-reduce per 2 or 4 micro-batches of BATCH).
    Last, the trainer's fast-step settings (fast_cases) on `cnn` and, in a full run, the main
    resnet, each against that model's float32, K=1, no-XLA row.
    """
    scale = 0.3 if quick else 1.0

    def steps(n: int, k: int = 1) -> int:
        return max(k, int(n * scale) // k * k)

    cases = [
        Case("tiny", "mlp", {"hidden": 8}, [8, 8], 1, steps(150), "tiny MLP (610 params)"),
        Case("cnn", "cnn", {}, IMAGE, 1, steps(40), "cnn (default model)"),
        Case("cnn-bf16", "cnn", {}, IMAGE, 1, steps(40), "cnn, bfloat16 all-reduce", dtype="bfloat16"),
        # one all-reduce per 2 or 4 micro-batches of the same size: the all-reduce's cost per example
        Case("cnn-acc2", "cnn", {}, IMAGE, 1, steps(24), "cnn, 2 micro-batches per step", micro=2),
        Case("cnn-acc4", "cnn", {}, IMAGE, 1, steps(16), "cnn, 4 micro-batches per step", micro=4),
        Case("resnet-w8", "resnet", _resnet(8), IMAGE, 1, steps(60), "resnet width 8"),
        Case("resnet-w16", "resnet", _resnet(16), IMAGE, 1, steps(36), "resnet width 16"),
        Case("resnet-w32", "resnet", _resnet(32), IMAGE, 1, steps(16), "resnet width 32"),
    ]
    if quick:  # the floor, the bandwidth-bound and one compute-bound model
        cases = [c for c in cases if c.id in ("tiny", "cnn", "cnn-bf16", "cnn-acc2", "cnn-acc4", MAIN_MODEL)]
    ks = (16,) if not quick else (8,)
    for k in ks:
        cases.append(Case(f"tiny-k{k}", "mlp", {"hidden": 8}, [8, 8], k, steps(160, k), f"tiny MLP, K={k}"))
        cases.append(
            Case(f"{MAIN_MODEL}-k{k}", "resnet", _resnet(16), IMAGE, k, steps(32, k), f"resnet width 16, K={k}")
        )
    by_id = {c.id: c for c in cases}
    # The fast-step settings against their float32, K=1, no-XLA twin: the default model in quick
    # mode, also the main resnet in a full run. Fewer steps than the model rows, a bfloat16 resnet
    # fewest (its step is several times float32's on a CPU without bfloat16 units).
    fast = {"cnn": (16, 16, 16)} if quick else {"cnn": (16, 20, 16), MAIN_MODEL: (6, 12, 16)}
    for base_id, (n_bf16, n1, nk) in fast.items():
        cases += fast_cases(by_id[base_id], steps(n_bf16), steps(n1), steps(nk, FAST_K))
    return cases


FAST_K = 8  # stepsPerExecution of the fast-step rows
SHORT = {"tiny": "tiny MLP", "cnn": "cnn", MAIN_MODEL: "resnet width 16"}


def fast_cases(base: Case, steps_bf16: int, steps_k1: int, steps_k: int) -> list[Case]:
    """The trainer's fast-step settings on `base`'s model, each a case whose baseline is `base`
    (float32, K=1, no XLA): mixed_bfloat16, jitCompile, stepsPerExecution K, and all three. A
    K-step row warms up with one call (K steps; it traces and compiles), the others with two."""
    name = SHORT.get(base.id, base.label)
    same = {"model": base.model, "args": base.args, "input_shape": base.input_shape, "baseline": base.id}
    once = {"k": FAST_K, "steps": steps_k, "warmup_calls": 1}
    return [
        Case(f"{base.id}-mbf16", k=1, steps=steps_bf16, label=f"{name}, mixed_bfloat16", precision=BF16, **same),
        Case(f"{base.id}-xla", k=1, steps=steps_k1, label=f"{name}, jitCompile", jit=True, **same),
        Case(f"{base.id}-spe{FAST_K}", label=f"{name}, stepsPerExecution {FAST_K}", **once, **same),
        Case(f"{base.id}-fast", label=f"{name}, all three", precision=BF16, jit=True, **once, **same),
    ]


def ring_bytes(params: int, dtype: str, workers: int) -> int:
    """Bytes a ring all-reduce sends (and receives) per worker per step: reduce-scatter then
    all-gather, each (N-1)/N of the gradient."""
    return int(round(params * DTYPE_BYTES[dtype] * 2 * (workers - 1) / workers))


def exchange_repeats(nbytes: int, quick: bool = False) -> int:
    """Exchanges per timed block: about 200 MB each way (100 MB quick), 5 to 200 of them."""
    budget = 100e6 if quick else 200e6
    return int(min(200, max(5, budget // max(nbytes, 1))))


def _exchange(sock: socket.socket, send: memoryview, recv: memoryview, nbytes: int) -> None:
    """Send nbytes and receive nbytes at once (one thread, non-blocking socket, select)."""
    sent = got = 0
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    try:
        while sent < nbytes or got < nbytes:
            events = (selectors.EVENT_READ if got < nbytes else 0) | (selectors.EVENT_WRITE if sent < nbytes else 0)
            sel.modify(sock, events)
            for _, mask in sel.select():
                if mask & selectors.EVENT_WRITE and sent < nbytes:
                    try:
                        sent += sock.send(send[sent:nbytes])
                    except BlockingIOError:
                        pass
                if mask & selectors.EVENT_READ and got < nbytes:
                    try:
                        n = sock.recv_into(recv[got:nbytes])
                    except BlockingIOError:
                        continue
                    if n == 0:
                        raise BenchError("figure 1: loopback floor: the peer closed the connection")
                    got += n
    finally:
        sel.close()


def _exchange_blocks(sock: socket.socket, sizes: list[int], repeats: list[int], blocks: int) -> dict[int, float]:
    """Seconds per exchange for each size: the median over `blocks` timed blocks (after one
    untimed exchange); both processes run the same sequence."""
    buf_send = memoryview(bytearray(max(sizes)))
    buf_recv = memoryview(bytearray(max(sizes)))
    sock.setblocking(False)
    result = {}
    for size, count in zip(sizes, repeats, strict=True):
        _exchange(sock, buf_send, buf_recv, size)
        per_block = []
        for _ in range(blocks):
            started = time.perf_counter()
            for _ in range(count):
                _exchange(sock, buf_send, buf_recv, size)
            per_block.append((time.perf_counter() - started) / count)
        result[size] = stats.median(per_block)
    return result


def exchange_floor(sizes: list[int], quick: bool = False, blocks: int = 3, timeout: float = 120.0) -> dict[int, float]:
    """{bytes: seconds}: two processes on loopback TCP each send and receive `bytes` at once."""
    sizes = sorted(set(sizes))
    repeats = [exchange_repeats(n, quick) for n in sizes]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(timeout)
    peer = subprocess.Popen(
        [
            PY,
            "-m",
            "tfmw.bench.fig_overhead",
            "exchange-peer",
            str(listener.getsockname()[1]),
            json.dumps(sizes),
            json.dumps(repeats),
            str(blocks),
        ],
        cwd=REPO,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        sock, _ = listener.accept()
        with sock:
            result = _exchange_blocks(sock, sizes, repeats, blocks)
        out, _ = peer.communicate(timeout=timeout)
        if peer.returncode != 0:
            raise BenchError(f"figure 1: loopback floor: the peer exited {peer.returncode}: {out.strip()[-200:]}")
        return result
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BenchError(f"figure 1: loopback floor: {type(err).__name__}: {err}") from None
    finally:
        listener.close()
        if peer.poll() is None:
            peer.kill()
            peer.wait()


def _exchange_peer(argv: list[str]) -> int:
    port, sizes, repeats, blocks = int(argv[0]), json.loads(argv[1]), json.loads(argv[2]), int(argv[3])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        _exchange_blocks(sock, sizes, repeats, blocks)
    return 0


def measure(cases: list[Case], workers: int, rounds: int, gpus: int = 0, log=print, quick: bool = False) -> dict:
    """{case id: {"t1": [s per round], "tn": [...], "floor": [...], "params": int,
    "exchanged_bytes": int}} — raw per-step seconds, and per round the loopback floor for the
    bytes the case's all-reduce moves per worker."""
    specs = json.dumps([c.spec() for c in cases], separators=(",", ":"))
    raw = {c.id: {"t1": [], "tn": [], "c1": [], "cn": [], "floor": [], "params": None, "seconds": 0.0} for c in cases}
    timeout = 600.0
    chosen = collective(gpus, [c.dtype for c in cases])  # RING when a case needs bfloat16
    for r in range(rounds):
        for n, key, cpu_key in ((1, "t1", "c1"), (workers, "tn", "cn")):
            log(f"  figure 1: round {r + 1}/{rounds}, {n} worker(s)")
            outputs = run_workers(
                ["tfmw.bench.mwms_step", specs], n, timeout, {"TFMW_BENCH_COLLECTIVE": chosen}, not gpus, gpus
            )
            per_worker = [bench_cases(out) for out in outputs]
            for case in cases:
                found = [w[case.id] for w in per_worker if case.id in w]
                if len(found) != n:
                    raise BenchError(f"figure 1: case {case.id} missing from {n - len(found)} worker(s)")
                # Lockstep workers: the slowest one is the group's step time.
                raw[case.id][key].append(max(f["step_seconds"] for f in found))
                raw[case.id][cpu_key].append(sum(f["cpu_seconds"] for f in found) / n)
                raw[case.id]["params"] = found[0]["params"]
                # what the case cost the figure: build, trace, compile, warm-up and timed calls
                raw[case.id]["seconds"] += max(f.get("case_seconds", 0.0) for f in found)
        log(f"  figure 1: round {r + 1}/{rounds}, loopback floor")
        nbytes = {c.id: ring_bytes(raw[c.id]["params"], c.dtype, workers) for c in cases}
        floor = exchange_floor(list(nbytes.values()), quick=quick)
        for case in cases:
            raw[case.id]["floor"].append(floor[nbytes[case.id]])
            raw[case.id]["exchanged_bytes"] = nbytes[case.id]
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
    dtype: str = "float32"
    exchanged_mb: float | None = None  # MB a ring all-reduce sends (and receives) per worker per step
    floor_ms: float | None = None  # loopback: that many bytes sent and received at once, 2 processes
    added_vs_floor: float | None = None  # (tN - t1) / floor, per round, median
    vs_float32: float | None = None  # N-worker step / the same case's float32 N-worker step, per round
    micro: int = 1  # micro-batches per step (gradientAccumulationSteps)
    precision: str = "float32"
    jit: bool = False
    baseline: str | None = None  # a fast-step row: its float32, K=1, no-XLA twin's id
    steps: int = 0  # timed steps per run
    seconds: float = 0.0  # the case's whole wall time over every run (build and warm-up included)
    # against the baseline, paired per round (median, min, max): wall and CPU, 1 and N workers
    vs_base_1: tuple | None = None
    vs_base_n: tuple | None = None
    cpu_vs_base_1: float | None = None
    cpu_vs_base_n: float | None = None

    @property
    def added_per_micro_vs_floor(self) -> float | None:
        """What distribution adds per micro-batch of BATCH examples, as a multiple of the floor of
        one all-reduce: the figure accumulation divides (k = 1: added_vs_floor itself)."""
        return None if self.added_vs_floor is None else self.added_vs_floor / self.micro


def _float32_twin(case: Case, cases: list[Case]) -> Case | None:
    if case.dtype == "float32":
        return None
    return next(
        (
            c
            for c in cases
            if c.dtype == "float32"
            and (c.model, c.args, c.input_shape, c.k, c.micro)
            == (case.model, case.args, case.input_shape, case.k, case.micro)
        ),
        None,
    )


def summarize(cases: list[Case], raw: dict) -> list[Row]:
    rows = []
    for case in cases:
        data = raw[case.id]
        ratios = stats.paired_ratios(data["tn"], data["t1"])
        lo, hi = stats.spread(ratios)
        t1, tn = stats.median(data["t1"]), stats.median(data["tn"])
        ratio = stats.median(ratios)
        floor_ms = added_vs_floor = exchanged = None
        if data.get("floor"):
            floor_ms = stats.median(data["floor"]) * 1e3
            added_vs_floor = stats.median(
                stats.paired_ratios([n - one for n, one in zip(data["tn"], data["t1"], strict=True)], data["floor"])
            )
            exchanged = data["exchanged_bytes"] / 1e6
        twin = _float32_twin(case, cases)
        vs_float32 = stats.median(stats.paired_ratios(data["tn"], raw[twin.id]["tn"])) if twin else None
        against = {}
        if case.baseline:
            base = raw[case.baseline]
            against = {
                "vs_base_1": _paired(data["t1"], base["t1"]),
                "vs_base_n": _paired(data["tn"], base["tn"]),
                "cpu_vs_base_1": _paired(data["c1"], base["c1"])[0],
                "cpu_vs_base_n": _paired(data["cn"], base["cn"])[0],
            }
        rows.append(
            Row(
                case.id,
                case.label,
                case.k,
                data["params"],
                t1 * 1e3,
                tn * 1e3,
                ratio,
                1.0 / ratio,
                lo,
                hi,
                stats.median(data["c1"]) * 1e3,
                stats.median(data["cn"]) * 1e3,
                case.dtype,
                exchanged,
                floor_ms,
                added_vs_floor,
                vs_float32,
                case.micro,
                case.precision,
                case.jit,
                case.baseline,
                case.steps,
                data.get("seconds", 0.0),
                **against,
            )
        )
    return rows


def _paired(values, baseline) -> tuple[float, float, float]:
    """(median, min, max) of the per-round ratios values / baseline."""
    ratios = stats.paired_ratios(values, baseline)
    return (stats.median(ratios), *stats.spread(ratios))


HEADERS = [
    "case",
    "K",
    "params",
    "1 worker ms/step",
    "N workers ms/step",
    "ratio tN/t1",
    "(min-max)",
    "scaling efficiency",
    "added ms/step",
    "CPU ms/step 1 worker",
    "CPU ms/step per worker, N",
    "all-reduce MB each way per worker",
    "loopback floor ms",
    "added / floor",
    "N-worker step vs float32",
    "micro-batches per step",
    "added per micro-batch / floor",
]


def table_rows(rows: list[Row]) -> list[list]:
    return [
        [
            r.label,
            r.k,
            r.params,
            r.t1_ms,
            r.tn_ms,
            r.ratio,
            f"{r.ratio_min:.2f}-{r.ratio_max:.2f}",
            r.efficiency,
            r.tn_ms - r.t1_ms,
            r.cpu1_ms,
            r.cpun_ms,
            r.exchanged_mb,
            r.floor_ms,
            r.added_vs_floor,
            r.vs_float32,
            r.micro,
            r.added_per_micro_vs_floor,
        ]
        for r in rows
    ]


FAST_HEADERS = [
    "case",
    "K",
    "1 worker ms/step",
    "1-worker step vs float32 baseline",
    "(min-max)",
    "CPU ms/step 1 worker",
    "CPU vs baseline, 1 worker",
    "N workers ms/step",
    "N-worker step vs float32 baseline",
    "(min-max)",
    "CPU ms/step per worker, N",
    "CPU vs baseline, N",
]


def fast_groups(rows: list[Row]) -> list[tuple[Row, list[Row]]]:
    """(baseline row, its fast-step rows) for every baseline some row is compared with, in plan order."""
    by_id = {r.id: r for r in rows}
    order = list(dict.fromkeys(r.baseline for r in rows if r.baseline and r.baseline in by_id))
    return [(by_id[b], [r for r in rows if r.baseline == b]) for b in order]


def _spread_cell(ratio: tuple | None) -> str | None:
    return None if ratio is None else f"{ratio[1]:.2f}-{ratio[2]:.2f}"


def fast_table_rows(rows: list[Row]) -> list[list]:
    """The fast-step table: each baseline (float32, K=1, no XLA) then its settings, with every
    ratio paired per round against that baseline."""
    out = []
    for base, fast in fast_groups(rows):
        for r in [base, *fast]:
            out.append(
                [
                    f"{r.label}, float32 baseline" if r is base else r.label,
                    r.k,
                    r.t1_ms,
                    None if r.vs_base_1 is None else r.vs_base_1[0],
                    _spread_cell(r.vs_base_1),
                    r.cpu1_ms,
                    r.cpu_vs_base_1,
                    r.tn_ms,
                    None if r.vs_base_n is None else r.vs_base_n[0],
                    _spread_cell(r.vs_base_n),
                    r.cpun_ms,
                    r.cpu_vs_base_n,
                ]
            )
    return out


def plot(rows: list[Row], workers: int, path, subtitle: str) -> None:
    by_id = {r.id: r for r in rows}
    sizes = [r for r in rows if r.k == 1 and r.micro == 1 and r.baseline is None]
    groups = fast_groups(rows)
    fig, axes = plots.subplots(1, 3 if groups else 2, figsize=(20 if groups else 12, 5.2))
    left, right = axes[0], axes[1]
    xs = range(len(sizes))
    left.bar([x - 0.2 for x in xs], [r.t1_ms for r in sizes], 0.4, label="1 worker")
    left.bar([x + 0.2 for x in xs], [r.tn_ms for r in sizes], 0.4, label=f"{workers} workers (MWMS)")
    for x, r in zip(xs, sizes, strict=True):
        left.annotate(
            f"x{r.ratio:.2f}\neff {r.efficiency:.0%}", (x + 0.2, r.tn_ms), ha="center", va="bottom", fontsize=8
        )
    floors = [(x, r) for x, r in zip(xs, sizes, strict=True) if r.floor_ms is not None]
    if floors:  # where the N-worker bar would end if the all-reduce cost only its bytes over loopback
        left.hlines(
            [r.t1_ms + r.floor_ms for _, r in floors],
            [x + 0.02 for x, _ in floors],
            [x + 0.38 for x, _ in floors],
            colors="black",
            linewidth=2,
            label="1 worker + loopback floor of the all-reduce's bytes",
        )
    left.set_xticks(list(xs))
    left.set_xticklabels([r.label.replace(" (", "\n(") for r in sizes], fontsize=8)
    left.set_yscale("log")
    top = max(max(r.tn_ms, r.t1_ms) for r in sizes)
    left.set_ylim(None, top * 12)  # room for the ratio labels above the tallest bar, and the legend
    left.set_ylabel("ms per step (log)")
    left.set_title("Per-step time by model (K=1 step per call)")
    left.legend(fontsize=7, loc="upper left")

    for base, marker in (("tiny", "o"), (MAIN_MODEL, "s")):
        series = [
            r
            for r in rows
            if r.id == base
            or r.id.startswith(base + "-k")
            or (r.baseline == base and r.precision == "float32" and not r.jit)  # stepsPerExecution alone
        ]
        series.sort(key=lambda r: r.k)
        if series:
            right.plot(
                [r.k for r in series],
                [r.tn_ms - r.t1_ms for r in series],
                marker=marker,
                label=f"{by_id[base].label if base in by_id else base}",
            )
            for r in series:
                right.annotate(
                    f"x{r.ratio:.2f}", (r.k, r.tn_ms - r.t1_ms), textcoords="offset points", xytext=(4, 4), fontsize=8
                )
    right.set_xscale("log", base=2)
    right.set_ylim(0, None)
    right.set_xlabel("steps per tf.function call (K)")
    right.set_ylabel(f"added ms per step, t{workers} - t1")
    right.set_title("Distribution cost per step vs. steps per execution\n(labels: ratio tN/t1)", fontsize=10)
    right.legend(fontsize=8)
    if groups:
        plot_fast(axes[2], groups, workers)
    fig.suptitle(f"Figure 1: distribution overhead, {workers}-worker MWMS vs. 1 worker\n{subtitle}", fontsize=10)
    plots.save(fig, path)


def _setting(r: Row) -> str:
    return r.label.split(", ", 1)[-1].replace("stepsPerExecution ", "K=").replace("mixed_bfloat16", "bf16")


def plot_fast(ax, groups, workers: int) -> None:
    """Each fast-step row's step time over its float32 baseline's, 1 and N workers, with the
    min-max of the per-round ratios as error bars."""
    x, ticks, labels = 0.0, [], []
    for n, (base, fast) in enumerate(groups):  # a gap between models
        for r in fast:
            for offset, ratio, colour, name in (
                (-0.2, r.vs_base_1, "C0", "1 worker"),
                (0.2, r.vs_base_n, "C1", f"{workers} workers"),
            ):
                if ratio is None:
                    continue
                ax.bar(x + offset, ratio[0], 0.4, color=colour, label=name if x == 0 else None)
                ax.errorbar(
                    x + offset, ratio[0], yerr=[[ratio[0] - ratio[1]], [ratio[2] - ratio[0]]], color="black", capsize=2
                )
            ticks.append(x)
            labels.append(f"{SHORT.get(base.id, base.label)}: {_setting(r)}")
            x += 1
        x += 0.6 if n + 1 < len(groups) else 0
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter  # matplotlib is imported only by a run that draws

    ax.yaxis.set_major_formatter(FormatStrFormatter("%.1fx"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%.1fx"))
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("step time / float32 baseline's (log)")
    ax.set_title("Fast-step settings vs. float32, K=1, no XLA\n(below 1: faster; bars: min-max of rounds)", fontsize=10)
    ax.legend(fontsize=8)


# ---------------------------------------------------------------- the figure

TITLE = "Figure 1: distribution overhead"


def run_figure(bench: BenchRun) -> str:
    cases = plan(bench.quick)
    rounds = 1 if bench.quick else 3
    load = load_average()
    raw = measure(cases, bench.workers, rounds, gpus=bench.gpus, log=bench.log, quick=bench.quick)
    rows = summarize(cases, raw)
    shown = table_rows(rows)
    bench.show(TITLE, HEADERS, shown)
    bench.show(f"{TITLE}: fast steps vs. float32", FAST_HEADERS, fast_table_rows(rows))
    plot(rows, bench.workers, bench.plots / "fig1_overhead.png", bench.machine_line)
    return section(rows, shown, HEADERS, bench.workers, rounds, load, MAIN_MODEL, bench.gpus, cpu_bf16_units())


def gpu_setting(gpus: int, rows) -> str:
    """`GPUs: G per worker, NCCL`, or RING when a case all-reduces in bfloat16 (NCCL has none)."""
    chosen = collective(gpus, [r.dtype for r in rows])
    return f"GPUs: {gpus} per worker, " + (
        "NCCL" if chosen == "nccl" else "RING (a bfloat16 case: NCCL has no bfloat16)"
    )


def section(
    rows,
    table_rows,
    headers,
    workers: int,
    rounds: int,
    load: str,
    main_id: str,
    gpus: int,
    bf16_cpu: bool | None = None,
) -> str:
    """Figure 1's section of docs/benchmarks.md, from its rows (pure)."""
    by_id = {r.id: r for r in rows}
    # The most compute-bound case: the resnet with the longest one-worker step at K=1.
    resnets = [r for r in rows if r.k == 1 and r.id.startswith("resnet") and r.baseline is None]
    main = max(resnets, key=lambda r: r.t1_ms) if resnets else by_id.get(main_id)
    tiny = by_id.get("tiny")
    cnn = by_id.get("cnn")
    ks = sorted({r.k for r in rows if r.k > 1 and r.baseline is None})
    fast_rows = [r for r in rows if r.baseline]
    lines = [
        "## Figure 1: distribution overhead (N-worker MWMS vs. one worker)",
        "",
        image("fig1_overhead.png", "per-step time, 1 vs N workers, by model and steps per execution"),
        "",
        settings_line(
            f"N = {workers} workers on loopback, "
            f"{gpu_setting(gpus, rows) if gpus else 'CPU, RING all-reduce'}; "
            + (
                "no thread limits; "
                if gpus
                else "TF_NUM_INTRAOP_THREADS=1, TF_NUM_INTEROP_THREADS=1, OMP_NUM_THREADS=1 in every process; "
            )
            + f"per-replica batch 32 in both runs (so N workers do N times the work per step: weak scaling); "
            f"synthetic data held in memory; Adam; {rounds} round(s), each one 1-worker run then one {workers}-worker "
            f"run, ratio taken per round, median reported (min-max across rounds in brackets)"
            + (
                f"; the fast-step rows time {min(r.steps for r in fast_rows)}-{max(r.steps for r in fast_rows)} "
                "steps per run (fewer than the model rows) after untimed warm-up calls"
                + (
                    f", and took {sum(r.seconds for r in fast_rows) / 60:.1f} of the "
                    f"{sum(r.seconds for r in rows) / 60:.1f} min the workers spent in the cases (build, trace, "
                    "compile, warm-up and timed steps, every run summed)."
                    if any(r.seconds for r in fast_rows)
                    else "."
                )
                if fast_rows
                else "."
            ),
            load,
        ),
        "",
        table(headers, table_rows),
        "",
    ]
    if main and tiny:
        lines += [
            f"**Reading it.** On the compute-bound model ({main.label}, {main.params:,} parameters, "
            f"{main.t1_ms:.0f} ms per step on one worker) {workers} workers take {main.ratio:.2f}x the "
            "one-worker step time: "
            f"scaling efficiency {main.efficiency:.0%}, i.e. {workers} workers process "
            f"{workers * main.efficiency:.2f}x the "
            f"examples per second of one. Its CPU time per step per worker is {main.cpun_ms / main.cpu1_ms:.2f}x the "
            f"one-worker figure ({main.cpun_ms:.0f} vs. {main.cpu1_ms:.0f} ms): the work distribution adds; the rest "
            "of the wall-clock ratio is time spent waiting — for the peer in the collective, or for a core taken by "
            "other jobs on this shared machine (the min-max column shows how much that moved between rounds). "
            f"The tiny model has almost no compute, so its {workers}-worker step "
            f"({tiny.tn_ms:.1f} ms vs. {tiny.t1_ms:.2f} ms alone) is the floor of one step's collective (the "
            "gradient all-reduce; the loss crosses workers only on "
            "the steps that log it) on this loopback. The cost a collective adds per step is that floor plus "
            "the gradient bytes over "
            "the link"
            + (
                f": the `cnn` model has little compute but {cnn.params:,} parameters (a {cnn.params * 4 / 1e6:.1f} MB "
                f"float32 gradient per step) and pays {cnn.tn_ms - cnn.t1_ms:.0f} ms per step."
                if cnn
                else "."
            ),
            "",
        ]
    bf16 = by_id.get("cnn-bf16")
    if cnn and cnn.floor_ms and cnn.added_vs_floor is not None:
        lines += [
            f"**Against the physical limit.** Every round also times the loopback floor: two processes each "
            f"sending and receiving at once the bytes a ring all-reduce moves per worker per step "
            f"({cnn.exchanged_mb:.2f} MB for `cnn`'s float32 gradient): {cnn.floor_ms:.1f} ms. What distribution "
            f"adds to `cnn`'s step is {cnn.added_vs_floor:.1f}x that floor (median of per-round ratios): TF's "
            "collective path costs CPU work that grows with the bytes, not the wire."
            + (
                f" With `allReduceDtype: bfloat16` the gradient crosses as {bf16.exchanged_mb:.2f} MB (floor "
                f"{bf16.floor_ms:.1f} ms), the added time is {bf16.added_vs_floor:.1f}x its floor, and the "
                f"{workers}-worker step is {bf16.vs_float32:.3f}x float32's (paired per round; docs/training.md "
                "gives the accuracy cost)."
                if bf16 and bf16.floor_ms and bf16.vs_float32 is not None and bf16.added_vs_floor is not None
                else ""
            ),
            "",
        ]
    accumulated = [
        by_id[key]
        for key in ("cnn-acc2", "cnn-acc4")
        if key in by_id and by_id[key].added_per_micro_vs_floor is not None
    ]
    if cnn and cnn.added_vs_floor is not None and accumulated:
        last = accumulated[-1]
        met = "met" if last.micro == 4 and last.added_per_micro_vs_floor <= 3 else "not met"
        lines += [
            "**Gradient accumulation.** With `gradientAccumulationSteps: k` a step trains k micro-batches of the "
            "same size and all-reduces once (docs/training.md): what distribution adds per micro-batch, as a "
            f"multiple of the floor of one all-reduce, is {cnn.added_vs_floor:.1f}x at k = 1, "
            + ", ".join(f"{r.added_per_micro_vs_floor:.1f}x at k = {r.micro}" for r in accumulated)
            + f" (target: <= 3x at k = 4: {met}; the spread of the {workers}-worker/1-worker ratio is in "
            "the table's min-max column).",
            "",
        ]
    if ks:
        lines += [
            "**Steps per execution.** K > 1 is the trainer's `stepsPerExecution`: "
            "`scripts/tfmw/bench/mwms_step.py` takes the training function from the trainer's own "
            "`step_functions` (the replica step under `strategy.run`, each worker summing its loss locally, K "
            "steps in a graph loop inside one `tf.function` call). K removes the per-call Python dispatch, not the "
            "collective: every step still all-reduces its gradients, so K cannot push the N-worker step below the "
            "collective floor.",
        ]
        kmax = ks[-1]
        tiny_k = by_id.get(f"tiny-k{kmax}")
        main_k1, main_k = by_id.get(main_id), by_id.get(f"{main_id}-k{kmax}")
        if tiny and tiny_k:
            lines[-1] += (
                f" Measured: for the tiny model K={kmax} takes the one-worker step from {tiny.t1_ms:.2f} to "
                f"{tiny_k.t1_ms:.2f} ms (the per-call cost it removes) and the {workers}-worker step from "
                f"{tiny.tn_ms:.2f} to {tiny_k.tn_ms:.2f} ms; what distribution adds per step goes from "
                f"{tiny.tn_ms - tiny.t1_ms:.2f} to {tiny_k.tn_ms - tiny_k.t1_ms:.2f} ms — the collective "
                "stays. The ratio rises only because the one-worker step shrinks."
            )
        if main_k1 and main_k:
            lines[-1] += (
                f" For {main_k1.label} ({main_k1.t1_ms:.0f} ms of compute per step) the ratio goes from "
                f"{main_k1.ratio:.2f} at K=1 to {main_k.ratio:.2f} at K={kmax} "
                f"(min-max across rounds {main_k.ratio_min:.2f}-{main_k.ratio_max:.2f}): per-call "
                "overhead is not what a compute-bound step pays."
            )
        lines.append("")
    if fast_rows:
        lines += fast_section(rows, workers, bf16_cpu)
    lines += [
        "**CPU columns.** `CPU ms/step` is process CPU time (all threads) per step: the work done, without the "
        "time spent waiting for a core or for the peer. Where the wall-clock ratio is far above the CPU ratio, "
        "the difference is waiting — for the collective, or for a core held by someone else on this shared "
        "2-core machine (with N = nproc workers, any other load steals from a worker and the whole group waits "
        "for the slowest).",
        "",
        "**On GPUs or a real cluster** (not run here: no GPU, no cluster): `python -m tfmw.bench --only 1 "
        "--gpus G --workers N` gives each worker G GPUs (`CUDA_VISIBLE_DEVICES`; refused when N x G is more "
        "than the GPUs present), uses NCCL (RING while a case all-reduces in bfloat16, which NCCL lacks) and drops the "
        "one-thread limits; across machines, set the chart's `training.command` to "
        "`[python, -m, tfmw.bench.mwms_step]` (with this repository's `scripts/` in the image): every pod "
        "runs figure 1's cases through the launcher (which sets TF_CONFIG) and prints `tfmw bench case=` lines; "
        "compare with a `workers.replicas=1` release.",
        "",
    ]
    return "\n".join(lines)


def _x(ratio: tuple) -> str:
    """`1.52x (1.40-1.61)`: the median of the per-round ratios and their min-max."""
    return f"{ratio[0]:.2f}x ({ratio[1]:.2f}-{ratio[2]:.2f})"


def _measured(fast: list[Row], setting: str, workers: int) -> str:
    """Per model: the setting's step over the baseline's at 1 and N workers, and in CPU time."""
    parts = []
    for r in fast:
        if _setting(r) != setting or r.vs_base_1 is None or r.vs_base_n is None:
            continue
        parts.append(
            f"{SHORT.get(r.baseline, r.baseline)} {_x(r.vs_base_1)} at 1 worker, {_x(r.vs_base_n)} at {workers} "
            f"(CPU {r.cpu_vs_base_1:.2f}x, {r.cpu_vs_base_n:.2f}x)"
        )
    return "; ".join(parts) if parts else "not measured"


def fast_section(rows: list[Row], workers: int, bf16_cpu: bool | None) -> list[str]:
    """The fast-step block: what was measured, the table, what each setting does here and what a
    GPU is expected to do (pure)."""
    groups = fast_groups(rows)
    fast = [r for _, group in groups for r in group]
    models = ", ".join(f"`{b.label}`" for b, _ in groups)
    k = max((r.k for r in fast), default=FAST_K)
    # the policy alone, slower than float32 in every round on one worker
    slower = [r for r in fast if _setting(r) == "bf16" and r.vs_base_1 and r.vs_base_1[1] > 1.0]
    return [
        "**Fast steps against float32.** The trainer's `precision`, `jitCompile` and `stepsPerExecution` "
        f'(docs/training.md, "Fast steps") on {models}, each against the same model\'s float32 baseline '
        "(K=1, no XLA) measured in the same worker processes of the same round: the ratios are per round "
        "(median, min-max across rounds). `mwms_step.py` builds every case from a trainer config through the "
        "trainer's own functions: `precision.set_policy` before `build_state` (the model, and the optimizer "
        "through `precision.wrap_optimizer`), then `step_functions` for the training function "
        "(`replica_step(jit=...)` under `strategy.run`, K steps per call, called with K as a tensor as the "
        "loop does); Keras' policy is process-wide, so it is set for each case's model and reset to float32 "
        "right after.",
        "",
        table(FAST_HEADERS, fast_table_rows(rows)),
        "",
        "**What each setting does on this CPU.** "
        "`precision: mixed_bfloat16` computes every layer in bfloat16 while the variables, the gradients and "
        "the all-reduce stay float32 (the bytes on the wire do not change): "
        f"{_measured(fast, 'bf16', workers)}. "
        + {
            False: "This CPU's flags list neither avx512_bf16 nor amx_bf16: it has no bfloat16 arithmetic, so "
            "bfloat16 is computed by converting to float32 and back, and each layer adds casts of its inputs and "
            "weights: ",
            True: "This CPU's flags list bfloat16 instructions (avx512_bf16 or amx_bf16); each layer also adds "
            "casts of its inputs and weights: ",
            None: "Each layer adds casts of its inputs and weights: ",
        }[bf16_cpu]
        + (
            "the policy alone makes the one-worker step slower than float32's in every round for "
            + ", ".join(SHORT.get(r.baseline, r.baseline) for r in slower)
            + ". "
            if slower
            else "it gains nothing here. "
        )
        + "`jitCompile: true` compiles each replica's forward and backward pass with XLA (fused kernels, "
        "no op-by-op dispatch inside it; the all-reduce and the update stay outside; the compile itself is in "
        "the untimed first call): "
        f"{_measured(fast, 'jitCompile', workers)}. "
        f"`stepsPerExecution: {k}` returns to Python once per {k} steps: "
        f"{_measured(fast, f'K={k}', workers)} — it matters where a step is short (the per-call cost is a "
        "larger share), not where compute or the collective dominates. All three together: "
        f"{_measured(fast, 'all three', workers)} (set beside `jitCompile` alone: what the policy costs once "
        "XLA compiles the step, casts included). "
        "CPU time moving with the wall time says the setting changed the work done, not the waiting.",
        "",
        "**On a GPU** (expected, not measured: nothing here ran on a GPU). 16-bit layers pay on GPUs with "
        "16-bit matrix units: tensor cores, for float16 on NVIDIA Volta and later and for bfloat16 on Ampere and "
        "later; 16-bit activations also halve the bytes read from memory. TensorFlow's mixed precision guide "
        "(https://www.tensorflow.org/guide/mixed_precision) reports more than 3x on modern GPUs, and NVIDIA's "
        "mixed precision training guide "
        "(https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/index.html) describes the "
        "tensor cores and the loss scaling float16 needs (`mixed_float16` here); on a GPU without them, or on a "
        "CPU without bfloat16 instructions, expect no gain or a loss. XLA fuses operations so an "
        "intermediate result stays in registers instead of a round trip through GPU memory, and launches one "
        "kernel where there were several: memory bandwidth and kernel launches are what a GPU step of many "
        "small operations pays (TensorFlow's XLA page, https://www.tensorflow.org/xla, cites about 7x for BERT "
        "on 8 V100 GPUs), so expect a larger gain there than on this CPU. A GPU step is short, so the fixed "
        "per-call cost that `stepsPerExecution` removes is a larger share of it, as for the tiny model here. "
        "`python -m tfmw.bench --only 1 --gpus G` measures these rows on GPUs (their all-reduce is float32, so "
        "NCCL is unaffected).",
        "",
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["exchange-peer"]:
        sys.exit(_exchange_peer(sys.argv[2:]))
    sys.exit("usage: python -m tfmw.bench.fig_overhead exchange-peer <port> <sizes> <repeats> <blocks>")
