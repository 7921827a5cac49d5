"""Imports go one way: host tools -> launcher (entrypoint/*.py) -> trainer (entrypoint/training),
never back. The launcher runs the trainer as a child process by its module name; it never
imports it (that would load TensorFlow into the launcher, and tie the two sides' versions)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from repo import REPO

LAUNCHER_MODULES = sorted((REPO / "entrypoint").glob("*.py"))
TRAINER = "entrypoint.training"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, wherever it is (a function's
    body too); `from . import training` counts as importing entrypoint.training."""
    package = "entrypoint"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the package the file is in
                parent = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def test_the_launcher_never_imports_the_trainer():
    assert len(LAUNCHER_MODULES) > 10  # the glob found the launcher's modules
    offending = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in LAUNCHER_MODULES
        for line, name in imported_modules(path)
        if name == TRAINER or name.startswith(TRAINER + ".")
    ]
    assert not offending, "launcher modules import the trainer:\n" + "\n".join(offending)


def test_loading_the_launcher_loads_neither_the_trainer_nor_tensorflow():
    code = (
        "import sys, entrypoint.cli, entrypoint.launcher\n"
        "loaded = [m for m in sys.modules if m == 'tensorflow' or m.startswith('entrypoint.training')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


def test_the_trainer_loads_none_of_the_launchers_lifecycle_machinery():
    # The trainer may use the shared contracts (entrypoint.errors, .cluster, .rundir, .loglines)
    # but not what runs the launcher's side of a run.
    code = (
        "import sys, entrypoint.training.__main__, entrypoint.training.failures, entrypoint.training.config\n"
        "launcher = {'entrypoint.launcher', 'entrypoint.lifecycle', 'entrypoint.status', 'entrypoint.kubeapi',\n"
        "            'entrypoint.tracker', 'entrypoint.supervisor', 'entrypoint.cli', 'entrypoint.restarts',\n"
        "            'entrypoint.attempt', 'entrypoint.startchecks'}\n"
        "assert not launcher & set(sys.modules), launcher & set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)
