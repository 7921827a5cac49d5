"""Build the pinned Kubernetes binaries once: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, the node parts kubelet and kube-proxy, and kube-router (whose network policy
controller enforces the nodes' NetworkPolicies).

Sources come from the Go module proxy through the three wrapper modules in
scripts/tfmw/devcluster/gomod/ (their go.mod pins the versions, their go.sum is the checksum;
`-mod=readonly` means a build never rewrites either). The five Kubernetes commands
are built in one `go build` (shared compile, parallel link), etcd in a second, kube-router in
a third. Output goes to a temporary directory beside the target, is checked (`--version`
must report the pinned release, not v0.0.0) and renamed into

    .tools/kube/<kubernetes version>-etcd<etcd version>-kube-router<version>/bin/

with a stamp recording the versions and the sha256 of the go.mod/go.sum files, so a
complete build is reused without running Go at all. Compiled packages go to the
machine's default GOCACHE, so a second clone on the same machine links in minutes.

Usage: python -m tfmw.devcluster.build [--dest DIR] [--print-path NAME]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tfmw import REPO

GOMOD_DIR = Path(__file__).resolve().parent / "gomod"
KUBE_GOMOD = GOMOD_DIR / "kubernetes"
ETCD_GOMOD = GOMOD_DIR / "etcd"
KUBE_ROUTER_GOMOD = GOMOD_DIR / "kube-router"
DEFAULT_DEST = REPO / ".tools" / "kube"

KUBE_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"  # this package is etcd's main
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
KUBE_ROUTER_MODULE = "github.com/cloudnativelabs/kube-router/v2"
BINARIES = ("etcd",) + KUBE_COMMANDS + ("kube-router",)

# Where the version strings live. -X on a variable the binary lacks is silently ignored
# by the linker, so each is checked against the downloaded source before it is set.
KUBE_VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
ETCD_VERSION_PACKAGE = "go.etcd.io/etcd/api/v3/version"
KUBE_ROUTER_VERSION_PACKAGE = f"{KUBE_ROUTER_MODULE}/pkg/version"  # its Makefile sets Version, BuildDate

# Every build runs with these, whatever GOFLAGS the environment or `go env -w` holds:
# readonly so go.sum stays the checksum; no VCS stamping (the wrapper modules sit inside
# this repository's git tree, whose state says nothing about the upstream sources).
GO_BUILD_FLAGS = ("-trimpath", "-mod=readonly", "-buildvcs=false")

# Measured first builds on this project's 2-core machine, rounded up (README "Local
# Kubernetes control plane: build": 7m16s and 1m44s); only tells the user what to expect.
FIRST_KUBE_BUILD_MINUTES = 11
FIRST_ETCD_BUILD_MINUTES = 2
FIRST_KUBE_ROUTER_BUILD_MINUTES = 2  # 1m10s after the Kubernetes build (shared client-go)
HEARTBEAT_SECONDS = 180  # a quiet 20-minute step would look hung in a CI log

STAMP_NAME = "stamp.json"

Progress = Callable[[str], None]


class KubeBuildError(Exception):
    """A one-line reason the control-plane binaries could not be built."""


# ---------------------------------------------------------------- go.mod / go.sum


@dataclass(frozen=True)
class GoMod:
    go_version: str
    requires: Mapping[str, str]  # module -> version
    replaces: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # old -> (new, version)


def _strip_comment(line: str) -> str:
    return line.split("//", 1)[0].strip()


def parse_gomod(text: str) -> GoMod:
    """The go directive, requires and replaces of a go.mod (block and one-line forms)."""
    go_version = ""
    requires: dict[str, str] = {}
    replaces: dict[str, tuple[str, str]] = {}
    block = None
    for raw in text.splitlines():
        line = _strip_comment(raw)
        if not line:
            continue
        if block:
            if line == ")":
                block = None
                continue
            entry = line
            verb = block
        else:
            verb, _, entry = line.partition(" ")
            entry = entry.strip()
            if entry == "(":
                block = verb
                continue
        if verb == "go":
            go_version = entry
        elif verb == "require":
            module, version = entry.split()[:2]
            requires[module] = version
        elif verb == "replace":
            old, _, new = entry.partition("=>")
            new_parts = new.split()
            replaces[old.split()[0]] = (new_parts[0], new_parts[1] if len(new_parts) > 1 else "")
    if not go_version:
        raise KubeBuildError("go.mod has no go directive")
    return GoMod(go_version, requires, replaces)


def gosum_modules(text: str) -> set[tuple[str, str]]:
    """(module, version) pairs a go.sum holds a checksum for (source or go.mod only)."""
    pairs = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            pairs.add((parts[0], parts[1].removesuffix("/go.mod")))
    return pairs


def staging_modules(upstream_gomod_text: str) -> set[str]:
    """Modules k8s.io/kubernetes's own go.mod points at ./staging/ (they need a real release)."""
    return {old for old, (new, _) in parse_gomod(upstream_gomod_text).replaces.items() if new.startswith("./staging/")}


def gomod_digest(files: Iterable[Path]) -> str:
    """sha256 over the go.mod/go.sum files, in order, each with its name."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.parent.name}/{path.name}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def pinned_files() -> tuple[Path, ...]:
    return tuple(d / name for d in (KUBE_GOMOD, ETCD_GOMOD, KUBE_ROUTER_GOMOD) for name in ("go.mod", "go.sum"))


# ---------------------------------------------------------------- versions and flags

_SEMVER = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


def semver_parts(version: str) -> tuple[int, int, int]:
    match = _SEMVER.fullmatch(version)
    if not match:
        raise KubeBuildError(f"{version!r} is not a release version like v1.35.4")
    return int(match[1]), int(match[2]), int(match[3])


def go_version_tuple(version: str) -> tuple[int, ...]:
    """'go1.26.8' / '1.25.0' / '1.26' -> (1, 26, 8) / (1, 25, 0) / (1, 26, 0)."""
    match = re.match(r"(?:go)?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not match:
        raise KubeBuildError(f"cannot read a Go version from {version!r}")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def check_go_version(reported: str, required: str, what: str = "the control plane") -> None:
    """Refuse a toolchain older than a go.mod's go directive (GOTOOLCHAIN=local: no auto-download)."""
    if go_version_tuple(reported) < go_version_tuple(required):
        raise KubeBuildError(
            f"Go {required} or newer is needed to build {what}; `go` on PATH is "
            f"{reported.strip()} (install a newer Go from https://go.dev/dl/)"
        )


def package_string_vars(source: str) -> set[str]:
    """Names of package-level `var`s in gofmt'd Go source (what `-X pkg.name=` can set)."""
    names: set[str] = set()
    in_block = False
    for line in source.splitlines():
        if in_block:
            if line.startswith(")"):
                in_block = False
                continue
            match = re.match(r"\s+([A-Za-z_]\w*)\b", line)
            if match and not line.lstrip().startswith("//"):
                names.add(match[1])
        elif line.startswith("var ("):
            in_block = True
        elif line.startswith("var "):
            match = re.match(r"var\s+([A-Za-z_]\w*)\b", line)
            if match:
                names.add(match[1])
    return names


def x_flags(package: str, values: Mapping[str, str], declared: Iterable[str]) -> list[str]:
    """`-X package.name=value` for each value whose variable the package declares."""
    declared = set(declared)
    flags = []
    for name, value in values.items():
        if re.search(r"[\s'\"]", value):
            raise KubeBuildError(f"version value {value!r} for {package}.{name} would need quoting")
        if name in declared:
            flags += ["-X", f"{package}.{name}={value}"]
    return flags


def kube_version_values(version: str, build_date: str) -> dict[str, str]:
    """What the Kubernetes version variables say, as release builds set them."""
    major, minor, _ = semver_parts(version)
    return {
        "gitVersion": version,
        "gitMajor": str(major),
        "gitMinor": str(minor),
        "gitTreeState": "clean",
        "buildDate": build_date,
    }


def kube_ldflags(version: str, build_date: str, declared: Mapping[str, Iterable[str]]) -> str:
    """-ldflags for the Kubernetes commands; declared: package -> its package-level vars."""
    values = kube_version_values(version, build_date)
    flags = ["-s", "-w"]
    for package in KUBE_VERSION_PACKAGES:
        flags += x_flags(package, values, declared.get(package, ()))
    return " ".join(flags)


def etcd_ldflags(git_sha: str, declared: Iterable[str]) -> str:
    return " ".join(["-s", "-w"] + x_flags(ETCD_VERSION_PACKAGE, {"GitSHA": git_sha}, declared))


def kube_router_ldflags(version: str, build_date: str, declared: Iterable[str]) -> str:
    values = {"Version": version, "BuildDate": build_date}
    return " ".join(["-s", "-w"] + x_flags(KUBE_ROUTER_VERSION_PACKAGE, values, declared))


def check_version_output(name: str, output: str, expected: str) -> None:
    """Refuse a binary whose --version does not name the pinned release."""
    first = (output.strip().splitlines() or ["(no output)"])[0]
    if name == "etcd":
        ok = re.search(rf"\betcd Version: {re.escape(expected.lstrip('v'))}\s*$", output, re.M)
        want = f"etcd Version: {expected.lstrip('v')}"
    elif name == "kube-router":  # "Running ./kube-router version v2.1.0, built on <date>, go1.26.8"
        ok = re.search(rf"\bkube-router version {re.escape(expected)}, ", output)
        want = f"kube-router version {expected}"
    else:
        ok = re.fullmatch(rf"Kubernetes {re.escape(expected)}", output.strip())
        want = f"Kubernetes {expected}"
    if not ok:
        raise KubeBuildError(f"built {name} reports {first!r}, not {want!r}; refusing to install it")


# ---------------------------------------------------------------- stamp


@dataclass(frozen=True)
class Pins:
    kubernetes: str  # e.g. v1.35.4
    etcd: str  # e.g. v3.6.16
    kube_router: str  # e.g. v2.1.0
    go_required: str  # newest go directive of the wrapper modules
    gomod_sha256: str

    @property
    def install_name(self) -> str:
        return f"{self.kubernetes.lstrip('v')}-etcd{self.etcd.lstrip('v')}-kube-router{self.kube_router.lstrip('v')}"


def read_pins(files: tuple[Path, ...] | None = None) -> Pins:
    files = files or pinned_files()
    kube_mod, _, etcd_mod, _, router_mod, _ = files
    kube, etcd, router = (parse_gomod(f.read_text()) for f in (kube_mod, etcd_mod, router_mod))
    try:
        versions = kube.requires[KUBE_MODULE], etcd.requires[ETCD_MODULE], router.requires[KUBE_ROUTER_MODULE]
    except KeyError as missing:
        raise KubeBuildError(f"wrapper go.mod does not require {missing.args[0]}") from None
    for version in versions:
        semver_parts(version)
    go_required = max((kube.go_version, etcd.go_version, router.go_version), key=go_version_tuple)
    return Pins(*versions, go_required, gomod_digest(files))


def stamp_record(pins: Pins, sizes: Mapping[str, int]) -> dict:
    """What a complete install records: the pins, the build flags, and each binary's size."""
    return {
        "kubernetes": pins.kubernetes,
        "etcd": pins.etcd,
        "kube_router": pins.kube_router,
        "gomod_sha256": pins.gomod_sha256,
        "go_build_flags": list(GO_BUILD_FLAGS),
        # the ldflags recipe with every variable present; a change to it rebuilds
        "kube_ldflags": kube_ldflags(
            pins.kubernetes,
            "RELEASE_TIME",
            {p: kube_version_values(pins.kubernetes, "").keys() for p in KUBE_VERSION_PACKAGES},
        ),
        "binaries": dict(sorted(sizes.items())),
    }


def is_complete(install_dir: Path, pins: Pins) -> bool:
    """True when install_dir holds the build these pins describe (no Go needed to tell)."""
    try:
        stamp = json.loads((install_dir / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or not isinstance(stamp.get("binaries"), dict):
        return False
    if stamp != stamp_record(pins, stamp["binaries"]) or set(stamp["binaries"]) != set(BINARIES):
        return False
    for name, size in stamp["binaries"].items():
        path = install_dir / "bin" / name
        try:
            if path.stat().st_size != size or not os.access(path, os.X_OK):
                return False
        except OSError:
            return False
    return True


def binary_paths(install_dir: Path) -> dict[str, Path]:
    return {name: install_dir / "bin" / name for name in BINARIES}


# ---------------------------------------------------------------- running Go


def format_duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            # GOFLAGS from the environment or `go env -w` (e.g. -mod=vendor, -race, -tags)
            # must not change what is built; the explicit flags below are the whole recipe.
            "GOFLAGS": "-buildvcs=false",
            "GOTOOLCHAIN": "local",  # never fetch another toolchain behind the user's back
            "GOWORK": "off",  # a go.work above the repo must not join the build
            "GO111MODULE": "on",
        }
    )
    return env


def find_go(required: str, what: str, cwd: Path = REPO) -> tuple[str, str]:
    """`go` on PATH and the version it reports, when it is `required` (a go directive) or newer:
    building `what` needs it. KubeBuildError, one line, otherwise."""
    go = shutil.which("go")
    if not go:
        raise KubeBuildError(f"`go` is not on PATH: building {what} needs Go {required} or newer (https://go.dev/dl/)")
    reported = run_go(go, ["env", "GOVERSION"], cwd, "asking `go` for its version").strip()
    check_go_version(reported, required, what)
    return go, reported


def run_go(go: str, args: list[str], cwd: Path, what: str, log: Path | None = None) -> str:
    result = subprocess.run([go, *args], cwd=cwd, env=go_env(), capture_output=True, text=True)
    if log is not None:
        with log.open("a") as out:
            out.write(f"$ go {' '.join(args)}  (in {cwd})\n{result.stdout}{result.stderr}\n")
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        where = f" (full log: {log})" if log else ""
        raise KubeBuildError(f"{what} failed: {last}{where}")
    return result.stdout


def module_download(go: str, gomod: Path, modules: list[str], log: Path) -> dict[str, dict]:
    """Download (or find cached) modules; returns `go mod download -json` per module path."""
    out = run_go(
        go,
        ["mod", "download", "-json", *modules],
        gomod,
        f"downloading {', '.join(modules)} from the Go module proxy",
        log,
    )
    infos = {}
    decoder, position, out = json.JSONDecoder(), 0, out.strip()
    while position < len(out):  # one JSON object per module, back to back
        info, position = decoder.raw_decode(out, position)
        position = len(out) - len(out[position:].lstrip())
        if info.get("Error"):
            raise KubeBuildError(f"downloading {info.get('Path')}: {info['Error']}")
        infos[info["Path"]] = info
    return infos


def declared_vars(go: str, gomod: Path, packages: Iterable[str], log: Path) -> dict[str, set[str]]:
    """package -> its package-level variables, read from the module source the build uses."""
    out = run_go(
        go,
        ["list", "-mod=readonly", "-e", "-f", "{{.ImportPath}}\t{{.Dir}}", *packages],
        gomod,
        "locating the version packages",
        log,
    )
    declared: dict[str, set[str]] = {}
    for line in out.splitlines():
        package, _, directory = line.partition("\t")
        names: set[str] = set()
        if directory:
            for source in Path(directory).glob("*.go"):
                if not source.name.endswith("_test.go"):
                    names |= package_string_vars(source.read_text())
        declared[package] = names
    return declared


def go_build(
    go: str, gomod: Path, ldflags: str, output: str, packages: list[str], what: str, log: Path, progress: Progress
) -> float:
    """One `go build`, with a heartbeat line while it runs; returns the elapsed seconds."""
    args = ["build", *GO_BUILD_FLAGS, "-ldflags", ldflags, "-o", output, *packages]
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"$ go {' '.join(args)}  (in {gomod})\n")
        out.flush()
        proc = subprocess.Popen([go, *args], cwd=gomod, env=go_env(), stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                code = proc.wait(timeout=HEARTBEAT_SECONDS)
                break
            except subprocess.TimeoutExpired:
                progress(f"kube: still building {what} ({format_duration(time.monotonic() - started)} so far)…")
    if code != 0:
        lines = [line for line in log.read_text().splitlines() if line.strip()]
        raise KubeBuildError(f"go build of {what} failed: {lines[-1] if lines else code} (full log: {log})")
    return time.monotonic() - started


def verify_binary(path: Path, expected: str) -> None:
    try:
        result = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise KubeBuildError(f"built {path.name} does not run: {err}") from None
    check_version_output(path.name, result.stdout + result.stderr, expected)


# ---------------------------------------------------------------- the build


@contextlib.contextmanager
def cgo_disabled() -> Iterator[None]:
    """CGO_ENABLED=0 for the `go` commands (go_env() copies os.environ): a static binary, as
    CoreDNS's and Kueue's releases are."""
    saved = os.environ.get("CGO_ENABLED")
    os.environ["CGO_ENABLED"] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CGO_ENABLED", None)
        else:
            os.environ["CGO_ENABLED"] = saved


@contextlib.contextmanager
def build_lock(dest_root: Path, progress: Progress) -> Iterator[None]:
    """One build at a time per dest_root; a second caller waits, then reuses the result."""
    dest_root.mkdir(parents=True, exist_ok=True)
    with (dest_root / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"kube: another process is building in {dest_root}; waiting for it…")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_once(
    is_built: Callable[[], bool],
    work_dir: Path,
    leftovers: tuple[str, ...],
    build_it: Callable[[], object],
    progress: Progress,
) -> None:
    """build_it() unless is_built(): under work_dir's lock (build_lock), asking again there
    (another process may have finished it meanwhile), and first removing what a broken build
    left in work_dir (`leftovers`: its glob patterns)."""
    if is_built():
        return
    with build_lock(work_dir, progress):
        if not is_built():
            for pattern in leftovers:
                for leftover in list(work_dir.glob(pattern)):
                    shutil.rmtree(leftover, ignore_errors=True)
            build_it()


def publish(partial: Path, target: Path, stale: Path) -> None:
    """Move a finished build into place: the old install aside first, then one rename, so a
    half-built directory is never at the target path."""
    if target.exists():
        target.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    partial.rename(target)


@contextlib.contextmanager
def staged_install(
    target: Path, partial: Path, stale: Path, pinned: tuple[Path, ...], gomod_sha256: str, what: str
) -> Iterator[Path]:
    """A build's own folder beside `target` (`partial`, its bin/ made) for the with-block to
    build and stamp in; then, when the `pinned` files are still the ones it was built from
    (KubeBuildError "<what> changed during the build" otherwise), published as `target`
    (`stale`: where the old install goes on its way out). Removed whatever happens."""
    (partial / "bin").mkdir(parents=True)
    try:
        yield partial
        if gomod_digest(pinned) != gomod_sha256:
            raise KubeBuildError(f"{what} changed during the build; run it again")
        publish(partial, target, stale)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def build(pins: Pins, dest_root: Path, progress: Progress) -> Path:
    """Build all four binaries into a temporary directory beside the target, then rename it in."""
    go, reported = find_go(pins.go_required, "etcd and the Kubernetes control plane")
    target = dest_root / pins.install_name
    log = dest_root / "build.log"
    log.write_text(f"kube build {pins.kubernetes} etcd {pins.etcd} with {reported}\n")
    started = time.monotonic()
    partial = dest_root / f".partial-{pins.install_name}-{os.getpid()}"
    stale = dest_root / f".stale-{pins.install_name}-{os.getpid()}"
    with staged_install(target, partial, stale, pinned_files(), pins.gomod_sha256, "go.mod/go.sum") as staged:
        bin_dir = staged / "bin"
        kube_info = module_download(go, KUBE_GOMOD, [KUBE_MODULE], log)[KUBE_MODULE]
        # buildDate: the release's publication time, so the same pins give the same binary
        build_date = json.loads(Path(kube_info["Info"]).read_text())["Time"]
        declared = declared_vars(go, KUBE_GOMOD, KUBE_VERSION_PACKAGES, log)
        commands = ", ".join(KUBE_COMMANDS)
        progress(
            f"kube: building {commands} {pins.kubernetes} from the Go module proxy "
            f"(one-time, ~{FIRST_KUBE_BUILD_MINUTES} min on 2 cores)…"
        )
        took = go_build(
            go,
            KUBE_GOMOD,
            kube_ldflags(pins.kubernetes, build_date, declared),
            f"{bin_dir}/",
            [f"{KUBE_MODULE}/cmd/{c}" for c in KUBE_COMMANDS],
            commands,
            log,
            progress,
        )
        progress(f"kube: built {commands} in {format_duration(took)}")

        etcd_info = module_download(go, ETCD_GOMOD, [ETCD_MODULE], log)[ETCD_MODULE]
        etcd_declared = declared_vars(go, ETCD_GOMOD, [ETCD_VERSION_PACKAGE], log)
        progress(
            f"kube: building etcd {pins.etcd} from the Go module proxy "
            f"(one-time, ~{FIRST_ETCD_BUILD_MINUTES} min on 2 cores)…"
        )
        # No git checkout here: the module's go.sum hash names the exact source instead.
        took = go_build(
            go,
            ETCD_GOMOD,
            etcd_ldflags(etcd_info["Sum"], etcd_declared[ETCD_VERSION_PACKAGE]),
            str(bin_dir / "etcd"),
            [ETCD_MODULE],
            "etcd",
            log,
            progress,
        )
        progress(f"kube: built etcd in {format_duration(took)}")

        router_info = module_download(go, KUBE_ROUTER_GOMOD, [KUBE_ROUTER_MODULE], log)[KUBE_ROUTER_MODULE]
        router_declared = declared_vars(go, KUBE_ROUTER_GOMOD, [KUBE_ROUTER_VERSION_PACKAGE], log)
        progress(
            f"kube: building kube-router {pins.kube_router} (its network policy controller) from the Go "
            f"module proxy (one-time, ~{FIRST_KUBE_ROUTER_BUILD_MINUTES} min on 2 cores)…"
        )
        took = go_build(
            go,
            KUBE_ROUTER_GOMOD,
            kube_router_ldflags(
                pins.kube_router,
                json.loads(Path(router_info["Info"]).read_text())["Time"],
                router_declared[KUBE_ROUTER_VERSION_PACKAGE],
            ),
            str(bin_dir / "kube-router"),
            [f"{KUBE_ROUTER_MODULE}/cmd/kube-router"],
            "kube-router",
            log,
            progress,
        )
        progress(f"kube: built kube-router in {format_duration(took)}")

        for name in KUBE_COMMANDS:
            verify_binary(bin_dir / name, pins.kubernetes)
        verify_binary(bin_dir / "etcd", pins.etcd)
        verify_binary(bin_dir / "kube-router", pins.kube_router)
        sizes = {name: (bin_dir / name).stat().st_size for name in BINARIES}
        (staged / STAMP_NAME).write_text(json.dumps(stamp_record(pins, sizes), indent=2) + "\n")
    progress(
        f"kube: etcd {pins.etcd}, {', '.join(KUBE_COMMANDS)} {pins.kubernetes}, kube-router "
        f"{pins.kube_router} installed in {target}/bin (total {format_duration(time.monotonic() - started)})"
    )
    return target


def ensure_binaries(dest_root: Path = DEFAULT_DEST, progress: Progress = print) -> dict[str, Path]:
    """Paths of every binary in BINARIES; built on first use.

    A complete build for the pinned versions is reused without running Go. Raises
    KubeBuildError (one line) when Go is missing or too old, or the build fails.
    """
    dest_root = Path(dest_root)
    pins = read_pins()
    target = dest_root / pins.install_name
    build_once(
        lambda: is_complete(target, pins),
        dest_root,
        (".partial-*", ".stale-*"),
        lambda: build(pins, dest_root, progress),
        progress,
    )
    return binary_paths(target)


def dest_parser(doc: str, prog: str | None = None) -> argparse.ArgumentParser:
    """The command line of a pinned build: its --dest, the root of its install directories."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    parser.add_argument(
        "--dest",
        type=Path,
        default=DEFAULT_DEST,
        help="root of the versioned install directories (default: .tools/kube)",
    )
    return parser


def print_installs(
    argv: list[str] | None,
    doc: str,
    ensures: Iterable[Callable[[Path, Progress], Path]],
    prog: str | None = None,
    name: str = "kube",
) -> int:
    """`python -m <module> [--dest DIR]`: each of `ensures` (dest_root, progress) -> what it
    installed, built when needed, printed; stdout carries only those paths (the progress goes
    to stderr). A failed build is one line, `<name>: ...`, and exit 1."""
    args = dest_parser(doc, prog).parse_args(argv)
    try:
        for ensure in ensures:
            print(ensure(args.dest, lambda line: print(line, file=sys.stderr, flush=True)))
    except KubeBuildError as err:
        print(f"{name}: {err}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = dest_parser(__doc__)
    parser.add_argument(
        "--print-path", metavar="NAME", help=f"print only the path of one binary ({', '.join(BINARIES)})"
    )
    args = parser.parse_args(argv)
    if args.print_path is not None and args.print_path not in BINARIES:
        print(f"kube: unknown binary {args.print_path!r}; choose one of {', '.join(BINARIES)}", file=sys.stderr)
        return 2
    # With --print-path, stdout carries only the path; progress goes to stderr.
    out = sys.stderr if args.print_path else sys.stdout

    def progress(line: str) -> None:
        print(line, file=out, flush=True)

    try:
        pins = read_pins()
        reused = is_complete(args.dest / pins.install_name, pins)
        paths = ensure_binaries(args.dest, progress)
    except KubeBuildError as err:
        print(f"kube: {err}", file=sys.stderr)
        return 1
    if args.print_path:
        print(paths[args.print_path])
    elif reused:
        print(
            f"kube: etcd {pins.etcd}, {', '.join(KUBE_COMMANDS)} {pins.kubernetes}, kube-router "
            f"{pins.kube_router} already built in {paths['etcd'].parent}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
