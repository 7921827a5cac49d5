"""The run directory in shared storage and the files the trainer writes atomically.

Shared storage is a mounted path or an object-store URI (`gs://bucket/prefix`, what the
chart's storage.type=objectStore sets). Local paths use the os module (no TensorFlow
import: "already completed" answers in well under a second); a URI goes through
tf.io.gfile, which TensorFlow's own checkpoints and summaries use too.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RunDir:
    root: str

    @classmethod
    def of(cls, shared_dir: str, run_id: str) -> "RunDir":
        return cls(os.path.join(shared_dir, run_id))

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.root, "checkpoints")

    @property
    def tensorboard(self) -> str:
        return os.path.join(self.root, "tensorboard")

    @property
    def model(self) -> str:
        return os.path.join(self.root, "model")

    @property
    def completed(self) -> str:
        return os.path.join(self.root, "COMPLETED")


def is_uri(path: str) -> bool:
    return "://" in path


def _gfile():
    import tensorflow as tf  # only for object-store URIs
    return tf.io.gfile


def makedirs(path: str) -> None:
    if is_uri(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def write_atomic(path: str, text: str) -> None:
    """Write text to path so a reader sees either the old file or the whole new one."""
    if is_uri(path):
        # Object stores publish an object whole on close; write-then-rename keeps the same
        # "old or whole new" promise on file systems behind a URI that do not.
        gfile = _gfile()
        tmp = f"{path}.tmp-{os.getpid()}"
        with gfile.GFile(tmp, "w") as f:
            f.write(text)
        gfile.rename(tmp, path, overwrite=True)
        return
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_completed(run: RunDir) -> dict | None:
    if is_uri(run.completed):
        gfile = _gfile()
        if not gfile.exists(run.completed):
            return None
        try:
            with gfile.GFile(run.completed, "r") as f:
                return json.loads(f.read())
        except Exception:  # noqa: BLE001 - any read failure of a present marker still means "done"
            return {}
    try:
        with open(run.completed, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError):
        return {}  # present but unreadable still means "done": never retrain a finished run


def write_completed(run: RunDir, record: dict) -> None:
    """The COMPLETED marker: strict JSON (NaN or infinity raise ValueError; unknown values are null)."""
    write_atomic(run.completed, json.dumps(record, indent=2, sort_keys=True, allow_nan=False) + "\n")


class Heartbeat:
    """Rewrite TFMW_HEARTBEAT_FILE with "<step> <phase>", atomically, at most once per interval
    (a phase change is always written). The launcher's hang watchdog (entrypoint/hangwatch.py)
    times only "train" beats by the observed step time; any other phase ("start": restore and
    the first, traced step; "checkpoint"; "finish": export) gets the static timeout."""

    def __init__(self, path: str | None, interval: float = 1.0, clock=time.monotonic):
        self.path = path
        self.interval = interval
        self.clock = clock
        self._last = None
        self._phase = None

    def beat(self, step: int, force: bool = False, phase: str = "train") -> bool:
        if not self.path:
            return False
        now = self.clock()
        if not force and phase == self._phase and self._last is not None and now - self._last < self.interval:
            return False
        write_atomic(self.path, f"{step} {phase}\n")
        self._last, self._phase = now, phase
        return True
