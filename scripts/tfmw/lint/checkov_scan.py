"""Scan rendered Kubernetes manifests with checkov, offline, from its own venv.

checkov pins many dependencies that clash with the project's venv, so it lives in
`.tools/checkov-venv` (installed on first use, idempotent). The scan runs with
`--skip-download --framework kubernetes`: no network, no platform API key.

A check the chart deliberately does not meet is skipped in the template itself with an
annotation `checkov.io/skip<N>: CKV_K8S_xx=<reason>` (listed in docs/security.md), so
this script never carries a skip list of its own.

Usage:
    python -m tfmw.lint.checkov_scan FILE...        # exit 0: no failed check; 1: failures; 2: bad use
    python -m tfmw.lint.checkov_scan --install      # only make sure checkov is installed
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfmw import REPO

VENV = REPO / ".tools" / "checkov-venv"
CHECKOV_REQUIREMENT = "checkov==3.3.30"
# A marker in the venv records which requirement it holds: a changed pin reinstalls, an
# unchanged one costs nothing.


class CheckovError(Exception):
    """A one-line reason checkov could not be installed or run."""


@dataclass(frozen=True)
class FailedCheck:
    check_id: str
    check_name: str
    resource: str
    file: str

    def __str__(self) -> str:
        return f"{self.check_id} {self.resource} ({self.file}): {self.check_name}"


def checkov_executable(venv: Path = VENV) -> Path:
    return venv / "bin" / "checkov"


def ensure_checkov(venv: Path = VENV, requirement: str = CHECKOV_REQUIREMENT) -> Path:
    """Install `requirement` into `venv` unless it is already there; return the executable."""
    exe = checkov_executable(venv)
    if _installed(venv, requirement):
        return exe
    venv.parent.mkdir(parents=True, exist_ok=True)
    # Several test runs may start at once on a fresh machine: one installs, the others wait.
    with open(venv.parent / ".checkov-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed(venv, requirement):
            _install(venv, requirement)
    return exe


def _installed(venv: Path, requirement: str) -> bool:
    stamp = venv / ".installed-requirement"
    return checkov_executable(venv).exists() and stamp.exists() and stamp.read_text().strip() == requirement


def _install(venv: Path, requirement: str) -> None:
    stamp = venv / ".installed-requirement"
    exe = checkov_executable(venv)
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)], "create the checkov venv")
    _run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement],
        f"pip install {requirement}",
    )
    if not exe.exists():
        raise CheckovError(f"{requirement} installed but {exe} is missing")
    stamp.write_text(requirement + "\n")


def _run(cmd: Sequence[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CheckovError(f"could not {what}: {last}")


def parse_report(stdout: str) -> list[FailedCheck]:
    """Failed checks from checkov's `-o json` output (one report or a list of them)."""
    text = stdout.strip()
    if not text:
        return []
    data = json.loads(text)
    reports = data if isinstance(data, list) else [data]
    failed: list[FailedCheck] = []
    for report in reports:
        # An empty scan is reported as a bare summary without "results".
        for check in (report.get("results") or {}).get("failed_checks", []):
            failed.append(
                FailedCheck(
                    check_id=check.get("check_id", "?"),
                    check_name=check.get("check_name", ""),
                    resource=check.get("resource", "?"),
                    file=check.get("file_path", "?"),
                )
            )
    return failed


def scan(manifest_paths: Iterable[str | os.PathLike]) -> list[FailedCheck]:
    """Run checkov over the given manifest files; return every failed check (empty: clean)."""
    paths = [Path(p) for p in manifest_paths]
    if not paths:
        raise CheckovError("no manifest file given")
    for path in paths:
        if not path.is_file():
            raise CheckovError(f"no such manifest file: {path}")
    exe = ensure_checkov()
    cmd = [str(exe), "--skip-download", "--framework", "kubernetes", "--quiet", "--compact", "-o", "json"]
    for path in paths:
        cmd += ["-f", str(path)]
    env = dict(os.environ, BC_SKIP_MAPPING="TRUE", CHECKOV_RUN_SCA_PACKAGE_SCAN_V2="false")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    # checkov exits 1 when a check failed; anything else non-zero is a crash.
    if proc.returncode not in (0, 1):
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CheckovError(f"checkov exited {proc.returncode}: {last}")
    try:
        failed = parse_report(proc.stdout)
    except json.JSONDecodeError as exc:
        raise CheckovError(f"checkov printed no JSON report ({exc})") from None
    if proc.returncode == 1 and not failed:
        raise CheckovError("checkov reported failure but listed no failed check")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfmw.lint.checkov_scan", description="checkov over rendered manifests, offline"
    )
    parser.add_argument("files", nargs="*", help="rendered manifest YAML files")
    parser.add_argument("--install", action="store_true", help="only install checkov")
    args = parser.parse_args(argv)
    try:
        if args.install:
            print(f"checkov ready: {ensure_checkov()}")
            return 0
        if not args.files:
            print("error: give at least one manifest file (or --install)", file=sys.stderr)
            return 2
        failed = scan(args.files)
    except CheckovError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for check in failed:
        print(check)
    print(f"checkov: {len(failed)} failed check(s) in {len(args.files)} file(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
