"""The GPUs of this machine, counted without TensorFlow, and what a GPU bench may ask of them.

`--gpus G --workers N` gives worker i `CUDA_VISIBLE_DEVICES=i*G..i*G+G-1` (procs.run_workers): N*G
above the GPUs present would hand a worker devices that do not exist (TensorFlow then sees none
and the case silently runs on CPU, or NCCL fails at the first step). Counted from `nvidia-smi -L`
when it runs, else from the driver's /proc/driver/nvidia/gpus/*, else 0.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
# allReduceDtype values TensorFlow's NCCL all-reduce takes (entrypoint/training/devices.py).
NCCL_DTYPES = ("float32", "float16")


def count(run=subprocess.run, proc_gpus: Path = PROC_GPUS) -> tuple[int, str]:
    """(GPUs present, where that was read)."""
    try:
        out = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")), "nvidia-smi -L"
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        return sum(1 for entry in proc_gpus.iterdir() if entry.is_dir()), str(proc_gpus)
    except OSError:
        return 0, "no nvidia-smi, no /proc/driver/nvidia"


def refusal(gpus: int, workers: int, present: tuple[int, str]) -> str | None:
    """The one-line reason `--gpus G --workers N` cannot run here, else None (pure)."""
    found, source = present
    if gpus <= 0:
        return None
    if found == 0:
        return f"--gpus {gpus}: no GPU found ({source}); run figure 1 without --gpus on this machine"
    if gpus * workers > found:
        return (
            f"--gpus {gpus} --workers {workers}: needs {gpus * workers} GPUs (G x N, one set per worker), "
            f"{found} found ({source}); use --workers {max(found // gpus, 1)} or fewer GPUs per worker"
        )
    return None


def collective(gpus: int, dtypes) -> str:
    """The collective a bench run's workers use: NCCL on GPUs, unless a case all-reduces in a dtype
    NCCL does not take (bfloat16): then RING for the whole run (one strategy serves every case)."""
    return "nccl" if gpus and all(d in NCCL_DTYPES for d in dtypes) else "ring"
