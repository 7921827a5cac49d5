"""Build the pinned, slim CoreDNS once, for the local cluster's DNS.

The wrapper module scripts/tfmw/devcluster/gomod/coredns/ is CoreDNS's documented way to build a
chosen plugin set: its main.go imports the plugins, sets dnsserver.Directives to them
in plugin.cfg order and calls coremain.Run(); its go.mod pins CoreDNS and go.sum is the
checksum. The build reuses scripts/tfmw/devcluster/build.py's recipe (`-trimpath -mod=readonly
-buildvcs=false`, GOTOOLCHAIN=local, GOWORK=off, CGO_ENABLED=0, a heartbeat, one-line
KubeBuildError), adds CoreDNS's own `-tags grpcnotrace` and GitCommit ldflag, checks
`coredns -version` and `coredns -plugins`, and renames the result into

    .tools/kube/coredns-<version>/bin/coredns

with its own stamp.json (pins, plugins, gomod digest, size), so a complete build is
reused without running Go. Its lock, temporary directories and log are its own
(.tools/kube/.coredns-build/, .tools/kube/coredns-build.log): it never waits for, nor
cleans up after, the Kubernetes build in the same directory.

Usage: python -m tfmw.devcluster.build_coredns [--dest DIR]   (prints the binary's path)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable
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

COREDNS_GOMOD = GOMOD_DIR / "coredns"
COREDNS_MODULE = "github.com/coredns/coredns"
PLUGIN_PREFIX = f"{COREDNS_MODULE}/plugin/"
# CoreDNS's Makefile: -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=...";
# the version itself (`CoreDNS-1.14.7`) is the constant coremain.CoreVersion.
VERSION_PACKAGE = f"{COREDNS_MODULE}/coremain"
GO_TAGS = "grpcnotrace"  # CoreDNS's Makefile GOTAGS: gRPC without golang.org/x/net/trace
BUILD_FLAGS = (*GO_BUILD_FLAGS, f"-tags={GO_TAGS}")
BINARY = "coredns"

# First build on this project's 2-core machine, rounded up (about 6 min alone; 2m47s with an
# empty GOCACHE while the Kubernetes build compiled the shared k8s.io/* packages beside
# it); only tells the user what to expect.
FIRST_BUILD_MINUTES = 7

WORK_DIR_NAME = ".coredns-build"  # lock, partial and stale directories, under dest_root
LOG_NAME = "coredns-build.log"


# ---------------------------------------------------------------- main.go / pins


def main_go_plugins(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(plugins main.go imports, in import order; its directives list, in order)."""
    imports = tuple(re.findall(rf'^\s*_\s+"{re.escape(PLUGIN_PREFIX)}([\w/]+)"', text, re.M))
    block = re.search(r"^var directives = \[\]string\{(.*?)^\}", text, re.M | re.S)
    if not block:
        raise KubeBuildError("main.go of the CoreDNS wrapper module has no `var directives = []string{...}`")
    directives = tuple(re.findall(r'"([^"]+)"', block[1]))
    return imports, directives


def check_plugins(imports: Iterable[str], directives: Iterable[str]) -> tuple[str, ...]:
    """The directives, when they are exactly the imported plugins (each once)."""
    imports, directives = tuple(imports), tuple(directives)
    names = tuple(path.rsplit("/", 1)[-1] for path in imports)
    if len(set(directives)) != len(directives):
        raise KubeBuildError(f"CoreDNS main.go lists a directive twice: {', '.join(directives)}")
    if set(names) != set(directives):
        raise KubeBuildError(
            f"CoreDNS main.go imports plugins {sorted(names)} but its directives are {sorted(directives)}"
        )
    return directives


@dataclass(frozen=True)
class CorednsPins:
    coredns: str  # e.g. v1.14.7
    go_required: str  # the wrapper module's go directive
    plugins: tuple[str, ...]  # dnsserver.Directives, in order
    gomod_sha256: str  # go.mod, go.sum and main.go

    @property
    def install_name(self) -> str:
        return f"coredns-{self.coredns.lstrip('v')}"


def pinned_files() -> tuple[Path, ...]:
    return (COREDNS_GOMOD / "go.mod", COREDNS_GOMOD / "go.sum", COREDNS_GOMOD / "main.go")


def read_pins(files: tuple[Path, ...] | None = None) -> CorednsPins:
    files = files or pinned_files()
    gomod_path, _, main_path = files
    gomod = parse_gomod(gomod_path.read_text())
    version = gomod.requires.get(COREDNS_MODULE)
    if not version:
        raise KubeBuildError(f"wrapper go.mod does not require {COREDNS_MODULE}")
    semver_parts(version)
    plugins = check_plugins(*main_go_plugins(main_path.read_text()))
    return CorednsPins(version, gomod.go_version, plugins, gomod_digest(files))


# ---------------------------------------------------------------- flags, stamp, checks


def coredns_ldflags(git_commit: str, declared: Iterable[str]) -> str:
    return " ".join(["-s", "-w"] + x_flags(VERSION_PACKAGE, {"GitCommit": git_commit}, declared))


def stamp_record(pins: CorednsPins, size: int) -> dict:
    """What a complete install records: the pins, the build recipe and the binary's size."""
    return {
        "coredns": pins.coredns,
        "plugins": list(pins.plugins),
        "gomod_sha256": pins.gomod_sha256,
        "go_build_flags": list(BUILD_FLAGS),
        "cgo_enabled": "0",
        # the ldflags recipe with the variable present; a change to it rebuilds
        "coredns_ldflags": coredns_ldflags("MODULE_SUM", ["GitCommit"]),
        "binaries": {BINARY: size},
    }


def binary_path(install_dir: Path) -> Path:
    return install_dir / "bin" / BINARY


def is_complete(install_dir: Path, pins: CorednsPins) -> bool:
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
        return path.stat().st_size == size and os.access(path, os.X_OK)
    except OSError:
        return False


def check_version_output(output: str, expected: str) -> None:
    """Refuse a binary whose -version does not start with `CoreDNS-<pinned version>`."""
    first = (output.strip().splitlines() or ["(no output)"])[0].strip()
    want = f"CoreDNS-{expected.lstrip('v')}"
    if first != want:
        raise KubeBuildError(f"built coredns reports {first!r}, not {want!r}; refusing to install it")


def check_plugins_output(output: str, plugins: Iterable[str]) -> None:
    """Refuse a binary whose -plugins list lacks one of the directives."""
    listed = {line.strip() for line in output.splitlines()}
    missing = [name for name in plugins if name not in listed]
    if missing:
        raise KubeBuildError(f"built coredns does not list plugin(s) {', '.join(missing)}; refusing to install it")


def _run_binary(path: Path, flag: str) -> str:
    try:
        result = subprocess.run([str(path), flag], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise KubeBuildError(f"built coredns does not run: {err}") from None
    return result.stdout + result.stderr


def verify_binary(path: Path, pins: CorednsPins) -> None:
    check_version_output(_run_binary(path, "-version"), pins.coredns)
    check_plugins_output(_run_binary(path, "-plugins"), pins.plugins)


# ---------------------------------------------------------------- the build


def _compile(go: str, pins: CorednsPins, output: Path, log: Path, progress: Progress) -> None:
    info = module_download(go, COREDNS_GOMOD, [COREDNS_MODULE], log)[COREDNS_MODULE]
    declared = declared_vars(go, COREDNS_GOMOD, [VERSION_PACKAGE], log)[VERSION_PACKAGE]
    if "GitCommit" not in declared:
        raise KubeBuildError(f"{VERSION_PACKAGE} {pins.coredns} declares no GitCommit variable")
    progress(
        f"kube: building coredns {pins.coredns} (one-time, ~{FIRST_BUILD_MINUTES} min on 2 cores; "
        f"plugins {', '.join(pins.plugins)})…"
    )
    # No git checkout here: the module's go.sum hash names the exact source instead.
    # go_build's package list carries CoreDNS's build tag (flags may precede packages).
    took = go_build(
        go,
        COREDNS_GOMOD,
        coredns_ldflags(info["Sum"], declared),
        str(output),
        [f"-tags={GO_TAGS}", "."],
        f"coredns {pins.coredns}",
        log,
        progress,
    )
    progress(f"kube: built coredns in {format_duration(took)}")


def build(pins: CorednsPins, dest_root: Path, progress: Progress) -> Path:
    """Build into a temporary directory beside the target, check it, then rename it in."""
    go, reported = find_go(pins.go_required, "CoreDNS")
    work_dir = dest_root / WORK_DIR_NAME
    target = dest_root / pins.install_name
    log = dest_root / LOG_NAME
    log.write_text(f"coredns build {pins.coredns} ({', '.join(pins.plugins)}) with {reported}\n")
    started = time.monotonic()
    partial, stale = work_dir / f"partial-{os.getpid()}", work_dir / f"stale-{os.getpid()}"
    changed = "the CoreDNS go.mod/go.sum/main.go"
    with staged_install(target, partial, stale, pinned_files(), pins.gomod_sha256, changed) as staged:
        with cgo_disabled():
            _compile(go, pins, binary_path(staged), log, progress)
        verify_binary(binary_path(staged), pins)
        size = binary_path(staged).stat().st_size
        (staged / STAMP_NAME).write_text(json.dumps(stamp_record(pins, size), indent=2) + "\n")
    progress(
        f"kube: coredns {pins.coredns} installed in {target}/bin "
        f"(total {format_duration(time.monotonic() - started)}, {size / 2**20:.0f} MiB)"
    )
    return target


def ensure_coredns(dest_root: Path = DEFAULT_DEST, progress: Progress = print) -> Path:
    """Path of the pinned CoreDNS binary; built on first use.

    A complete build for the pinned version is reused without running Go. Raises
    KubeBuildError (one line) when Go is missing or too old, or the build fails.
    """
    dest_root = Path(dest_root)
    pins = read_pins()
    target = dest_root / pins.install_name
    build_once(
        lambda: is_complete(target, pins),
        dest_root / WORK_DIR_NAME,
        ("partial-*", "stale-*"),
        lambda: build(pins, dest_root, progress),
        progress,
    )
    return binary_path(target)


def main(argv: list[str] | None = None) -> int:
    return print_installs(argv, __doc__, [ensure_coredns])


if __name__ == "__main__":
    sys.exit(main())
