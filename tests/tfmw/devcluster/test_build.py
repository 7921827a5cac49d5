"""tfmw.devcluster.build: the pinned wrapper modules, the version flags, the stamp, the refusals, the real binaries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo import REPO

from tfmw.devcluster import build
from tfmw.devcluster.build import KubeBuildError

KUBE_GOMOD_TEXT = (build.KUBE_GOMOD / "go.mod").read_text()
KUBE_GOSUM_TEXT = (build.KUBE_GOMOD / "go.sum").read_text()


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfmw.devcluster.build", *args], cwd=REPO, capture_output=True, text=True, env=env
    )


# ---------------------------------------------------------------- the wrapper modules


def test_pins_come_from_the_wrapper_modules():
    pins = build.read_pins()
    assert pins.kubernetes == build.parse_gomod(KUBE_GOMOD_TEXT).requires["k8s.io/kubernetes"]
    etcd_mod = build.parse_gomod((build.ETCD_GOMOD / "go.mod").read_text())
    assert pins.etcd == etcd_mod.requires["go.etcd.io/etcd/server/v3"]
    router_mod = build.parse_gomod((build.KUBE_ROUTER_GOMOD / "go.mod").read_text())
    assert pins.kube_router == router_mod.requires["github.com/cloudnativelabs/kube-router/v2"]
    assert pins.install_name == f"{pins.kubernetes[1:]}-etcd{pins.etcd[1:]}-kube-router{pins.kube_router[1:]}"
    assert pins.kubernetes.startswith("v1.35.") and pins.etcd.startswith("v3.6.") and pins.kube_router == "v2.1.0"


def test_every_staging_replace_points_at_the_matching_real_release():
    pins = build.read_pins()
    _, minor, patch = build.semver_parts(pins.kubernetes)
    replaces = build.parse_gomod(KUBE_GOMOD_TEXT).replaces
    assert replaces, "the kubernetes wrapper go.mod replaces nothing"
    for old, (new, version) in replaces.items():
        assert new == old, f"{old} is replaced by another module ({new})"
        assert version == f"v0.{minor}.{patch}", f"{old} => {version}, not the {pins.kubernetes} release"


def test_every_k8s_module_the_build_needs_at_v0_0_0_or_v0_35_is_replaced():
    pins = build.read_pins()
    _, minor, patch = build.semver_parts(pins.kubernetes)
    gomod = build.parse_gomod(KUBE_GOMOD_TEXT)
    summed = build.gosum_modules(KUBE_GOSUM_TEXT)
    staging_release = f"v0.{minor}.{patch}"
    needed = {m for m, v in gomod.requires.items() if m.startswith("k8s.io/") and v == "v0.0.0"} | {
        m for m, v in summed if m.startswith("k8s.io/") and v == staging_release
    }
    assert needed, "go.mod/go.sum name no staging module at all"
    assert needed <= set(gomod.replaces), f"needed but not replaced: {sorted(needed - set(gomod.replaces))}"
    # and what is replaced and needed has its checksum in go.sum (go.sum is the checksum)
    for module in needed:
        assert (module, staging_release) in summed, f"go.sum has no checksum for {module} {staging_release}"


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the Go toolchain (make setup builds with it)")
def test_replaced_modules_are_exactly_the_staging_modules_of_the_pinned_kubernetes(tmp_path):
    """Read k8s.io/kubernetes's own go.mod (module cache; downloaded on a fresh machine)."""
    pins = build.read_pins()
    log = tmp_path / "download.log"
    info = build.module_download(shutil.which("go"), build.KUBE_GOMOD, ["k8s.io/kubernetes"], log)
    upstream = info["k8s.io/kubernetes"]
    assert upstream["Version"] == pins.kubernetes
    staging = build.staging_modules(Path(upstream["GoMod"]).read_text())
    assert len(staging) > 20
    assert set(build.parse_gomod(KUBE_GOMOD_TEXT).replaces) == staging


def test_parse_gomod_reads_block_and_single_line_forms():
    text = """// comment
module example.local/x

go 1.25.0

require k8s.io/kubernetes v1.35.4
require (
\tk8s.io/api v0.0.0 // indirect
\tgithub.com/a/b v1.2.3
)
replace k8s.io/kms => k8s.io/kms v0.35.4
replace (
\tk8s.io/api => k8s.io/api v0.35.4 // real release
\tk8s.io/local => ./staging/src/k8s.io/local
)
"""
    mod = build.parse_gomod(text)
    assert mod.go_version == "1.25.0"
    assert mod.requires == {"k8s.io/kubernetes": "v1.35.4", "k8s.io/api": "v0.0.0", "github.com/a/b": "v1.2.3"}
    assert mod.replaces == {
        "k8s.io/kms": ("k8s.io/kms", "v0.35.4"),
        "k8s.io/api": ("k8s.io/api", "v0.35.4"),
        "k8s.io/local": ("./staging/src/k8s.io/local", ""),
    }
    assert build.staging_modules(text) == {"k8s.io/local"}


def test_parse_gomod_refuses_a_file_without_go_directive():
    with pytest.raises(KubeBuildError, match="no go directive"):
        build.parse_gomod("module x\nrequire a v1.0.0\n")


# ---------------------------------------------------------------- versions and ldflags


def test_kube_ldflags_set_release_version_in_every_declared_package():
    declared = {
        "k8s.io/component-base/version": {"gitVersion", "gitMajor", "gitMinor", "gitTreeState", "buildDate"},
        "k8s.io/client-go/pkg/version": {"gitVersion", "gitMajor", "gitMinor", "gitTreeState", "buildDate"},
    }
    flags = build.kube_ldflags("v1.35.4", "2026-04-15T18:01:22Z", declared).split()
    assert flags[:2] == ["-s", "-w"]
    pairs = {flags[i + 1] for i in range(len(flags)) if flags[i] == "-X"}
    for package in declared:
        assert {
            f"{package}.gitVersion=v1.35.4",
            f"{package}.gitMajor=1",
            f"{package}.gitMinor=35",
            f"{package}.gitTreeState=clean",
            f"{package}.buildDate=2026-04-15T18:01:22Z",
        } <= pairs
    assert len(pairs) == 10


def test_kube_ldflags_skip_variables_a_package_does_not_declare():
    declared = {"k8s.io/component-base/version": {"gitVersion", "gitMajor"}}
    flags = build.kube_ldflags("v1.34.0", "2026-01-01T00:00:00Z", declared)
    assert flags == (
        "-s -w -X k8s.io/component-base/version.gitVersion=v1.34.0 -X k8s.io/component-base/version.gitMajor=1"
    )


def test_kube_ldflags_refuse_a_non_release_version():
    with pytest.raises(KubeBuildError, match="not a release version"):
        build.kube_ldflags("1.35", "2026-01-01T00:00:00Z", {})


def test_version_values_that_would_need_quoting_are_refused():
    with pytest.raises(KubeBuildError, match="quoting"):
        build.x_flags("p", {"v": "a b"}, {"v"})


def test_etcd_ldflags_set_git_sha_only_when_declared():
    assert (
        build.etcd_ldflags("h1:abc=", {"GitSHA", "Version"}) == "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=h1:abc="
    )
    assert build.etcd_ldflags("h1:abc=", {"Version"}) == "-s -w"


def test_package_string_vars_reads_top_level_vars_only():
    source = """package version

var (
\t// gitMajor is numeric
\tgitMajor string // always numeric
\tgitVersion   = "v0.0.0-master+$Format:%H$"
)

var GitSHA = "Not provided"

func init() {
\tlocal := 1
\tAPIVersion = "x"
}
"""
    assert build.package_string_vars(source) == {"gitMajor", "gitVersion", "GitSHA"}


def test_check_go_version_refuses_an_older_toolchain():
    build.check_go_version("go1.26.8", "1.26.0")
    build.check_go_version("go1.27", "1.26.0")
    with pytest.raises(KubeBuildError, match=r"Go 1\.26\.0 or newer.*go1\.25\.9"):
        build.check_go_version("go1.25.9", "1.26.0")


@pytest.mark.parametrize(
    "name, output, expected",
    [
        ("kube-apiserver", "Kubernetes v1.35.4\n", "v1.35.4"),
        ("kube-scheduler", "Kubernetes v1.35.4", "v1.35.4"),
        ("etcd", "etcd Version: 3.6.16\nGit SHA: x\nGo Version: go1.26.8\n", "v3.6.16"),
        ("kube-router", "Running /x/kube-router version v2.1.0, built on 2024-03-29T16:05:10Z, go1.26.8\n", "v2.1.0"),
    ],
)
def test_version_output_of_the_pinned_release_is_accepted(name, output, expected):
    build.check_version_output(name, output, expected)


@pytest.mark.parametrize(
    "name, output, expected",
    [
        ("kube-apiserver", "Kubernetes v0.0.0-master+$Format:%H$\n", "v1.35.4"),
        ("kube-apiserver", "Kubernetes v1.35.40\n", "v1.35.4"),
        ("kube-controller-manager", "", "v1.35.4"),
        ("etcd", "etcd Version: 3.6.1\nGit SHA: x\n", "v3.6.16"),
        ("kube-router", "Running ./kube-router version , built on , go1.26.8\n", "v2.1.0"),
        ("kube-router", "Running ./kube-router version v2.1.01, built on x, go1.26.8\n", "v2.1.0"),
    ],
)
def test_version_output_of_another_release_is_refused(name, output, expected):
    with pytest.raises(KubeBuildError, match=f"built {name} reports .*refusing"):
        build.check_version_output(name, output, expected)


def test_go_env_ignores_goflags_and_toolchain_switching_from_the_environment(monkeypatch):
    monkeypatch.setenv("GOFLAGS", "-mod=vendor -race -tags=foo")
    monkeypatch.setenv("GOTOOLCHAIN", "auto")
    monkeypatch.setenv("GOWORK", "/elsewhere/go.work")
    env = build.go_env()
    assert env["GOFLAGS"] == "-buildvcs=false"
    assert env["GOTOOLCHAIN"] == "local" and env["GOWORK"] == "off"
    assert {"-trimpath", "-mod=readonly", "-buildvcs=false"} <= set(build.GO_BUILD_FLAGS)


# ---------------------------------------------------------------- stamp


def fake_pins(digest: str = "d" * 64) -> build.Pins:
    return build.Pins("v1.35.4", "v3.6.16", "v2.1.0", "1.26.0", digest)


def install(tmp_path: Path, pins: build.Pins) -> Path:
    """An install directory laid out as build() leaves it (small files stand in for binaries)."""
    target = tmp_path / pins.install_name
    (target / "bin").mkdir(parents=True)
    sizes = {}
    for name in build.BINARIES:
        path = target / "bin" / name
        path.write_text(f"#!/bin/sh\necho {name}\n")
        path.chmod(0o755)
        sizes[name] = path.stat().st_size
    (target / build.STAMP_NAME).write_text(json.dumps(build.stamp_record(pins, sizes)))
    return target


def test_stamp_of_the_same_pins_is_complete(tmp_path):
    target = install(tmp_path, fake_pins())
    assert build.is_complete(target, fake_pins())


def test_stamp_of_other_gomod_files_is_not_complete(tmp_path):
    target = install(tmp_path, fake_pins("a" * 64))
    assert not build.is_complete(target, fake_pins("b" * 64))


def test_stamp_of_another_kubernetes_version_is_not_complete(tmp_path):
    target = install(tmp_path, fake_pins())
    other = build.Pins("v1.35.5", "v3.6.16", "v2.1.0", "1.26.0", "d" * 64)
    assert not build.is_complete(target, other)


@pytest.mark.parametrize("damage", ["missing", "truncated", "not-executable", "bad-json", "no-stamp"])
def test_damaged_install_is_not_complete(tmp_path, damage):
    target = install(tmp_path, fake_pins())
    apiserver = target / "bin" / "kube-apiserver"
    if damage == "missing":
        apiserver.unlink()
    elif damage == "truncated":
        apiserver.write_text("#!")
    elif damage == "not-executable":
        apiserver.chmod(0o644)
    elif damage == "bad-json":
        (target / build.STAMP_NAME).write_text("{not json")
    else:
        (target / build.STAMP_NAME).unlink()
    assert not build.is_complete(target, fake_pins())


def test_gomod_digest_changes_with_go_sum(tmp_path):
    mod, summ = tmp_path / "go.mod", tmp_path / "go.sum"
    mod.write_text("module x\n\ngo 1.25.0\n")
    summ.write_text("a v1.0.0 h1:x=\n")
    before = build.gomod_digest([mod, summ])
    summ.write_text("a v1.0.0 h1:y=\n")
    assert build.gomod_digest([mod, summ]) != before


def test_complete_install_is_reused_without_go(tmp_path):
    """ensure_binaries on a complete install: no Go on PATH needed, paths returned."""
    pins = build.read_pins()
    target = install(tmp_path, pins)
    env = dict(os.environ, PATH="/nonexistent")
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from tfmw.devcluster.build import ensure_binaries;"
            f"p = ensure_binaries({str(tmp_path)!r}); print(p['kube-apiserver'])",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(target / "bin" / "kube-apiserver")


# ---------------------------------------------------------------- CLI refusals


def test_cli_refuses_an_unknown_binary_name():
    result = run_cli("--print-path", "kubectl")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "unknown binary 'kubectl'" in result.stderr


def test_cli_without_go_says_what_is_missing(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path / "empty-path"))
    result = run_cli("--dest", str(tmp_path / "kube"), env=env)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "`go` is not on PATH" in result.stderr and f"Go {build.read_pins().go_required}" in result.stderr
    assert not (tmp_path / "kube" / build.read_pins().install_name).exists()


# ---------------------------------------------------------------- the real binaries


@pytest.mark.slow
def test_real_binaries_report_the_pinned_versions():
    """On a fresh machine this builds them (make setup normally already has)."""
    pins = build.read_pins()
    paths = build.ensure_binaries(progress=lambda line: None)
    assert set(paths) == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "kube-proxy",
        "kube-router",
    }
    for name in build.KUBE_COMMANDS:
        out = subprocess.run([str(paths[name]), "--version"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == f"Kubernetes {pins.kubernetes}", out
    out = subprocess.run([str(paths["etcd"]), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and f"etcd Version: {pins.etcd[1:]}" in out.stdout, out
    out = subprocess.run([str(paths["kube-router"]), "--version"], capture_output=True, text=True, timeout=60)
    # kube-router prints its version on stderr
    assert out.returncode == 0 and f"kube-router version {pins.kube_router}, built on 20" in out.stderr, out
    # a second call reuses the install: same files, untouched
    mtimes = {name: path.stat().st_mtime_ns for name, path in paths.items()}
    assert build.ensure_binaries(progress=lambda line: None) == paths
    assert {name: path.stat().st_mtime_ns for name, path in paths.items()} == mtimes


@pytest.mark.slow
def test_cli_print_path_prints_only_the_path():
    result = run_cli("--print-path", "kube-apiserver")
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert result.stdout.count("\n") == 1 and path.name == "kube-apiserver" and path.is_file()


# ---------------------------------------------------------------- one build at a time, published whole


def _pinned(tmp_path: Path) -> tuple[tuple[Path, ...], str]:
    (tmp_path / "go.mod").write_text("module x\n\ngo 1.22\n")
    files = (tmp_path / "go.mod",)
    return files, build.gomod_digest(files)


def test_a_staged_build_is_published_whole_over_the_old_install(tmp_path):
    pinned, digest = _pinned(tmp_path)
    target = tmp_path / "x-1"
    (target / "bin").mkdir(parents=True)
    (target / "bin" / "old").write_text("old")
    with build.staged_install(target, tmp_path / "partial", tmp_path / "stale", pinned, digest, "x") as staged:
        assert staged == tmp_path / "partial" and (staged / "bin").is_dir()
        (staged / "bin" / "new").write_text("new")
    assert sorted(p.name for p in (target / "bin").iterdir()) == ["new"]
    assert not (tmp_path / "partial").exists() and not (tmp_path / "stale").exists()


@pytest.mark.parametrize("how", ["the build failed", "the pinned files changed"])
def test_a_staged_build_that_fails_leaves_the_old_install_and_nothing_else(tmp_path, how):
    pinned, digest = _pinned(tmp_path)
    target = tmp_path / "x-1"
    target.mkdir()
    with pytest.raises(KubeBuildError) as err:
        with build.staged_install(target, tmp_path / "partial", tmp_path / "stale", pinned, digest, "the x go.mod"):
            if how == "the build failed":
                raise KubeBuildError("go build failed")
            pinned[0].write_text("module x\n\ngo 1.23\n")
    expected = "go build failed" if how == "the build failed" else "the x go.mod changed during the build; run it again"
    assert str(err.value) == expected
    assert target.is_dir() and not (tmp_path / "partial").exists()


def test_a_build_runs_once_under_its_lock_after_clearing_a_broken_ones_leftovers(tmp_path):
    work = tmp_path / "work"
    (work / "partial-1").mkdir(parents=True)
    (work / "stale-2").mkdir()
    (work / "keep").mkdir()
    built = []

    def build_it():
        assert sorted(p.name for p in work.iterdir()) == [".lock", "keep"]
        built.append(1)

    build.build_once(lambda: bool(built), work, ("partial-*", "stale-*"), build_it, progress=lambda line: None)
    build.build_once(lambda: bool(built), work, ("partial-*", "stale-*"), build_it, progress=lambda line: None)
    assert built == [1]
