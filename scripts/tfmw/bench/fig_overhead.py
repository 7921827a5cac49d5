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
from .machine import load_average
from .parse import bench_cases
from .procs import PY, REPO, BenchError, base_env, run_workers
from .report import image, settings_line, table

BATCH = 32
IMAGE = [28, 28, 1]
MAIN_MODEL = "resnet-w16"
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


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

    def spec(self, warmup_calls: int = 2) -> dict:
        return {
            "id": self.id,
            "model": self.model,
            "args": self.args,
            "input_shape": self.input_shape,
            "batch": BATCH,
            "k": self.k,
            "warmup_calls": warmup_calls,
            "calls": self.steps // self.k,
            "dtype": self.dtype,
            "micro": self.micro,
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
    return cases


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
    raw = {c.id: {"t1": [], "tn": [], "c1": [], "cn": [], "floor": [], "params": None} for c in cases}
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
            )
        )
    return rows


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


def plot(rows: list[Row], workers: int, path, subtitle: str) -> None:
    by_id = {r.id: r for r in rows}
    sizes = [r for r in rows if r.k == 1 and r.micro == 1]
    fig, (left, right) = plots.subplots(1, 2, figsize=(12, 4.8))
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
        series = [r for r in rows if r.id == base or r.id.startswith(base + "-k")]
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
    fig.suptitle(f"Figure 1: distribution overhead, {workers}-worker MWMS vs. 1 worker\n{subtitle}", fontsize=10)
    plots.save(fig, path)


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
    plot(rows, bench.workers, bench.plots / "fig1_overhead.png", bench.machine_line)
    return section(rows, shown, HEADERS, bench.workers, rounds, load, MAIN_MODEL, bench.gpus)


def gpu_setting(gpus: int, rows) -> str:
    """`GPUs: G per worker, NCCL`, or RING when a case all-reduces in bfloat16 (NCCL has none)."""
    chosen = collective(gpus, [r.dtype for r in rows])
    return f"GPUs: {gpus} per worker, " + (
        "NCCL" if chosen == "nccl" else "RING (a bfloat16 case: NCCL has no bfloat16)"
    )


def section(rows, table_rows, headers, workers: int, rounds: int, load: str, main_id: str, gpus: int) -> str:
    """Figure 1's section of docs/benchmarks.md, from its rows (pure)."""
    by_id = {r.id: r for r in rows}
    # The most compute-bound case: the resnet with the longest one-worker step at K=1.
    resnets = [r for r in rows if r.k == 1 and r.id.startswith("resnet")]
    main = max(resnets, key=lambda r: r.t1_ms) if resnets else by_id.get(main_id)
    tiny = by_id.get("tiny")
    cnn = by_id.get("cnn")
    ks = sorted({r.k for r in rows if r.k > 1})
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
            f"run, ratio taken per round, median reported (min-max across rounds in brackets).",
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
            "**Steps per execution.** The trainer has no steps-per-execution knob, so K > 1 is measured with "
            "`scripts/tfmw/bench/mwms_step.py`, which runs the trainer's own replica step (`strategy.run` of the same "
            "GradientTape step, each worker summing its loss locally) K times inside one `tf.function` "
            "(`for _ in tf.range(K)`). K removes the per-call Python dispatch and the host sync, not the "
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


if __name__ == "__main__":
    if sys.argv[1:2] == ["exchange-peer"]:
        sys.exit(_exchange_peer(sys.argv[2:]))
    sys.exit("usage: python -m tfmw.bench.fig_overhead exchange-peer <port> <sizes> <repeats> <blocks>")
