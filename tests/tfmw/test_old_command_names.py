"""A part's command line is its `cli.py` (`python -m tfmw.<part>`). The modules that held a command
line before say where it went, one line and a non-zero exit, instead of exiting 0 doing nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest
from repo import REPO


@pytest.mark.parametrize(
    ("old", "new", "verb"),
    [
        ("tfmw.localrun.run", "tfmw.localrun", "make local"),
        ("tfmw.image.build", "tfmw.image", "make image"),
        ("tfmw.lint.pipeline", "tfmw.lint", "make lint"),
    ],
)
def test_an_old_command_name_is_refused_naming_the_new_one(old, new, verb):
    proc = subprocess.run([sys.executable, "-m", old], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"python -m {old} is now python -m {new} ({verb})"]
