"""The bench's GPU parts, without a GPU: counting GPUs without TensorFlow, refusing `--gpus G
--workers N` beyond them, no NCCL for a bfloat16 case, and `make gpu-check`'s refusal and report
(parsed from recorded trainer lines)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from tfmw.bench import fig_overhead, gpucheck, gpus
from tfmw.bench.cli import parse_args
from tfmw.bench.procs import REPO

# -- counting -------------------------------------------------------------------------------


def test_count_reads_nvidia_smi_first(tmp_path):
    listing = "GPU 0: NVIDIA L4 (UUID: GPU-1)\nGPU 1: NVIDIA L4 (UUID: GPU-2)\n  MIG 1g.5gb Device 0: (UUID: MIG-1)\n"
    run = lambda *a, **k: SimpleNamespace(returncode=0, stdout=listing)  # noqa: E731
    assert gpus.count(run=run, proc_gpus=tmp_path) == (2, "nvidia-smi -L")


def test_count_falls_back_to_the_drivers_proc_folder_then_to_none(tmp_path):
    def no_smi(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    for bus in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        (tmp_path / bus).mkdir()
    assert gpus.count(run=no_smi, proc_gpus=tmp_path) == (3, str(tmp_path))
    failing = lambda *a, **k: SimpleNamespace(returncode=9, stdout="")  # noqa: E731  (driver not loaded)
    assert gpus.count(run=failing, proc_gpus=tmp_path / "absent") == (0, "no nvidia-smi, no /proc/driver/nvidia")


# -- refusing what the machine cannot give ----------------------------------------------------


def test_no_gpu_refuses_any_gpus_request_in_one_line():
    assert gpus.refusal(1, 2, (0, "no nvidia-smi, no /proc/driver/nvidia")) == (
        "--gpus 1: no GPU found (no nvidia-smi, no /proc/driver/nvidia); run figure 1 without --gpus on this machine"
    )


def test_more_gpus_than_present_is_refused_with_what_fits():
    assert gpus.refusal(2, 3, (4, "nvidia-smi -L")) == (
        "--gpus 2 --workers 3: needs 6 GPUs (G x N, one set per worker), 4 found (nvidia-smi -L); "
        "use --workers 2 or fewer GPUs per worker"
    )
    assert gpus.refusal(2, 2, (4, "nvidia-smi -L")) is None
    assert gpus.refusal(0, 8, (0, "none")) is None  # CPU


def test_the_bench_cli_refuses_more_gpus_than_this_machine_has(capsys):
    present, _ = gpus.count()  # this machine: none; on a GPU host one more than it has
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--only", "1", "--workers", "2", "--gpus", str(present + 1)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"bench: --gpus {present + 1}")
    assert ("no GPU found" in err[0]) if present == 0 else ("found" in err[0])


def test_a_bfloat16_case_keeps_the_bench_off_nccl():
    assert gpus.collective(1, ["float32", "float16"]) == "nccl"
    assert gpus.collective(1, ["float32", "bfloat16"]) == "ring"
    assert gpus.collective(0, ["float32"]) == "ring"
    rows = [SimpleNamespace(dtype="float32"), SimpleNamespace(dtype="bfloat16")]
    assert fig_overhead.gpu_setting(2, rows) == "GPUs: 2 per worker, RING (a bfloat16 case: NCCL has no bfloat16)"
    assert fig_overhead.gpu_setting(2, rows[:1]) == "GPUs: 2 per worker, NCCL"


# -- make gpu-check -------------------------------------------------------------------------


def test_gpu_check_refuses_in_one_line_without_a_gpu(capsys):
    started = []
    code = gpucheck.main([], count=lambda: (0, "nvidia-smi -L"), run=lambda *a: started.append(a))
    assert code == 2 and started == []
    assert capsys.readouterr().err == (
        "gpu-check: no GPU visible: 0 found (nvidia-smi -L); run it on a GPU host (docs/image.md)\n"
    )


def test_make_gpu_check_on_this_machine_refuses_unless_it_has_a_gpu():
    """The real command, with the real count: here (no GPU) one line and exit 2."""
    if gpus.count()[0]:
        pytest.fail("this machine has a GPU: run make gpu-check itself (docs/image.md)")
    proc = subprocess.run(
        [sys.executable, "-m", "tfmw.bench.gpucheck"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("gpu-check: no GPU visible: ")


def recorded(collective: str, digest: str, visible: int = 1, jit: bool = False, step1: float = 41.5) -> gpucheck.Worker:
    lines = [
        (0.1, "tfmw threads intra_op=8 inter_op=2 data=8 why=test"),
        (2.0, f'tfmw gpus visible={visible} names="NVIDIA L4" memory=growth cache=/w/cuda-cache'),
    ]
    if jit:
        lines.append(
            (2.0, "tfmw warning first CUDA kernels may be JIT-compiled: can take minutes; cache at /w/c (empty)")
        )
    lines += [
        (2.1, "tfmw connecting worker=0/1"),
        (3.5, "2026-12-07 06:00:00.1: I tensorflow/core/... created device /job:worker/GPU:0"),
        (
            4.0,
            f"tfmw start run=one worker=0/1 replicas=1 global_batch=64 micro_batches=1 collective={collective} "
            "model=cnn data=synthetic resume_step=0 steps=20",
        ),
        (step1, "tfmw progress step=1/20 epoch=1 loss=2.3 examples_per_sec=10.0"),
        (50.0, "tfmw progress step=2/20 epoch=1 loss=2.2 examples_per_sec=900.0"),
        (60.0, f"tfmw done steps=20 final_loss=0.5 examples_per_sec=1000 model=/w/m weights_digest={digest}"),
    ]
    return gpucheck.Worker(lines=lines, code=0)


def test_the_report_reads_the_trainers_lines():
    report = gpucheck.summarize("one", [recorded("nccl", "a" * 64, jit=True)])
    assert report == gpucheck.RunReport(
        name="one",
        gpu_names="NVIDIA L4",
        visible=1,
        collective="nccl",
        memory="growth",
        start_seconds=4.0,
        first_step_seconds=41.5,
        cold_cache=True,
        digests=("a" * 64,),
        codes=(0,),
        error="",
    )


def passing_runs():
    return [
        gpucheck.summarize("one", [recorded("nccl", "a" * 64, jit=True)]),
        gpucheck.summarize("two", [recorded("ring", "b" * 64, step1=9.0), recorded("ring", "b" * 64, step1=8.0)]),
        gpucheck.summarize("again", [recorded("ring", "b" * 64), recorded("ring", "b" * 64)]),
    ]


def test_a_good_gpu_host_passes_and_the_report_says_what_it_saw():
    lines = gpucheck.report_lines(passing_runs())
    assert lines[0] == (
        "gpu-check one: gpu=NVIDIA L4 collective=nccl memory=growth start_s=4.0 first_step_s=41.5 "
        "cuda_cache=cold (JIT-compiled) digest=aaaaaaaaaaaaaaaa"
    )
    assert "first_step_s=9.0 cuda_cache=warm" in lines[1]  # the slowest worker
    assert lines[-1] == "gpu-check: passed"
    assert not [line for line in lines if "FAIL" in line]


def test_each_failure_is_reported():
    one, two, again = passing_runs()
    no_gpu = gpucheck.summarize("one", [recorded("ring", "a" * 64, visible=0)])
    split = gpucheck.summarize("two", [recorded("ring", "b" * 64), recorded("ring", "c" * 64)])
    drifted = gpucheck.summarize("again", [recorded("ring", "d" * 64), recorded("ring", "d" * 64)])
    refused = "training config: gpuMemory: 0.45 needs GPU 0's total memory, which could not be read (...)"
    failed = gpucheck.Worker(lines=[(1.0, "tfmw gpus visible=1"), (1.1, refused)], code=2)
    crashed = gpucheck.summarize("two", [failed, recorded("ring", "b" * 64)])
    fails = lambda runs: [what for ok, what in gpucheck.verdict(runs) if not ok]  # noqa: E731
    assert fails([no_gpu, two, again]) == [
        "one: TensorFlow saw the GPU (visible=0)",
        "one: collective ring (expected nccl)",
    ]
    assert fails([one, split, again]) == [
        "two: every worker ended with the same weights",
        "two == again: 2 workers on one GPU over RING train to the same weights twice",
    ]
    assert fails([one, two, drifted]) == [
        "two == again: 2 workers on one GPU over RING train to the same weights twice"
    ]
    assert crashed.error == refused
    retryable = "tfmw error retryable=true worker=1 UnavailableError: peer lost"
    lost = gpucheck.summarize("two", [recorded("ring", "b" * 64), gpucheck.Worker([(1.0, retryable)], 75)])
    assert lost.error == "UnavailableError: peer lost"
    assert "two: every worker exit 0 [2, 0]" in fails([one, crashed, again])
    assert gpucheck.report_lines([no_gpu, two, again])[-1] == "gpu-check: 2 check(s) failed"


def test_main_runs_the_three_runs_on_gpu_0_and_exits_by_the_verdict(tmp_path):
    started, out = [], []
    canned = {
        "one": [recorded("nccl", "a" * 64)],
        "two": [recorded("ring", "b" * 64)] * 2,
        "again": [recorded("ring", "b" * 64)] * 2,
    }

    def run(python, config, workers, env, timeout):
        started.append((config.name, workers, env["CUDA_VISIBLE_DEVICES"], env["TFMW_RUN_ID"]))
        assert "gpuMemory: 0.45" in config.read_text() if workers == 2 else "gpuMemory: growth" in config.read_text()
        return canned[env["TFMW_RUN_ID"]]

    code = gpucheck.main(["--keep", str(tmp_path)], count=lambda: (1, "nvidia-smi -L"), run=run, out=out.append)
    assert code == 0, out
    assert started == [("one.yaml", 1, "0", "one"), ("two.yaml", 2, "0", "two"), ("again.yaml", 2, "0", "again")]
    assert (tmp_path / "two-worker1.log").read_text().splitlines()[-1].endswith("weights_digest=" + "b" * 64)
