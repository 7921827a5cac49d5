"""The image's hash locks (requirements/image-{gpu,cpu}.lock) agree with pyproject.toml, with
their .in files, with each other, and with what TensorFlow's `and-cuda` extra requires.

No wheel is downloaded: the locks are read as committed, and TensorFlow's own requirements
come from the metadata of the tensorflow distribution installed in the project venv (the same
PyPI release the lock pins; the first test checks that).
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from repo import REPO as REPO_ROOT

REQUIREMENTS = REPO_ROOT / "requirements"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
VARIANTS = ("gpu", "cpu")
# The package that provides the `tensorflow` module in each variant.
TENSORFLOW_DIST = {"gpu": "tensorflow", "cpu": "tensorflow-cpu"}


def read_lock(variant: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of `name==version \\ --hash=sha256:...` entries."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in (REQUIREMENTS / f"image-{variant}.lock").read_text().splitlines():
        pin = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$", line)
        if pin:
            current = canonicalize_name(pin.group(1))
            assert current not in entries, f"{current} twice in image-{variant}.lock"
            entries[current] = (pin.group(2), [])
            continue
        digest = re.match(r"^\s+--hash=sha256:([0-9a-f]{64})(?: \\)?$", line)
        if digest:
            assert current, line
            entries[current][1].append(digest.group(1))
            continue
        assert not line.strip() or line.lstrip().startswith("#"), f"unexpected lock line: {line!r}"
    return entries


def read_in(variant: str) -> list[Requirement]:
    return [
        Requirement(line)
        for line in (REQUIREMENTS / f"image-{variant}.in").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def pyproject_requirements() -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in map(Requirement, PYPROJECT["project"]["dependencies"])}


LOCKS = {variant: read_lock(variant) for variant in VARIANTS}


def and_cuda_requirements() -> dict[str, Requirement]:
    """TensorFlow's `and-cuda` extra as its published metadata states it."""
    requirements = {}
    for text in importlib.metadata.requires("tensorflow") or []:
        requirement = Requirement(text)
        if (
            requirement.marker
            and requirement.marker.evaluate({"extra": "and-cuda"})
            and not requirement.marker.evaluate({"extra": ""})
        ):
            requirements[canonicalize_name(requirement.name)] = requirement
    return requirements


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_locked_package_is_pinned_with_hashes(variant):
    lock = LOCKS[variant]
    assert len(lock) > 20, lock.keys()  # the whole closure, not just the top level
    for name, (version, hashes) in lock.items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), (name, version)
        assert hashes, f"{name}=={version} has no --hash in image-{variant}.lock"


@pytest.mark.parametrize("variant", VARIANTS)
def test_lock_holds_every_pin_of_its_in_file(variant):
    lock = LOCKS[variant]
    for requirement in read_in(variant):
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{name} from image-{variant}.in is not in the lock: run scripts/image_lock.sh"
        assert lock[name][0] in requirement.specifier, (name, lock[name][0], str(requirement.specifier))


@pytest.mark.parametrize("variant", VARIANTS)
def test_lock_agrees_with_pyprojects_pins(variant):
    lock, pins = LOCKS[variant], pyproject_requirements()
    # The TensorFlow the image runs is the one the venv and the tests use.
    assert lock[TENSORFLOW_DIST[variant]][0] in pins["tensorflow"].specifier
    assert lock["tf-keras"][0] in pins["tf-keras"].specifier
    for name in ("pyyaml", "jsonschema"):  # the launcher's runtime dependencies
        assert lock[name][0] in pins[name].specifier, (name, lock[name][0])
    assert "pyhelm3" not in lock  # host side only, never in the container
    # The chart's TensorBoard Deployment runs `tensorboard` from this image.
    assert "tensorboard" in lock


def test_the_venvs_tensorflow_is_the_locked_release():
    # The and-cuda test below reads this distribution's metadata: it must be the locked one.
    assert importlib.metadata.version("tensorflow") == LOCKS["gpu"]["tensorflow"][0]


def test_gpu_lock_holds_exactly_the_nvidia_wheels_tf_and_cuda_requires():
    required = and_cuda_requirements()
    assert required and all(name.startswith("nvidia-") for name in required), required
    lock = LOCKS["gpu"]
    locked_nvidia = {name for name in lock if name.startswith("nvidia-")}
    assert locked_nvidia == set(required), locked_nvidia ^ set(required)
    for name, requirement in required.items():
        assert lock[name][0] in requirement.specifier, (name, lock[name][0], str(requirement.specifier))
    # The libraries TF's RUNPATH omits (registered by the Dockerfile's ldconfig step) are among them.
    for name in ("nvidia-cusolver-cu12", "nvidia-nvjitlink-cu12", "nvidia-curand-cu12", "nvidia-cuda-nvrtc-cu12"):
        assert name in locked_nvidia


def test_cpu_lock_has_no_cuda_and_no_second_tensorflow():
    lock = LOCKS["cpu"]
    assert not [name for name in lock if name.startswith("nvidia-")]
    # tf-keras names `tensorflow`, which tensorflow-cpu provides: installing both would put
    # two TensorFlows in one site-packages (the Dockerfile installs the lock with --no-deps).
    assert "tensorflow" not in lock and "tensorflow-cpu" in lock
    assert "tensorflow-cpu" not in LOCKS["gpu"]


def test_both_variants_pin_the_same_versions_of_what_they_share():
    gpu, cpu = LOCKS["gpu"], LOCKS["cpu"]
    shared = set(gpu) & set(cpu)
    assert {"tf-keras", "tensorboard", "numpy", "protobuf", "pyyaml", "jsonschema"} <= shared
    assert {name: (gpu[name][0], cpu[name][0]) for name in shared if gpu[name][0] != cpu[name][0]} == {}
    assert gpu["tensorflow"][0] == cpu["tensorflow-cpu"][0]


def elf_runpath(path: Path) -> list[str]:
    """DT_RUNPATH (or DT_RPATH) entries of a 64-bit little-endian ELF shared object."""
    import struct

    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path}: not a 64-bit LE ELF"
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynamic = [s for s in sections if s[1] == 6]  # SHT_DYNAMIC
    assert len(dynamic) == 1, path
    _, _, _, _, offset, size, link, _, _, entsize = dynamic[0]
    strtab_offset = sections[link][4]
    paths = []
    for pos in range(offset, offset + size, entsize):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag in (15, 29):  # DT_RPATH, DT_RUNPATH
            end = data.index(b"\0", strtab_offset + value)
            paths += data[strtab_offset + value : end].decode().split(":")
    return paths


def test_the_nvidia_libraries_tf_runpath_omits_are_the_ones_the_image_build_checks():
    # TF's RUNPATH reaches only some nvidia/*/lib directories; the Dockerfile registers all of
    # them by glob and fails the build if a library from an omitted one is not in the cache.
    framework = Path(
        importlib.metadata.distribution("tensorflow").locate_file("tensorflow/libtensorflow_framework.so.2")
    )
    runpath_dirs = {
        m.group(1) for entry in elf_runpath(framework) for m in [re.search(r"/nvidia/([a-z0-9_]+)/lib$", entry)] if m
    }
    assert {"cublas", "cudnn", "cufft", "cusparse"} <= runpath_dirs, runpath_dirs
    # nvidia-cuda-nvrtc-cu12 installs site-packages/nvidia/cuda_nvrtc/, and so on.
    wheel_dirs = {
        name.removeprefix("nvidia-").removesuffix("-cu12").replace("-", "_") for name in and_cuda_requirements()
    }
    omitted = wheel_dirs - runpath_dirs - {"cuda_nvcc"}  # nvcc ships ptxas, a program, not a library
    library = {
        "cusolver": "libcusolver.so",
        "nvjitlink": "libnvJitLink.so",
        "curand": "libcurand.so",
        "cuda_nvrtc": "libnvrtc.so",
    }
    assert omitted == set(library), omitted  # the four the issue names; a new one needs a check
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    checked = re.search(r"for lib in ([^;]+); do case", dockerfile)
    assert checked, "the Dockerfile does not check the linker cache"
    assert set(library.values()) <= set(checked.group(1).split())


def test_the_venv_runs_the_images_versions_of_every_package_both_have():
    # `make setup` installs the venv with the CPU lock as pip constraints, so `make local` and
    # the fault harness train on the image's stack: an unconstrained ml-dtypes 0.7.0 once cost
    # every trainer start 1 s of module init.
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    differ = {
        name: (installed[name], version)
        for name, (version, _) in LOCKS["cpu"].items()
        if name in installed and installed[name] != version
    }
    assert differ == {}, f"venv != image lock (installed, locked): {differ}; run `make setup`"
    assert "ml-dtypes" in installed and "ml-dtypes" in LOCKS["cpu"]
