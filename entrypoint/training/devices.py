"""This process's GPU setup: the collective over its GPUs, their memory, the CUDA JIT cache.

Three traps a GPU run falls into before its first step, each closed here:

- `allReduceDtype: bfloat16` over NCCL: TensorFlow's NCCL all-reduce takes half, float,
  double, int32 and int64, not bfloat16. The failure surfaces inside the first step as a
  "Collective" error the launcher classes retryable, so the pod restarts to its limit. Refused
  in the pure config check (`collective: nccl`) and at strategy creation (`collective: auto`
  picks NCCL because GPUs are visible), in one line naming both keys and the fix.
- `gpuMemory`: TensorFlow maps nearly all of every visible GPU's memory at once, so two
  processes cannot share one GPU. `growth` allocates as needed; a fraction f caps the process
  at f x the device's total memory. Either must be set before anything creates the eager
  context (as the thread pools are: trainer.set_up), and a fraction whose total is unknown is
  refused, never guessed.
- The CUDA JIT cache: TensorFlow's CUDA wheels carry PTX for the newest GPUs, whose first
  kernels are compiled by the driver (minutes) into `CUDA_CACHE_PATH` (default
  ~/.nv/ComputeCache). The chart puts it on a writable volume that survives a container
  restart; an empty cache is said in one line so a slow first step is not taken for a hang.

Pure (TensorFlow is never imported here): the trainer passes its `tf` module to apply().
"""

from __future__ import annotations

import ctypes
import os

from .. import loglines
from ..errors import ConfigError
from .schema import GPU_MEMORY_MODES

# allReduceDtype values TensorFlow's NCCL all-reduce takes (of half, float, double, int32, int64).
NCCL_DTYPES = ("float32", "float16")
MIB = 1024 * 1024


def refuse_bfloat16_over_nccl(why: str) -> ConfigError:
    return ConfigError(
        f"training config: allReduceDtype: bfloat16 with collective: nccl ({why}): TensorFlow's NCCL "
        "all-reduce has no bfloat16; set allReduceDtype: float16 (NCCL) or collective: ring"
    )


def check_config(config: dict) -> None:
    """The part of the GPU policy that needs no GPU: an explicit NCCL with bfloat16 (pure)."""
    if config["collective"] == "nccl" and config["allReduceDtype"] not in NCCL_DTYPES:
        raise refuse_bfloat16_over_nccl("set in the config")


def choose_collective(choice: str, reduce_dtype: str, gpus: int) -> str:
    """`nccl` or `ring` for the config's `collective` with `gpus` GPUs visible; ConfigError when
    the combination cannot run (pure)."""
    if choice == "nccl" and not gpus:
        raise ConfigError("training config: collective: nccl needs GPUs but none are visible; use auto or ring")
    if choice == "auto":
        choice = "nccl" if gpus else "ring"
        if choice == "nccl" and reduce_dtype not in NCCL_DTYPES:
            raise refuse_bfloat16_over_nccl(f"collective: auto picks NCCL: {gpus} GPU(s) visible")
    elif choice == "nccl" and reduce_dtype not in NCCL_DTYPES:
        raise refuse_bfloat16_over_nccl("set in the config")
    return choice


def memory_limits_mib(setting, totals: list[int | None]) -> list[int] | None:
    """Per GPU, the logical device's memory_limit in MiB for a fraction `setting` of each total
    (bytes; None: unknown), or None for `all`/`growth`. A fraction whose total is unknown is
    refused: a guessed limit could be larger than the device or waste most of it (pure)."""
    if setting in GPU_MEMORY_MODES:
        return None
    limits = []
    for index, total in enumerate(totals):
        if not total:
            raise ConfigError(
                f"training config: gpuMemory: {setting} needs GPU {index}'s total memory, which could not be "
                "read (libcuda's cuDeviceTotalMem); use gpuMemory: growth or all"
            )
        limits.append(max(int(total * float(setting)) // MIB, 1))
    return limits


def describe_memory(setting, limits: list[int] | None) -> str:
    """The `memory=` field of the `tfmw gpus` line: `all`, `growth` or `0.45(limit_mib=7372,...)`."""
    if limits is None:
        return str(setting)
    return f"{setting}(limit_mib={','.join(map(str, limits))})"


def device_total_bytes(index: int, load=ctypes.CDLL) -> int | None:
    """The total memory of CUDA device `index` as this process numbers it (CUDA_VISIBLE_DEVICES
    applies, as it does to TensorFlow's GPU list), from the driver's libcuda; None when it cannot
    be read. TensorFlow's get_device_details names the GPU but not its memory, and nvidia-smi
    numbers every GPU of the node, not the container's visible ones."""
    try:
        cuda = load("libcuda.so.1")
        count, device, total = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_size_t(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or index >= count.value:
            return None
        if cuda.cuDeviceGet(ctypes.byref(device), index) != 0:
            return None
        if cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return int(total.value) or None


def cuda_cache_dir(environ) -> str:
    """Where the driver keeps JIT-compiled kernels: CUDA_CACHE_PATH, else ~/.nv/ComputeCache."""
    home = environ.get("HOME") or os.path.expanduser("~")
    return environ.get("CUDA_CACHE_PATH") or os.path.join(home, ".nv", "ComputeCache")


def first_compile_notice(gpus: int, environ) -> str | None:
    """One line when GPUs are visible and the JIT cache is empty (or absent): the first kernels
    may take minutes to compile. None otherwise, and when the cache is disabled."""
    if not gpus or environ.get("CUDA_CACHE_DISABLE") == "1":
        return None
    path = cuda_cache_dir(environ)
    try:
        empty = not any(os.scandir(path))
    except OSError:
        empty = True
    if not empty:
        return None
    return f"first CUDA kernels may be JIT-compiled: can take minutes; cache at {path} (empty)"


def gpu_names(tf, gpus) -> list[str]:
    names = []
    for gpu in gpus:
        try:
            names.append(tf.config.experimental.get_device_details(gpu).get("device_name") or "unknown")
        except Exception:  # a name is only informative: never fail the setup for it
            names.append("unknown")
    return names


def apply(tf, config: dict, environ, total_of=device_total_bytes) -> dict:
    """Set this process's GPU memory policy (before anything creates the eager context) and
    return the fields of the `tfmw gpus` line: visible, names, memory, cache."""
    gpus = tf.config.list_physical_devices("GPU")
    setting = config["gpuMemory"]
    limits = None
    if gpus:
        limits = memory_limits_mib(setting, [total_of(i) for i in range(len(gpus))])
        if setting == "growth":
            for gpu in gpus:
                tf.config.experimental.set_memory_growth(gpu, True)
        elif limits is not None:
            for gpu, limit in zip(gpus, limits, strict=True):
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)]
                )
    return {
        "visible": len(gpus),
        "names": ",".join(gpu_names(tf, gpus)) or None,
        "memory": describe_memory(setting, limits),
        "cache": cuda_cache_dir(environ) if gpus else None,
    }


def set_up(tf, config: dict, environ, log) -> dict:
    """apply(), then one `tfmw gpus` line, and one `tfmw warning` line when the JIT cache is empty."""
    fields = apply(tf, config, environ)
    log(loglines.line(loglines.GPUS, **fields))
    notice = first_compile_notice(fields["visible"], environ)
    if notice:
        log(loglines.line(loglines.WARNING, text=notice))
    return fields
