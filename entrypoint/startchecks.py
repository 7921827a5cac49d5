"""The checks before training starts: can the command start, can the run be recorded.

Each answers with one line naming the problem and its fix (None: no known problem), checked
before training and the peer wait (entrypoint.launcher): a missing program or a shared volume
that can never hold the COMPLETED marker is a values problem that no retry fixes.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path


def command_problem(command: Sequence[str], env: dict, cwd: str | None = None) -> str | None:
    """Why `command` cannot be started, as one line naming it and the fix; None if it can.

    Checked before training (and the peer wait): a missing or non-executable program is a
    values problem that no retry fixes. The lookup is execvpe's: a name without "/" is
    searched on the child's PATH (`env`), as subprocess does."""
    if not command or not command[0]:
        return "training.command is empty: give the program to run (default: python -m entrypoint.training)"
    program = command[0]
    fix = "fix training.command (an absolute path in the image, or a program on the container's PATH)"
    if "/" in program:
        path = program if os.path.isabs(program) else os.path.join(cwd or os.getcwd(), program)
        if not os.path.exists(path):
            return f"training.command: {program!r} does not exist; {fix}"
        if os.path.isdir(path):
            return f"training.command: {program!r} is a directory, not a program; {fix}"
        if not os.access(path, os.X_OK):
            return (
                f"training.command: {program!r} is not executable; make it executable (chmod +x) or "
                "run it through its interpreter, e.g. [python, script.py]"
            )
        return None
    search = os.get_exec_path(env)
    for directory in search:
        candidate = os.path.join(directory, program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return None
    return f"training.command: {program!r} is not on PATH={os.pathsep.join(search)!r}; {fix}"


def start_problem(command: Sequence[str], err: OSError) -> str:
    """One line for a training command the kernel refused to start (ENOEXEC: a script
    without a #! line; EACCES; ENOENT: a #! interpreter that does not exist)."""
    program = command[0] if command else ""
    hint = {
        errno.ENOEXEC: "a script needs a #! line, or run it through its interpreter",
        errno.ENOENT: "the program, or the interpreter its #! line names, does not exist",
    }.get(err.errno, "check that it is an executable file")
    return f"training.command: cannot start {program!r} ({err.strerror or err}); {hint}; fix training.command"


def shared_dir_problem(run_dir: Path | None) -> str | None:
    """Why the chief could not write the run's COMPLETED marker (nor checkpoints) under
    `run_dir`, known before training: the nearest existing ancestor is not a directory, or is
    not writable (access(2) reports a read-only mount as EROFS, even to root). None: no
    known problem (a write can still fail later: the end retries it, CompletionNotRecorded).
    Checked up front so a run that could never be recorded as complete is not trained first."""
    if run_dir is None:
        return None
    path = Path(run_dir)
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    where = f"TFMW_SHARED_DIR: cannot record the run under {run_dir}"
    if not os.path.isdir(path):
        return f"{where}: {path} is not a directory; fix storage.* (the shared volume's mount path)"
    if not os.access(path, os.W_OK | os.X_OK):
        read_only = False
        try:
            read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        except OSError:
            pass
        why = "is on a read-only file system" if read_only else "is not writable by this user"
        return f"{where}: {path} {why}; fix storage.* (a writable, shared volume)"
    return None
