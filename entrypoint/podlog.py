"""A worker's log kept in the run's directory, so a finished run's logs outlive its pods.

The launcher tees everything it prints (its own lines and the training command's output) to
`<run>/logs/<pod>.log` on shared storage, size-bounded: when the file passes half the limit it
becomes `<pod>.log.1` (replacing the older one) and a new file starts, so at most `limit` bytes
are kept per pod, the newest included. After scale-to-zero the pods and their `kubectl logs`
are gone; `make logs` then reads these files (`python -m entrypoint logs <run dir>` in a
short-lived reader pod, docs/operations.md). Writing never stops training: an error is said
once and the copy stops.

Standard library only (it runs in the image, in the launcher and the reader pod).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from .rundir import RunDir

_POD = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def log_path(run_dir: Path, pod_name: str) -> Path:
    return Path(RunDir(str(run_dir)).pod_log(pod_name))


class PodLog:
    """Appends lines to one pod's kept log (thread-safe), rotating at limit / 2."""

    def __init__(self, path: Path, limit_bytes: int, say: Callable[[str], None]):
        self.path = Path(path)
        self.half = max(limit_bytes // 2, 1)
        self.say = say
        self._lock = threading.Lock()
        self._file = None
        self._size = 0
        self._broken = False

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab", buffering=0)  # kept open, closed in close()
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        """One or more whole lines, as bytes."""
        with self._lock:
            if self._broken:
                return
            try:
                if self._file is None:
                    self._open()
                if self._size + len(data) > self.half and self._size > 0:
                    self._file.close()
                    os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                    self._open()
                self._file.write(data)
                self._size += len(data)
            except OSError as err:
                self._broken = True
                self.say(
                    f"logs: cannot keep this pod's log in {self.path} ({err.strerror or err}); "
                    "kubectl logs still has it while the pod runs"
                )

    def line(self, text: str) -> None:
        self.write(text.encode(errors="replace") + b"\n")

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def kept(run_dir: Path) -> Iterator[tuple[str, Path]]:
    """(pod, file) of every kept log in the run directory, pods in name order, each pod's
    rotated (older) file first."""
    folder = Path(RunDir(str(run_dir)).logs)
    pods = sorted(p.name[:-4] for p in folder.glob("*.log") if _POD.fullmatch(p.name[:-4]))
    for pod in pods:
        older = folder / f"{pod}.log.1"
        if older.is_file():
            yield pod, older
        yield pod, folder / f"{pod}.log"


def main(argv: list[str]) -> int:
    """`python -m entrypoint logs <run dir>`: every kept line, prefixed `[pod/<name>] `."""
    if len(argv) != 1:
        print("usage: python -m entrypoint logs <run dir>", file=sys.stderr)
        return 2
    found = 0
    for pod, path in kept(Path(argv[0])):
        found += 1
        with open(path, "rb") as f:
            for raw in f:
                sys.stdout.write(f"[pod/{pod}] " + raw.decode(errors="replace").rstrip("\n") + "\n")
    sys.stdout.flush()
    if not found:
        print(f"no kept logs in {RunDir(argv[0]).logs}", file=sys.stderr)
        return 3
    return 0
