"""The run directory in shared storage and the files in it, written atomically: the one
place that knows their paths and formats (docs/contracts.md), for the launcher and the trainer.

- `COMPLETED`: the JSON record that says "never train this run again", written by the chief's
  trainer after the export, or by the chief's launcher for a user command (write_completed),
  read by both through one function (read_marker: read_completed, marker_exists): absent is
  "no", present is "done" whatever its bytes, and an I/O error is neither (MarkerUnreadable,
  the caller retries); the launcher also shows its steps, loss and model (completed_fields);
- the heartbeat file (TFMW_HEARTBEAT_FILE, outside the run directory): `<step> <phase>`,
  written by the trainer (Heartbeat), read by the launcher's hang watchdog (read_beat).

Shared storage is a mounted path or an object-store URI (`gs://bucket/prefix`, what the
chart's storage.type=objectStore sets). Local paths use the os module (no TensorFlow
import: "already completed" answers in well under a second); a URI goes through
tf.io.gfile, which TensorFlow's own checkpoints and summaries use too. The launcher
imports this module, never anything under entrypoint.training (imports go one way).
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunDir:
    root: str

    @classmethod
    def of(cls, shared_dir: str, run_id: str) -> RunDir:
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

    @property
    def eval_record(self) -> str:
        """The evaluator's latest result (entrypoint.training.sidecar)."""
        return os.path.join(self.root, "eval.json")

    @property
    def logs(self) -> str:
        """The pods' kept logs (entrypoint.podlog)."""
        return os.path.join(self.root, "logs")

    def pod_log(self, pod_name: str) -> str:
        return os.path.join(self.logs, f"{pod_name}.log")

    @classmethod
    def on_mount(cls, shared_dir: str | None, run_id: str | None) -> RunDir | None:
        """The run directory where the launcher (no TensorFlow) can read it: on a mounted path;
        None for an object-store URI (the trainer's business, through tf.io.gfile) or none."""
        if not shared_dir or not run_id or is_uri(shared_dir):
            return None
        return cls.of(shared_dir, run_id)


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


# The COMPLETED record's keys, one spelling (camelCase, as the status ConfigMap's): the
# trainer's record, and the launcher's (`by: launcher`, the command) for a user command.
COMPLETED_KEYS = (
    "runId",
    "steps",
    "finalLoss",
    "model",
    "seconds",
    "examplesPerSec",
    "weightsDigest",
    "workers",
    "by",
    "command",
    "finishedAt",
)
# Launchers before issue 13 wrote `finished_at`: a marker they left on a volume is read with
# today's key, so a run recorded by an older version reads whole (and still never retrains).
_OLDER_SPELLINGS = {"finished_at": "finishedAt"}


def write_completed(run: RunDir, record: dict, now: float | None = None) -> None:
    """Write the COMPLETED marker: `record` (keys from COMPLETED_KEYS) stamped with
    `finishedAt` (UTC, `now` or the clock), as strict JSON (NaN or infinity raise
    ValueError; unknown values are null). Another key is a programming error: ValueError."""
    unknown = sorted(set(record) - set(COMPLETED_KEYS))
    if unknown:
        raise ValueError(f"COMPLETED: unknown keys {unknown}; the record's keys are {', '.join(COMPLETED_KEYS)}")
    stamped = {
        **record,
        "finishedAt": record.get("finishedAt") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
    }
    write_atomic(run.completed, json.dumps(stamped, indent=2, sort_keys=True, allow_nan=False) + "\n")


class MarkerUnreadable(Exception):
    """The COMPLETED marker's presence or bytes cannot be read (EACCES, EIO, ESTALE on the
    shared storage, a directory in its place): the run may have finished, or not. Never "done"
    (a storage hiccup would end a run Succeeded with no model), never "not done" (a finished
    run would train again): the caller retries, and fails closed when it never clears."""


# Errors that mean "no marker there": the file, or a directory on its path, is absent.
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG)


def read_marker(path: str):
    """The marker's JSON, the one read of COMPLETED for the trainer and the launcher alike.
    None: absent. Present and readable: its JSON, or {} when its bytes are no JSON (the
    operator may create it by hand: any content, even none, means "done"; so do bytes that are
    not UTF-8, since what was read is a marker that is there). An I/O error raises
    MarkerUnreadable with the cause: the marker is there or not, nobody can tell."""
    try:
        data = _read_bytes(path)
    except MarkerUnreadable:
        raise
    except OSError as err:
        if err.errno in _ABSENT:
            return None
        cause = f"{type(err).__name__}: {err.strerror or err}"
        raise MarkerUnreadable(
            f"cannot read {path} ({cause}); fix the shared storage (TFMW_SHARED_DIR, storage.*)"
        ) from None
    if data is None:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError too: a marker that is there still means done
        return {}


def _read_bytes(path: str) -> bytes | None:
    if not is_uri(path):
        with open(path, "rb") as f:
            return f.read()
    gfile = _gfile()
    try:
        if not gfile.exists(path):
            return None
        with gfile.GFile(path, "rb") as f:
            return f.read()
    except Exception as err:  # tf.errors.OpError: NotFoundError is absent, the rest unknown
        if type(err).__name__ == "NotFoundError":
            return None
        raise MarkerUnreadable(
            f"cannot read {path} ({type(err).__name__}: {' '.join(str(err).split())[:200]}); "
            "fix the shared storage (TFMW_SHARED_DIR, storage.*)"
        ) from None


def read_completed(run: RunDir) -> dict | None:
    """The COMPLETED record (read_marker): None when there is none, {} for a marker that is
    not a JSON object; older key spellings read as today's. Raises MarkerUnreadable."""
    record = read_marker(run.completed)
    if record is None:
        return None
    if not isinstance(record, dict):
        return {}
    return {_OLDER_SPELLINGS.get(key, key): value for key, value in record.items()}


# -- the launcher's reads of the marker (a mounted path: no TensorFlow) -----------------


def completed_marker(run_dir: Path | None) -> Path | None:
    return Path(RunDir(str(run_dir)).completed) if run_dir else None


def marker_exists(marker: Path | None) -> bool:
    """Is the run's COMPLETED marker there (read_marker)? Raises MarkerUnreadable when that
    cannot be told: training a run that may have finished would train it twice."""
    return marker is not None and read_marker(str(marker)) is not None


def marker_exists_retrying(
    marker: Path | None,
    seconds: float,
    wait: Callable[[float], bool],
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """marker_exists, retried with back-off for `seconds` while the marker is unreadable (a
    storage hiccup: NFS EIO or ESTALE clears), the cause said once. Raises the last
    MarkerUnreadable when it never clears, or when `wait` returns True (stopped)."""
    started, delay, said = clock(), 0.5, False
    while True:
        try:
            return marker_exists(marker)
        except MarkerUnreadable as err:
            left = seconds - (clock() - started)
            if left <= 0:
                raise
            if not said:
                say(f"{err}; retrying for up to {seconds:g}s (a run that may have finished never trains again)")
                said = True
            if wait(min(delay, left)):
                raise
            delay = min(delay * 2, 10.0)


# The COMPLETED record's keys the `tfmw completed` line and the Succeeded message show, by
# the names the log lines use for them (`tfmw done`'s).
_COMPLETED_SHOWN = (("steps", "steps"), ("finalLoss", "final_loss"), ("model", "model"))


def completed_fields(run_dir: Path | None) -> dict[str, str]:
    """{steps, final_loss, model} from the run's COMPLETED record, those it has ({} if none)."""
    try:
        record = read_completed(RunDir(str(run_dir))) if run_dir else None
    except MarkerUnreadable:  # only shown: whether it is there was asked before
        record = None
    return {name: str(record[key]) for key, name in _COMPLETED_SHOWN if record and key in record}


def completed_detail(run_dir: Path | None) -> str:
    """' steps=315 final_loss=0.12 model=/...' from the COMPLETED record ('' if none)."""
    return "".join(f" {name}={value}" for name, value in completed_fields(run_dir).items())


# -- the heartbeat file ------------------------------------------------------------------


def format_beat(step: int, phase: str) -> str:
    return f"{step} {phase}\n"


def parse_beat(text: str) -> tuple[int, str | None] | None:
    """'<step> <phase>' (the built-in trainer) or '<step>' (an older trainer, a user command
    that writes the file: no phase, so never timed adaptively); None when unreadable."""
    parts = text.split()
    if not parts:
        return None
    try:
        step = int(parts[0])
    except ValueError:
        return None
    return step, (parts[1] if len(parts) > 1 else None)


def read_beat(path) -> tuple[int, str | None] | None:
    """(step, phase) from the heartbeat file; None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_beat(f.read())
    except (OSError, ValueError):
        return None


class Heartbeat:
    """Rewrite TFMW_HEARTBEAT_FILE with "<step> <phase>", atomically, at most once per interval
    (a phase change is always written). The launcher's hang watchdog (entrypoint/hangwatch.py)
    times only "train" beats by the observed step time; any other phase ("start": restore and
    the first, traced step; "checkpoint"; "finish": export) gets the static timeout."""

    def __init__(self, path: str | None, interval: float = 0.5, clock=time.monotonic):
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
        write_atomic(self.path, format_beat(step, phase))
        self._last, self._phase = now, phase
        return True
