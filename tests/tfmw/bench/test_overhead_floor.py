"""Figure 1's bfloat16 rows and loopback floor (issue 15): the maths and the exchange itself,
never its speed (benchmarks are not tests)."""

from __future__ import annotations

import socket

import pytest

from tfmw.bench import fig_overhead, machine


def test_ring_bytes_per_worker():
    # 2 workers: the gradient itself is sent (and received) once; N workers: 2(N-1)/N of it.
    assert fig_overhead.ring_bytes(3_213_002, "float32", 2) == 12_852_008
    assert fig_overhead.ring_bytes(3_213_002, "bfloat16", 2) == 6_426_004
    assert fig_overhead.ring_bytes(1000, "float32", 4) == 6000
    assert fig_overhead.exchange_repeats(1) == 200 and fig_overhead.exchange_repeats(10**9) == 5


def test_plan_has_bfloat16_twin_of_the_cnn_in_quick_and_full():
    for quick in (True, False):
        by_id = {c.id: c for c in fig_overhead.plan(quick)}
        twin = by_id["cnn-bf16"]
        assert twin.dtype == "bfloat16" and twin.spec()["dtype"] == "bfloat16"
        assert (twin.model, twin.args, twin.k) == (by_id["cnn"].model, by_id["cnn"].args, by_id["cnn"].k)
        assert by_id["cnn"].spec()["dtype"] == "float32"


def test_summary_floor_and_float32_ratio_are_per_round_pairs():
    cnn = fig_overhead.Case("cnn", "cnn", {}, [28, 28, 1], 1, 10, "cnn")
    bf16 = fig_overhead.Case("cnn-bf16", "cnn", {}, [28, 28, 1], 1, 10, "cnn bf16", dtype="bfloat16")
    # Round 2 is twice as slow for everything (a busy machine): every paired ratio stays put.
    raw = {
        "cnn": {
            "t1": [0.020, 0.040],
            "tn": [0.068, 0.136],
            "c1": [0.02] * 2,
            "cn": [0.05] * 2,
            "floor": [0.008, 0.016],
            "params": 3_213_002,
            "exchanged_bytes": 12_852_008,
        },
        "cnn-bf16": {
            "t1": [0.021, 0.042],
            "tn": [0.048, 0.096],
            "c1": [0.02] * 2,
            "cn": [0.04] * 2,
            "floor": [0.004, 0.008],
            "params": 3_213_002,
            "exchanged_bytes": 6_426_004,
        },
    }
    f32, low = fig_overhead.summarize([cnn, bf16], raw)
    assert f32.added_vs_floor == pytest.approx(6.0)  # (68 - 20) / 8
    assert low.added_vs_floor == pytest.approx(6.75)  # (48 - 21) / 4
    assert low.vs_float32 == pytest.approx(48 / 68) and f32.vs_float32 is None
    assert (f32.exchanged_mb, low.exchanged_mb) == (pytest.approx(12.852008), pytest.approx(6.426004))
    assert f32.floor_ms == pytest.approx(12.0)  # median of 8 and 16 ms
    cells = fig_overhead.table_rows([f32, low])
    assert all(len(row) == len(fig_overhead.HEADERS) for row in cells)
    vs = fig_overhead.HEADERS.index("N-worker step vs float32")
    assert cells[1][vs] == pytest.approx(48 / 68) and cells[0][vs] is None


def test_accumulation_divides_what_distribution_adds_per_micro_batch():
    one = fig_overhead.Case("cnn", "cnn", {}, [28, 28, 1], 1, 10, "cnn")
    four = fig_overhead.Case("cnn-acc4", "cnn", {}, [28, 28, 1], 1, 8, "cnn, 4 micro-batches", micro=4)
    assert four.spec()["micro"] == 4 and one.spec()["micro"] == 1
    common = {"c1": [0.02], "cn": [0.05], "floor": [0.008], "params": 3_213_002, "exchanged_bytes": 12_852_008}
    # k = 1: 48 ms added per step = 6 floors; k = 4: the step is 4 micro-batches, 4x the compute,
    # and one all-reduce: 56 ms added per step = 7 floors, 1.75 floors per micro-batch.
    raw = {"cnn": {"t1": [0.020], "tn": [0.068], **common}, "cnn-acc4": {"t1": [0.080], "tn": [0.136], **common}}
    f32, acc = fig_overhead.summarize([one, four], raw)
    assert (f32.added_per_micro_vs_floor, acc.added_per_micro_vs_floor) == (pytest.approx(6.0), pytest.approx(1.75))
    assert acc.vs_float32 is None  # not a dtype twin of the one-batch case
    cells = fig_overhead.table_rows([f32, acc])
    column = fig_overhead.HEADERS.index("added per micro-batch / floor")
    assert (cells[0][column], cells[1][column]) == (pytest.approx(6.0), pytest.approx(1.75))
    assert {c.id for c in fig_overhead.plan(True)} >= {"cnn-acc2", "cnn-acc4"}


def test_summary_without_floor_leaves_the_new_columns_empty():
    case = fig_overhead.Case("m", "mlp", {}, [8], 1, 10, "model")
    raw = {"m": {"t1": [0.01], "tn": [0.02], "c1": [0.01], "cn": [0.01], "params": 610}}
    (row,) = fig_overhead.summarize([case], raw)
    assert (row.floor_ms, row.added_vs_floor, row.vs_float32, row.exchanged_mb) == (None, None, None, None)


def test_exchange_moves_every_byte_both_ways():
    a, b = socket.socketpair()
    size = 3 * 1024 * 1024 + 7  # more than a socket buffer: both directions must interleave
    out_a, out_b = bytearray(b"a" * size), bytearray(b"b" * size)
    in_a, in_b = bytearray(size), bytearray(size)
    import threading

    peer = threading.Thread(
        target=lambda: (b.setblocking(False), fig_overhead._exchange(b, memoryview(out_b), memoryview(in_b), size))
    )
    a.setblocking(False)
    peer.start()
    fig_overhead._exchange(a, memoryview(out_a), memoryview(in_a), size)
    peer.join(30)
    a.close(), b.close()
    assert in_a == out_b and in_b == out_a


def test_exchange_floor_runs_two_processes_and_times_each_size():
    floor = fig_overhead.exchange_floor([1000, 200_000], quick=True, blocks=1)
    assert sorted(floor) == [1000, 200_000] and all(t > 0 for t in floor.values())


def test_the_report_states_accumulation_against_its_target():
    common = {"c1": [0.02], "cn": [0.05], "floor": [0.008], "params": 3_213_002, "exchanged_bytes": 12_852_008}
    cases = [
        fig_overhead.Case("cnn", "cnn", {}, [28, 28, 1], 1, 10, "cnn"),
        fig_overhead.Case("cnn-acc2", "cnn", {}, [28, 28, 1], 1, 8, "cnn, 2", micro=2),
        fig_overhead.Case("cnn-acc4", "cnn", {}, [28, 28, 1], 1, 8, "cnn, 4", micro=4),
    ]
    raw = {
        "cnn": {"t1": [0.020], "tn": [0.068], **common},  # 6 floors per micro-batch
        "cnn-acc2": {"t1": [0.040], "tn": [0.096], **common},  # 56 ms / 2 = 3.5 floors
        "cnn-acc4": {"t1": [0.080], "tn": [0.136], **common},  # 56 ms / 4 = 1.75 floors
    }
    rows = fig_overhead.summarize(cases, raw)
    text = fig_overhead.section(
        rows, fig_overhead.table_rows(rows), fig_overhead.HEADERS, 2, 1, "", fig_overhead.MAIN_MODEL, 0
    )
    assert "6.0x at k = 1, 3.5x at k = 2, 1.8x at k = 4 (target: <= 3x at k = 4: met;" in text
    raw["cnn-acc4"]["tn"] = [0.080 + 0.008 * 13]  # 13 floors per step: 3.25 per micro-batch
    rows = fig_overhead.summarize(cases, raw)
    text = fig_overhead.section(
        rows, fig_overhead.table_rows(rows), fig_overhead.HEADERS, 2, 1, "", fig_overhead.MAIN_MODEL, 0
    )
    assert "3.2x at k = 4 (target: <= 3x at k = 4: not met;" in text


def test_plan_has_each_fast_step_setting_against_its_float32_baseline():
    for quick, bases in ((True, {"cnn"}), (False, {"cnn", fig_overhead.MAIN_MODEL})):
        cases = fig_overhead.plan(quick)
        by_id = {c.id: c for c in cases}
        fast = [c for c in cases if c.baseline]
        assert {c.baseline for c in fast} == bases
        for base_id in bases:
            base = by_id[base_id]
            assert (base.precision, base.jit, base.k, base.micro, base.dtype) == ("float32", False, 1, 1, "float32")
            settings = {
                (c.precision, c.jit, c.k)
                for c in fast
                if c.baseline == base_id
                and (c.model, c.args, c.input_shape) == (base.model, base.args, base.input_shape)
            }
            k = fig_overhead.FAST_K
            assert settings == {
                ("mixed_bfloat16", False, 1),
                ("float32", True, 1),
                ("float32", False, k),
                ("mixed_bfloat16", True, k),
            }
        spec = by_id["cnn-fast"].spec()
        assert (spec["precision"], spec["jit"], spec["k"]) == ("mixed_bfloat16", True, fig_overhead.FAST_K)


def test_the_bench_worker_builds_each_case_as_a_validated_trainer_config():
    from tfmw.bench.mwms_step import trainer_config

    by_id = {c.id: c for c in fig_overhead.plan(False)}
    config = trainer_config(by_id["cnn-fast"].spec())
    assert (config["precision"], config["jitCompile"], config["stepsPerExecution"]) == ("mixed_bfloat16", True, 8)
    assert (config["optimizer"], config["learningRate"], config["batchSizePerReplica"]) == ("adam", 0.001, 32)
    config = trainer_config(by_id["cnn-acc4"].spec())
    assert (config["gradientAccumulationSteps"], config["precision"], config["jitCompile"]) == (4, "float32", False)
    assert trainer_config(by_id["cnn-bf16"].spec())["allReduceDtype"] == "bfloat16"


def test_fast_step_ratios_are_per_round_pairs_with_their_baseline():
    base = fig_overhead.Case("cnn", "cnn", {}, [28, 28, 1], 1, 10, "cnn")
    (mbf16, xla, spe, both) = fig_overhead.fast_cases(base, 10, 10, 16)
    common = {"floor": [0.008] * 2, "params": 3_213_002, "exchanged_bytes": 12_852_008}
    # Round 2 is twice as slow for everything (a busy machine): every paired ratio stays put.
    raw = {
        "cnn": {"t1": [0.020, 0.040], "tn": [0.060, 0.120], "c1": [0.02, 0.04], "cn": [0.05, 0.10], **common},
        mbf16.id: {"t1": [0.050, 0.100], "tn": [0.090, 0.180], "c1": [0.05, 0.10], "cn": [0.08, 0.16], **common},
        xla.id: {"t1": [0.016, 0.032], "tn": [0.054, 0.108], "c1": [0.016, 0.032], "cn": [0.045, 0.09], **common},
        spe.id: {"t1": [0.020, 0.040], "tn": [0.060, 0.120], "c1": [0.02, 0.04], "cn": [0.05, 0.10], **common},
        both.id: {"t1": [0.040, 0.080], "tn": [0.075, 0.150], "c1": [0.04, 0.08], "cn": [0.07, 0.14], **common},
    }
    cases = [base, mbf16, xla, spe, both]
    rows = fig_overhead.summarize(cases, raw)
    by_id = {r.id: r for r in rows}
    assert by_id[mbf16.id].vs_base_1 == (pytest.approx(2.5),) * 3
    assert by_id[mbf16.id].vs_base_n == (pytest.approx(1.5),) * 3
    assert by_id[xla.id].cpu_vs_base_1 == pytest.approx(0.8) and by_id[xla.id].cpu_vs_base_n == pytest.approx(0.9)
    assert by_id["cnn"].vs_base_1 is None  # the baseline is not compared with itself
    cells = fig_overhead.fast_table_rows(rows)
    assert [c[0] for c in cells] == ["cnn, float32 baseline", mbf16.label, xla.label, spe.label, both.label]
    assert all(len(c) == len(fig_overhead.FAST_HEADERS) for c in cells)
    spread = fig_overhead.FAST_HEADERS.index("(min-max)")
    assert cells[0][spread] is None and cells[1][spread] == "2.50-2.50"
    text = fig_overhead.section(
        rows, fig_overhead.table_rows(rows), fig_overhead.HEADERS, 2, 2, "", fig_overhead.MAIN_MODEL, 0, False
    )
    assert "cnn 2.50x (2.50-2.50) at 1 worker, 1.50x (1.50-1.50) at 2 (CPU 2.50x, 1.60x)" in text
    assert "neither avx512_bf16 nor amx_bf16" in text
    assert "slower than float32's in every round for cnn." in text
    assert "not measured: nothing here ran on a GPU" in text
    assert "the fast-step rows time 10-16 steps per run" in text
    for key, seconds in (("cnn", 30.0), (mbf16.id, 24.0), (xla.id, 12.0), (spe.id, 12.0), (both.id, 12.0)):
        raw[key]["seconds"] = seconds  # what each case cost the figure, every run summed
    rows = fig_overhead.summarize(cases, raw)
    text = fig_overhead.section(
        rows, fig_overhead.table_rows(rows), fig_overhead.HEADERS, 2, 2, "", fig_overhead.MAIN_MODEL, 0, False
    )
    assert "and took 1.0 of the 1.5 min the workers spent in the cases" in text


def test_bf16_units_reads_the_cpu_flags():
    assert machine.bf16_units("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n") is False
    assert machine.bf16_units("flags\t\t: avx2 avx512f avx512_bf16\n") is True
    assert machine.bf16_units("") is None  # /proc/cpuinfo missing or without flags


def test_the_reading_names_a_model_row_not_a_slower_fast_step_row():
    tiny = fig_overhead.Case("tiny", "mlp", {"hidden": 8}, [8, 8], 1, 10, "tiny MLP")
    resnet = fig_overhead.Case(fig_overhead.MAIN_MODEL, "resnet", {}, [28, 28, 1], 1, 10, "resnet width 16")
    cases = [tiny, resnet, *fig_overhead.fast_cases(resnet, 6, 12, 16)]
    one = {"c1": [0.1], "cn": [0.1], "params": 77_754}
    raw = {c.id: {"t1": [0.130], "tn": [0.170], **one} for c in cases}
    raw["tiny"] = {"t1": [0.0015], "tn": [0.004], **one}
    raw[f"{fig_overhead.MAIN_MODEL}-mbf16"] = {"t1": [0.600], "tn": [0.620], **one}  # the slowest K=1 resnet row
    rows = fig_overhead.summarize(cases, raw)
    text = fig_overhead.section(
        rows, fig_overhead.table_rows(rows), fig_overhead.HEADERS, 2, 1, "", fig_overhead.MAIN_MODEL, 0, False
    )
    assert "On the compute-bound model (resnet width 16, 77,754 parameters, 130 ms per step" in text
