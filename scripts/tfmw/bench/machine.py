"""The machine and versions every figure is stated with."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from tfmw.chart import helmkit


@dataclass(frozen=True)
class Machine:
    nproc: int
    cpu_model: str
    memory_gib: float
    python: str
    tensorflow: str
    tf_keras: str
    helm: str
    kernel: str

    def describe(self) -> str:
        return (
            f"{self.nproc} CPUs ({self.cpu_model}), {self.memory_gib:.0f} GiB RAM, Linux {self.kernel}; "
            f"Python {self.python}, TensorFlow {self.tensorflow}, tf-keras {self.tf_keras}, helm {self.helm}"
        )


def cpu_model(cpuinfo: str) -> str:
    """The first `model name` of /proc/cpuinfo (or `unknown`)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return "unknown"


def bf16_units(cpuinfo: str) -> bool | None:
    """Whether the `flags` of /proc/cpuinfo list bfloat16 instructions (avx512_bf16, amx_bf16);
    None: no flags line (unknown)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return any(flag in value.split() for flag in ("avx512_bf16", "amx_bf16"))
    return None


def cpu_bf16_units() -> bool | None:
    """bf16_units of this machine."""
    return bf16_units(_read("/proc/cpuinfo"))


def memory_gib(meminfo: str) -> float:
    """MemTotal of /proc/meminfo in GiB (0.0 when absent)."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1024 * 1024)  # kB
    return 0.0


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def helm_version(helm: str) -> str:
    """helm's version for the figures' captions; a machine without a usable helm still describes itself."""
    try:
        return helmkit.helm_version(helm)
    except helmkit.ToolError:
        return "not found"


def probe(helm: str) -> Machine:
    return Machine(
        nproc=os.cpu_count() or 0,
        cpu_model=cpu_model(_read("/proc/cpuinfo")),
        memory_gib=memory_gib(_read("/proc/meminfo")),
        python=platform.python_version(),
        tensorflow=_package_version("tensorflow"),
        tf_keras=_package_version("tf-keras"),
        helm=helm_version(helm),
        kernel=platform.release(),
    )


def load_average() -> str:
    """1/5/15-minute load: other people's jobs on this shared machine show up here."""
    try:
        return " / ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"
