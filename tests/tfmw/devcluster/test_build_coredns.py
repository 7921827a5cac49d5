"""tfmw.devcluster.build_coredns: the pinned wrapper module, main.go's plugin list, the flags,
the stamp, the refusals, and (slow) the real binary."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo import REPO

from tfmw.devcluster import build
from tfmw.devcluster import build_coredns as cd
from tfmw.devcluster.build import KubeBuildError

GOMOD_TEXT = (cd.COREDNS_GOMOD / "go.mod").read_text()
GOSUM_TEXT = (cd.COREDNS_GOMOD / "go.sum").read_text()
MAIN_GO_TEXT = (cd.COREDNS_GOMOD / "main.go").read_text()
# What the cluster's DNS cannot do without (the others are conveniences).
NEEDED_PLUGINS = {"kubernetes", "bind", "errors", "health", "ready", "cache", "forward"}


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfmw.devcluster.build_coredns", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )


# ---------------------------------------------------------------- the wrapper module


def test_go_mod_requires_the_pinned_coredns_release():
    gomod = build.parse_gomod(GOMOD_TEXT)
    pins = cd.read_pins()
    assert pins.coredns == gomod.requires["github.com/coredns/coredns"] == "v1.14.7"
    assert pins.install_name == "coredns-1.14.7"
    assert pins.go_required == gomod.go_version
    assert not gomod.replaces


def test_go_sum_holds_the_checksum_of_the_coredns_source():
    version = build.parse_gomod(GOMOD_TEXT).requires[cd.COREDNS_MODULE]
    assert re.search(rf"^{re.escape(cd.COREDNS_MODULE)} {re.escape(version)} h1:\S+=$", GOSUM_TEXT, re.M)
    # every required module has its go.mod checksum (the module graph is pinned)
    summed = build.gosum_modules(GOSUM_TEXT)
    missing = [(m, v) for m, v in build.parse_gomod(GOMOD_TEXT).requires.items() if (m, v) not in summed]
    assert not missing, missing


def test_main_go_directives_are_exactly_the_imported_plugins():
    imports, directives = cd.main_go_plugins(MAIN_GO_TEXT)
    assert sorted(path.rsplit("/", 1)[-1] for path in imports) == sorted(directives)
    assert len(set(directives)) == len(directives)
    assert NEEDED_PLUGINS <= set(directives)
    assert cd.read_pins().plugins == directives
    # it is the documented shape: Directives set from the list, then coremain.Run()
    assert "dnsserver.Directives = directives" in MAIN_GO_TEXT and "coremain.Run()" in MAIN_GO_TEXT
    assert '"github.com/coredns/coredns/core/plugin"' not in MAIN_GO_TEXT  # that would import them all


def test_main_go_directives_follow_plugin_cfg_order():
    """The order CoreDNS's own plugin.cfg gives (the order a query meets the plugins)."""
    expected = (
        "reload",
        "bind",
        "ready",
        "health",
        "errors",
        "log",
        "loadbalance",
        "cache",
        "kubernetes",
        "loop",
        "forward",
    )
    assert cd.read_pins().plugins == expected


def test_main_go_order_matches_the_pinned_upstream_plugin_cfg():
    """Against the pinned module's plugin.cfg itself, when the module cache holds it."""
    gomodcache = None
    if shutil.which("go"):
        gomodcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    cfg = Path(gomodcache or "/nonexistent") / f"github.com/coredns/coredns@{cd.read_pins().coredns}" / "plugin.cfg"
    if not cfg.is_file():
        pytest.skip(f"{cfg} is not downloaded (the CoreDNS build downloads it)")
    upstream = [
        line.split(":", 1)[0].strip()
        for line in cfg.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    plugins = cd.read_pins().plugins
    assert [name for name in upstream if name in plugins] == list(plugins)


def test_main_go_plugins_reads_imports_and_directives():
    text = """package main

import (
\t"github.com/coredns/coredns/core/dnsserver"
\t_ "github.com/coredns/coredns/plugin/cache"
\t_ "github.com/coredns/coredns/plugin/errors"
)

var directives = []string{
\t"errors",
\t"cache",
}
"""
    assert cd.main_go_plugins(text) == (("cache", "errors"), ("errors", "cache"))


def test_main_go_without_a_directives_list_is_refused():
    with pytest.raises(KubeBuildError, match="no `var directives"):
        cd.main_go_plugins('package main\n\nimport _ "github.com/coredns/coredns/plugin/cache"\n')


@pytest.mark.parametrize(
    "imports, directives, message",
    [
        (("cache", "errors"), ("errors",), "imports plugins"),
        (("cache",), ("cache", "errors"), "imports plugins"),
        (("cache",), ("cache", "cache"), "twice"),
    ],
)
def test_directives_that_are_not_the_imports_are_refused(imports, directives, message):
    with pytest.raises(KubeBuildError, match=message):
        cd.check_plugins(imports, directives)


def test_gomod_digest_covers_main_go(tmp_path):
    files = []
    (tmp_path / "coredns").mkdir()
    for path in cd.pinned_files():
        copy = tmp_path / "coredns" / path.name  # the digest names each file with its directory
        copy.write_bytes(path.read_bytes())
        files.append(copy)
    assert [f.name for f in files] == ["go.mod", "go.sum", "main.go"]
    before = cd.read_pins(tuple(files))
    assert before == cd.read_pins()
    files[2].write_text(MAIN_GO_TEXT.replace("//", "// edited:", 1))
    assert cd.read_pins(tuple(files)).gomod_sha256 != before.gomod_sha256


# ---------------------------------------------------------------- flags and checks


def test_ldflags_set_git_commit_as_coredns_makefile_does():
    flags = cd.coredns_ldflags("h1:abc+/=", {"GitCommit", "CoreVersion"})
    assert flags == "-s -w -X github.com/coredns/coredns/coremain.GitCommit=h1:abc+/="
    assert cd.coredns_ldflags("h1:abc=", set()) == "-s -w"
    with pytest.raises(KubeBuildError, match="quoting"):
        cd.coredns_ldflags("a b", {"GitCommit"})


def test_build_flags_are_the_kubernetes_recipe_plus_coredns_tag():
    assert cd.BUILD_FLAGS[: len(build.GO_BUILD_FLAGS)] == build.GO_BUILD_FLAGS
    assert "-tags=grpcnotrace" in cd.BUILD_FLAGS


def test_version_output_of_the_pinned_release_is_accepted():
    cd.check_version_output("CoreDNS-1.14.7\nlinux/amd64, go1.26.8, h1:x=\n", "v1.14.7")


@pytest.mark.parametrize("output", ["CoreDNS-1.14.70\n", "CoreDNS-1.14.6\nlinux/amd64\n", "", "1.14.7"])
def test_version_output_of_another_release_is_refused(output):
    with pytest.raises(KubeBuildError, match="built coredns reports .*refusing"):
        cd.check_version_output(output, "v1.14.7")


def test_plugins_output_must_list_every_directive():
    cd.check_plugins_output(
        "Server types:\n  dns\n\nOther plugins:\n  bind\n  cache\n  prometheus\n", ["bind", "cache"]
    )
    with pytest.raises(KubeBuildError, match="does not list plugin.s. kubernetes"):
        cd.check_plugins_output("  bind\n  cache\n", ["bind", "cache", "kubernetes"])


# ---------------------------------------------------------------- stamp


def fake_pins(
    digest: str = "d" * 64, version: str = "v1.14.7", plugins: tuple[str, ...] = ("bind", "cache")
) -> cd.CorednsPins:
    return cd.CorednsPins(version, "1.25.0", plugins, digest)


def install(root: Path, pins: cd.CorednsPins) -> Path:
    """An install directory laid out as build() leaves it (a script stands in for coredns)."""
    target = root / pins.install_name
    (target / "bin").mkdir(parents=True)
    path = cd.binary_path(target)
    path.write_text("#!/bin/sh\necho CoreDNS-1.14.7\n")
    path.chmod(0o755)
    (target / build.STAMP_NAME).write_text(json.dumps(cd.stamp_record(pins, path.stat().st_size)))
    return target


def test_stamp_records_pins_plugins_flags_and_size(tmp_path):
    target = install(tmp_path, fake_pins())
    stamp = json.loads((target / build.STAMP_NAME).read_text())
    assert stamp["coredns"] == "v1.14.7" and stamp["plugins"] == ["bind", "cache"]
    assert stamp["gomod_sha256"] == "d" * 64 and stamp["cgo_enabled"] == "0"
    assert stamp["binaries"] == {"coredns": cd.binary_path(target).stat().st_size}
    assert "coremain.GitCommit" in stamp["coredns_ldflags"]


def test_stamp_of_the_same_pins_is_complete(tmp_path):
    assert cd.is_complete(install(tmp_path, fake_pins()), fake_pins())


@pytest.mark.parametrize(
    "other", [fake_pins("e" * 64), fake_pins(version="v1.14.8"), fake_pins(plugins=("cache", "bind"))]
)
def test_stamp_of_other_pins_is_not_complete(tmp_path, other):
    target = install(tmp_path, fake_pins())
    if other.install_name != target.name:
        target.rename(tmp_path / other.install_name)
        target = tmp_path / other.install_name
    assert not cd.is_complete(target, other)


@pytest.mark.parametrize(
    "damage", ["missing", "truncated", "not-executable", "bad-json", "no-stamp", "stamp-without-binaries", "kube-stamp"]
)
def test_damaged_install_is_not_complete(tmp_path, damage):
    target = install(tmp_path, fake_pins())
    binary, stamp = cd.binary_path(target), target / build.STAMP_NAME
    if damage == "missing":
        binary.unlink()
    elif damage == "truncated":
        binary.write_text("#!")
    elif damage == "not-executable":
        binary.chmod(0o644)
    elif damage == "bad-json":
        stamp.write_text("{not json")
    elif damage == "no-stamp":
        stamp.unlink()
    elif damage == "stamp-without-binaries":
        stamp.write_text(json.dumps({"coredns": "v1.14.7"}))
    else:
        stamp.write_text(
            json.dumps(
                build.stamp_record(
                    build.Pins("v1.35.4", "v3.6.16", "v2.1.0", "1.26.0", "d" * 64), {"coredns": binary.stat().st_size}
                )
            )
        )
    assert not cd.is_complete(target, fake_pins())


def test_complete_install_is_reused_without_go(tmp_path):
    """ensure_coredns on a complete install: no Go on PATH needed, the path returned."""
    target = install(tmp_path, cd.read_pins())
    env = dict(os.environ, PATH=str(tmp_path / "empty-path"))
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tfmw.devcluster.build_coredns import ensure_coredns;"
            f"print(ensure_coredns({str(tmp_path)!r}, progress=print))",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{cd.binary_path(target)}\n"


# ---------------------------------------------------------------- CLI refusals


def test_cli_without_go_says_what_is_missing_and_leaves_the_kubernetes_build_alone(tmp_path):
    dest = tmp_path / "kube"
    kube_partial = dest / ".partial-1.35.4-etcd3.6.16-99"  # a Kubernetes build in progress
    kube_partial.mkdir(parents=True)
    env = dict(os.environ, PATH=str(tmp_path / "empty-path"))
    result = run_cli("--dest", str(dest), env=env)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "`go` is not on PATH" in result.stderr and "CoreDNS" in result.stderr
    assert kube_partial.is_dir() and not (dest / ".lock").exists()  # not its lock, not its leftovers
    assert not (dest / cd.read_pins().install_name).exists()


# ---------------------------------------------------------------- the real binary


@pytest.mark.slow
def test_real_coredns_reports_the_pinned_version_and_plugins():
    """On a fresh machine this builds it (~7 min on 2 cores)."""
    pins = cd.read_pins()
    path = cd.ensure_coredns(progress=lambda line: None)
    assert path == build.DEFAULT_DEST / pins.install_name / "bin" / "coredns"
    out = subprocess.run([str(path), "-version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines()[0] == f"CoreDNS-{pins.coredns[1:]}", out
    out = subprocess.run([str(path), "-plugins"], capture_output=True, text=True, timeout=60)
    assert set(pins.plugins) <= {line.strip() for line in out.stdout.splitlines()}, out
    mtime = path.stat().st_mtime_ns
    assert cd.ensure_coredns(progress=lambda line: None) == path and path.stat().st_mtime_ns == mtime
