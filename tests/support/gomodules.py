"""Files of a pinned upstream Go module, for tests that read what upstream ships (its examples).

    module_dir(WRAPPER, "github.com/kubeflow/training-operator") -> the module's source tree

The version is the one the wrapper module under scripts/tfmw/devcluster/gomod/ pins, and `go mod
download` runs inside that wrapper, so go checks the zip against the wrapper's go.sum (a file that
changed upstream is refused, never read). Cached modules cost no network; a fresh machine (CI)
downloads the zip once from the module proxy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from repo import REPO

GOMOD = REPO / "scripts" / "tfmw" / "devcluster" / "gomod"


def pinned_version(wrapper: Path, module: str) -> str:
    """The version of `module` the wrapper's go.mod requires."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", (wrapper / "go.mod").read_text(), re.M)
    if not found:
        raise AssertionError(f"{wrapper / 'go.mod'} requires no {module}")
    return found.group(1)


def module_dir(wrapper: Path, module: str) -> Path:
    """The source tree of the pinned `module`, downloaded (and checked against go.sum) when not cached."""
    go = shutil.which("go")
    if not go:
        raise AssertionError(f"`go` is not on PATH: reading {module}'s files needs it (https://go.dev/dl/)")
    version = pinned_version(wrapper, module)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off", "GOTOOLCHAIN": "local"}
    proc = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=wrapper,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    info = json.loads(proc.stdout) if proc.stdout.strip() else {}
    if proc.returncode != 0 or info.get("Error") or not info.get("Dir"):
        # go's first line names the failure (a checksum mismatch against go.sum, no network)
        reason = info.get("Error") or (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise AssertionError(f"go mod download {module}@{version} (in {wrapper}) failed: {reason}")
    return Path(info["Dir"])
