"""One pinned upstream Go binary, built once from its Go module, with files from the same
module zip beside it (Kueue's manager and its chart; chart-testing's `ct` and its config).

A wrapper module under scripts/tfmw/devcluster/gomod/<name>/ requires the upstream module at
the pinned version (its tools.go imports the main package) and go.sum is the checksum of every
source. The build follows scripts/tfmw/devcluster/build.py's recipe (`-trimpath -mod=readonly
-buildvcs=false`, CGO_ENABLED=0, GOTOOLCHAIN=local, the upstream Makefile's version ldflags, a
heartbeat, one-line KubeBuildError), checks with `go version -m` that the binary embeds exactly
the pinned module, and renames the result into

    <dest>/<name>-<version>/bin/<binary>
    <dest>/<name>-<version>/<dir>/       each directory copied from the module zip

with its own stamp.json (pins, recipe, size), so a complete build is reused without running
Go. Its lock, temporary directories and log are its own (<dest>/.<name>-build/,
<dest>/<name>-build.log).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tfmw.devcluster.build import (
    DEFAULT_DEST,
    GO_BUILD_FLAGS,
    GOMOD_DIR,
    STAMP_NAME,
    KubeBuildError,
    Progress,
    build_once,
    cgo_disabled,
    declared_vars,
    find_go,
    format_duration,
    go_build,
    gomod_digest,
    module_download,
    parse_gomod,
    print_installs,
    semver_parts,
    staged_install,
    x_flags,
)


@dataclass(frozen=True)
class OneBinary:
    """What to build: the upstream module, its main package, the version package its Makefile
    stamps (and the names of that package's variables for version, commit and date), the
    binary's name, and the module directories to copy beside it (into a folder of the same
    name, or the name given)."""

    name: str  # e.g. "kueue": the wrapper module's folder and the install folder's prefix
    module: str  # e.g. "sigs.k8s.io/kueue"
    main_package: str
    version_package: str | None  # None: the upstream build stamps no version (training-operator's)
    version_vars: tuple[str, str, str]  # (version, commit, date) variable names
    binary: str
    copies: tuple[tuple[str, str], ...] = ()  # (directory in the module zip, directory installed)
    first_build_minutes: int = 5  # on this project's 2-core machine with a warm GOCACHE; only said
    tag: str = "kube"  # the progress lines' prefix ("flux: building …")

    @property
    def gomod(self) -> Path:
        return GOMOD_DIR / self.name

    def pinned_files(self) -> tuple[Path, ...]:
        return (self.gomod / "go.mod", self.gomod / "go.sum", self.gomod / "tools.go")


@dataclass(frozen=True)
class Pins:
    version: str  # e.g. v0.19.2
    go_required: str  # the wrapper module's go directive
    gomod_sha256: str  # go.mod, go.sum and tools.go


def read_pins(spec: OneBinary, files: tuple[Path, ...] | None = None) -> Pins:
    files = files or spec.pinned_files()
    gomod = parse_gomod(files[0].read_text())
    version = gomod.requires.get(spec.module)
    if not version:
        raise KubeBuildError(f"wrapper go.mod does not require {spec.module}")
    semver_parts(version)
    return Pins(version, gomod.go_version, gomod_digest(files))


def install_name(spec: OneBinary, pins: Pins) -> str:
    return f"{spec.name}-{pins.version.lstrip('v')}"


def ldflags(spec: OneBinary, version: str, commit: str, build_date: str, declared: set[str]) -> str:
    if spec.version_package is None:
        return "-s -w"
    names = spec.version_vars
    values = {names[0]: version, names[1]: commit, names[2]: build_date}
    return " ".join(["-s", "-w"] + x_flags(spec.version_package, values, declared))


def stamp_record(spec: OneBinary, pins: Pins, size: int) -> dict:
    return {
        spec.name: pins.version,
        "gomod_sha256": pins.gomod_sha256,
        "go_build_flags": list(GO_BUILD_FLAGS),
        "cgo_enabled": "0",
        f"{spec.name}_ldflags": ldflags(spec, pins.version, "MODULE_SUM", "MODULE_TIME", set(spec.version_vars)),
        "binaries": {spec.binary: size},
    }


def binary_path(spec: OneBinary, install_dir: Path) -> Path:
    return install_dir / "bin" / spec.binary


def is_complete(spec: OneBinary, install_dir: Path, pins: Pins) -> bool:
    """True when install_dir holds the build these pins describe (no Go needed to tell)."""
    try:
        stamp = json.loads((install_dir / STAMP_NAME).read_text())
        size = stamp["binaries"][spec.binary]
    except (OSError, ValueError, TypeError, KeyError):
        return False
    if not isinstance(size, int) or stamp != stamp_record(spec, pins, size):
        return False
    path = binary_path(spec, install_dir)
    try:
        copied = all((install_dir / dest).is_dir() for _, dest in spec.copies)
        return copied and path.stat().st_size == size and os.access(path, os.X_OK)
    except OSError:
        return False


def check_embedded_module(spec: OneBinary, output: str, version: str) -> None:
    """Refuse a binary whose `go version -m` does not list the pinned module."""
    # the main package's module is the `mod` line (the wrapper module only selects versions)
    deps = {tuple(line.split()[1:3]) for line in output.splitlines() if line.split()[:1] in (["mod"], ["dep"])}
    if (spec.module, version) not in deps:
        found = sorted(v for name, v in deps if name == spec.module) or ["none"]
        raise KubeBuildError(
            f"built {spec.binary} embeds {spec.module} {', '.join(found)}, not {version}; refusing to install it"
        )


def build(spec: OneBinary, pins: Pins, dest_root: Path, progress: Progress) -> Path:
    """Build into a temporary directory beside the target, check it, then rename it in."""
    go, _ = find_go(pins.go_required, spec.name, spec.gomod)
    work_dir = dest_root / f".{spec.name}-build"
    target = dest_root / install_name(spec, pins)
    log = dest_root / f"{spec.name}-build.log"
    log.write_text(f"{spec.name} build {pins.version}\n")
    started = time.monotonic()
    partial, stale = work_dir / f"partial-{os.getpid()}", work_dir / f"stale-{os.getpid()}"
    changed = f"the {spec.name} go.mod/go.sum/tools.go"
    with staged_install(target, partial, stale, spec.pinned_files(), pins.gomod_sha256, changed):
        with cgo_disabled():
            info = module_download(go, spec.gomod, [spec.module], log)[spec.module]
            declared = (
                declared_vars(go, spec.gomod, [spec.version_package], log)[spec.version_package]
                if spec.version_package
                else set()
            )
            build_date = json.loads(Path(info["Info"]).read_text())["Time"]
            progress(
                f"{spec.tag}: building {spec.name} {pins.version} from the Go module proxy "
                f"(one-time, ~{spec.first_build_minutes} min on 2 cores)…"
            )
            took = go_build(
                go,
                spec.gomod,
                ldflags(spec, pins.version, info["Sum"], build_date, declared),
                str(binary_path(spec, partial)),
                [spec.main_package],
                f"{spec.name} {pins.version}",
                log,
                progress,
            )
        progress(f"{spec.tag}: built {spec.name} in {format_duration(took)}")
        shown = subprocess.run([go, "version", "-m", str(binary_path(spec, partial))], capture_output=True, text=True)
        check_embedded_module(spec, shown.stdout, pins.version)
        for source, dest in spec.copies:
            shutil.copytree(Path(info["Dir"]) / source, partial / dest)
            for path in [partial / dest, *(partial / dest).rglob("*")]:  # the module cache is read-only
                path.chmod(0o755 if path.is_dir() else 0o644)
        size = binary_path(spec, partial).stat().st_size
        (partial / STAMP_NAME).write_text(json.dumps(stamp_record(spec, pins, size), indent=2) + "\n")
    progress(
        f"{spec.tag}: {spec.name} {pins.version} installed in {target} "
        f"(total {format_duration(time.monotonic() - started)})"
    )
    return target


def ensure(spec: OneBinary, dest_root: Path = DEFAULT_DEST, progress: Progress = print) -> Path:
    """The install directory of the pinned build; built on first use."""
    dest_root = Path(dest_root)
    pins = read_pins(spec)
    target = dest_root / install_name(spec, pins)
    build_once(
        lambda: is_complete(spec, target, pins),
        dest_root / f".{spec.name}-build",
        ("partial-*", "stale-*"),
        lambda: build(spec, pins, dest_root, progress),
        progress,
    )
    return target


def main_for(
    specs: Sequence[OneBinary], argv: list[str] | None, doc: str, prog: str | None = None, name: str = "kube"
) -> int:
    """`python -m <module> [--dest DIR]`: each of `specs` built when needed, its install
    directory printed (build.print_installs)."""
    return print_installs(argv, doc, [functools.partial(ensure, spec) for spec in specs], prog, name)
