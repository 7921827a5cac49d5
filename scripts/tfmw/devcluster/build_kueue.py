"""Build the pinned Kueue manager once, with its Helm chart beside it, for the local cluster.

The wrapper module scripts/tfmw/devcluster/gomod/kueue/ requires sigs.k8s.io/kueue at the
pinned version (its tools.go imports the manager's main package, cmd/kueue) and go.sum is the
checksum of every source. The build follows Kueue's own Makefile (`go build -ldflags
"-X …/pkg/version.GitVersion=… -X …GitCommit=… -X …BuildDate=…" cmd/kueue`, CGO_ENABLED=0,
as its image is built) with scripts/tfmw/devcluster/build.py's recipe (`-trimpath
-mod=readonly -buildvcs=false`, GOTOOLCHAIN=local, a heartbeat, one-line KubeBuildError),
checks with `go version -m` that the binary embeds exactly the pinned module, and renames the
result into

    .tools/kube/kueue-<version>/bin/manager
    .tools/kube/kueue-<version>/chart/        Kueue's Helm chart, from the same module zip

with its own stamp.json (pins, recipe, size), so a complete build is reused without running
Go. Its lock, temporary directories and log are its own (.tools/kube/.kueue-build/,
.tools/kube/kueue-build.log).

Usage: python -m tfmw.devcluster.build_kueue [--dest DIR]   (prints the install directory)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tfmw.devcluster.build import (
    DEFAULT_DEST,
    GO_BUILD_FLAGS,
    GOMOD_DIR,
    STAMP_NAME,
    KubeBuildError,
    Progress,
    build_lock,
    cgo_disabled,
    declared_vars,
    format_duration,
    go_build,
    go_version_tuple,
    gomod_digest,
    module_download,
    parse_gomod,
    publish,
    run_go,
    semver_parts,
    x_flags,
)

KUEUE_GOMOD = GOMOD_DIR / "kueue"
KUEUE_MODULE = "sigs.k8s.io/kueue"
MAIN_PACKAGE = f"{KUEUE_MODULE}/cmd/kueue"
VERSION_PACKAGE = f"{KUEUE_MODULE}/pkg/version"  # Kueue's Makefile: GitVersion, GitCommit, BuildDate
BINARY = "manager"  # the name Kueue's image runs it by (ENTRYPOINT ["/manager"])
CHART = "charts/kueue"  # in the module zip

# First build on this project's 2-core machine with the Kubernetes build's GOCACHE, rounded
# up; only tells the user what to expect.
FIRST_BUILD_MINUTES = 6

WORK_DIR_NAME = ".kueue-build"
LOG_NAME = "kueue-build.log"


@dataclass(frozen=True)
class KueuePins:
    kueue: str  # e.g. v0.19.2
    go_required: str  # the wrapper module's go directive
    gomod_sha256: str  # go.mod, go.sum and tools.go

    @property
    def install_name(self) -> str:
        return f"kueue-{self.kueue.lstrip('v')}"


def pinned_files() -> tuple[Path, ...]:
    return (KUEUE_GOMOD / "go.mod", KUEUE_GOMOD / "go.sum", KUEUE_GOMOD / "tools.go")


def read_pins(files: tuple[Path, ...] | None = None) -> KueuePins:
    files = files or pinned_files()
    gomod = parse_gomod(files[0].read_text())
    version = gomod.requires.get(KUEUE_MODULE)
    if not version:
        raise KubeBuildError(f"wrapper go.mod does not require {KUEUE_MODULE}")
    semver_parts(version)
    return KueuePins(version, gomod.go_version, gomod_digest(files))


def kueue_ldflags(version: str, commit: str, build_date: str, declared: set[str]) -> str:
    values = {"GitVersion": version, "GitCommit": commit, "BuildDate": build_date}
    return " ".join(["-s", "-w"] + x_flags(VERSION_PACKAGE, values, declared))


def stamp_record(pins: KueuePins, size: int) -> dict:
    return {
        "kueue": pins.kueue,
        "gomod_sha256": pins.gomod_sha256,
        "go_build_flags": list(GO_BUILD_FLAGS),
        "cgo_enabled": "0",
        "kueue_ldflags": kueue_ldflags(
            pins.kueue, "MODULE_SUM", "MODULE_TIME", {"GitVersion", "GitCommit", "BuildDate"}
        ),
        "binaries": {BINARY: size},
    }


def binary_path(install_dir: Path) -> Path:
    return install_dir / "bin" / BINARY


def chart_path(install_dir: Path) -> Path:
    return install_dir / "chart"


def is_complete(install_dir: Path, pins: KueuePins) -> bool:
    """True when install_dir holds the build these pins describe (no Go needed to tell)."""
    try:
        stamp = json.loads((install_dir / STAMP_NAME).read_text())
        size = stamp["binaries"][BINARY]
    except (OSError, ValueError, TypeError, KeyError):
        return False
    if not isinstance(size, int) or stamp != stamp_record(pins, size):
        return False
    path = binary_path(install_dir)
    try:
        chart_ok = (chart_path(install_dir) / "Chart.yaml").is_file()
        return chart_ok and path.stat().st_size == size and os.access(path, os.X_OK)
    except OSError:
        return False


def check_embedded_module(output: str, version: str) -> None:
    """Refuse a binary whose `go version -m` does not list the pinned Kueue module."""
    # the main package's module is the `mod` line (the wrapper module only selects versions)
    deps = {tuple(line.split()[1:3]) for line in output.splitlines() if line.split()[:1] in (["mod"], ["dep"])}
    if (KUEUE_MODULE, version) not in deps:
        found = sorted(v for name, v in deps if name == KUEUE_MODULE) or ["none"]
        raise KubeBuildError(
            f"built manager embeds {KUEUE_MODULE} {', '.join(found)}, not {version}; refusing to install it"
        )


def _find_go(pins: KueuePins) -> str:
    go = shutil.which("go")
    if not go:
        raise KubeBuildError(f"`go` is not on PATH: building Kueue needs Go {pins.go_required} or newer")
    reported = run_go(go, ["env", "GOVERSION"], KUEUE_GOMOD, "asking `go` for its version").strip()
    if go_version_tuple(reported) < go_version_tuple(pins.go_required):
        raise KubeBuildError(f"Go {pins.go_required} or newer is needed to build Kueue; `go` on PATH is {reported}")
    return go


def build(pins: KueuePins, dest_root: Path, progress: Progress) -> Path:
    """Build into a temporary directory beside the target, check it, then rename it in."""
    go = _find_go(pins)
    work_dir = dest_root / WORK_DIR_NAME
    target = dest_root / pins.install_name
    partial = work_dir / f"partial-{os.getpid()}"
    log = dest_root / LOG_NAME
    log.write_text(f"kueue build {pins.kueue}\n")
    (partial / "bin").mkdir(parents=True)
    started = time.monotonic()
    try:
        with cgo_disabled():
            info = module_download(go, KUEUE_GOMOD, [KUEUE_MODULE], log)[KUEUE_MODULE]
            declared = declared_vars(go, KUEUE_GOMOD, [VERSION_PACKAGE], log)[VERSION_PACKAGE]
            build_date = json.loads(Path(info["Info"]).read_text())["Time"]
            progress(
                f"kube: building kueue {pins.kueue} from the Go module proxy (one-time, ~{FIRST_BUILD_MINUTES} min)…"
            )
            took = go_build(
                go,
                KUEUE_GOMOD,
                kueue_ldflags(pins.kueue, info["Sum"], build_date, declared),
                str(binary_path(partial)),
                [MAIN_PACKAGE],
                f"kueue {pins.kueue}",
                log,
                progress,
            )
        progress(f"kube: built kueue in {format_duration(took)}")
        shown = subprocess.run([go, "version", "-m", str(binary_path(partial))], capture_output=True, text=True)
        check_embedded_module(shown.stdout, pins.kueue)
        shutil.copytree(Path(info["Dir"]) / CHART, chart_path(partial))
        for path in [chart_path(partial), *chart_path(partial).rglob("*")]:  # the module cache is read-only
            path.chmod(0o755 if path.is_dir() else 0o644)
        if gomod_digest(pinned_files()) != pins.gomod_sha256:
            raise KubeBuildError("the Kueue go.mod/go.sum/tools.go changed during the build; run it again")
        size = binary_path(partial).stat().st_size
        (partial / STAMP_NAME).write_text(json.dumps(stamp_record(pins, size), indent=2) + "\n")
        publish(partial, target, work_dir / f"stale-{os.getpid()}")
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    progress(f"kube: kueue {pins.kueue} installed in {target} (total {format_duration(time.monotonic() - started)})")
    return target


def ensure_kueue(dest_root: Path = DEFAULT_DEST, progress: Progress = print) -> Path:
    """The install directory of the pinned Kueue (bin/manager, chart/); built on first use."""
    dest_root = Path(dest_root)
    pins = read_pins()
    target = dest_root / pins.install_name
    if is_complete(target, pins):
        return target
    work_dir = dest_root / WORK_DIR_NAME
    with build_lock(work_dir, progress):
        if not is_complete(target, pins):
            for leftover in list(work_dir.glob("partial-*")) + list(work_dir.glob("stale-*")):
                shutil.rmtree(leftover, ignore_errors=True)
            build(pins, dest_root, progress)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="root of the install directories")
    args = parser.parse_args(argv)
    try:
        path = ensure_kueue(args.dest, lambda line: print(line, file=sys.stderr, flush=True))
    except KubeBuildError as err:
        print(f"kube: {err}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
