"""Training scratch: where it lives, what a killed attempt can leave of it, and its removal.

The one place that names the scratch's paths (docs/contracts.md), for the trainer and the
launcher alike. What is scratch:

- on every worker, in the pod's temporary directory (the /tmp emptyDir, which lives as long
  as the pod, across in-place restarts): `tfmw-scratch/` (`checkpoints/`, `export/`), the one
  fixed place a non-chief worker writes the checkpoint and export copies MultiWorkerMirrored
  needs it to take part in; `tfmw-ckpt-*` and `.model-tmp-*`, the per-save directories older
  builds made there;
- on the chief only, in the run directory (it is the only writer there): `.model-tmp-*`, the
  export's staging before its rename into `model/`; in `checkpoints/`, what an interrupted
  TensorFlow write leaves: `ckpt-<N>_temp/` (the sharded save's staging, which
  MergeV2Checkpoints renames into place; TensorFlow's functional_saver says an orphaned one
  "can be safely removed"), `*.tempstate*` (BundleWriter's write-then-rename,
  tensor_bundle.cc) and `checkpoint.tmp*` (the state file's write-then-rename,
  tf.io.gfile's atomic_write_string_to_file).

A published checkpoint (`ckpt-<N>.index`, `ckpt-<N>.data-*`) and the `checkpoint` state file
are never scratch. Python's `finally` cannot remove scratch after a SIGKILL, an OOM kill or the
watchdog's kill, so the launcher removes it at the start of each attempt, before the command
runs (entrypoint.attempt): no training process of this pod is running then, and a warm
standby (entrypoint.standby) has only imported, written nothing. The launcher never imports
TensorFlow: this module is the standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass

SCRATCH = "tfmw-scratch"  # <tmp>/tfmw-scratch: a non-chief worker's one fixed scratch
CHECKPOINTS = "checkpoints"  # <tmp>/tfmw-scratch/checkpoints: its checkpoint copy, overwritten each save
EXPORT = "export"  # <tmp>/tfmw-scratch/export: its SavedModel copy at the export
EXPORT_STAGING = ".model-tmp-"  # the chief's export staging in <run> (older builds: also in <tmp>)
OLD_CHECKPOINT_SCRATCH = "tfmw-ckpt-"  # older builds: a fresh <tmp>/tfmw-ckpt-* per attempt

_TF_SAVE_STAGING = re.compile(r"ckpt-\d+_temp")  # functional_saver's "<prefix>_temp" (sharded save)


def worker_scratch(tmp: str | None = None) -> str:
    """`<tmp>/tfmw-scratch`: the fixed directory a non-chief worker writes its copies into."""
    return os.path.join(tmp if tmp is not None else tempfile.gettempdir(), SCRATCH)


def scratch_checkpoints(tmp: str | None = None) -> str:
    return os.path.join(worker_scratch(tmp), CHECKPOINTS)


def scratch_export(tmp: str | None = None) -> str:
    return os.path.join(worker_scratch(tmp), EXPORT)


# -- what is scratch: pure rules over a directory's names -----------------------------------------
def is_tmp_scratch(name: str) -> bool:
    """An entry of the pod's temporary directory that is training scratch."""
    return name == SCRATCH or name.startswith((OLD_CHECKPOINT_SCRATCH, EXPORT_STAGING))


def is_run_scratch(name: str) -> bool:
    """An entry of the run directory that is the chief's export staging."""
    return name.startswith(EXPORT_STAGING)


def is_checkpoint_scratch(name: str) -> bool:
    """An entry of <run>/checkpoints an interrupted write left: never a published checkpoint
    (`ckpt-<N>.index`, `ckpt-<N>.data-*`) nor the `checkpoint` state file."""
    return bool(_TF_SAVE_STAGING.fullmatch(name)) or ".tempstate" in name or name.startswith("checkpoint.tmp")


def leftovers(
    tmp: str,
    tmp_names: Iterable[str],
    run_dir: str | None = None,
    run_names: Iterable[str] = (),
    checkpoint_names: Iterable[str] = (),
) -> list[str]:
    """The scratch paths among these listings (of `tmp`, and of the run directory and its
    checkpoints/ when this is the chief: run_dir None otherwise), sorted."""
    found = [os.path.join(tmp, n) for n in tmp_names if is_tmp_scratch(n)]
    if run_dir is not None:
        found += [os.path.join(run_dir, n) for n in run_names if is_run_scratch(n)]
        found += [os.path.join(run_dir, CHECKPOINTS, n) for n in checkpoint_names if is_checkpoint_scratch(n)]
    return sorted(found)


SHOWN = 3  # paths named in the log line (a pod restarted many times by an older build leaked one each)


# -- the removal -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Removed:
    paths: tuple[str, ...]
    bytes: int
    failed: tuple[str, ...] = ()  # "<path>: <error>" of what could not be removed

    def summary(self) -> str:
        """The launcher's one line, or "" when there was nothing to remove."""
        parts = []
        if self.paths:
            shown = ", ".join(self.paths[:SHOWN])
            if len(self.paths) > SHOWN:
                shown += f" and {len(self.paths) - SHOWN} more"
            parts.append(
                f"removed {len(self.paths)} left by an earlier attempt ({self.bytes / (1 << 20):.1f} MiB): {shown}"
            )
        if self.failed:
            parts.append(f"could not remove {'; '.join(self.failed)} (training goes on)")
        return "scratch: " + "; ".join(parts) if parts else ""


def _listing(path: str | None) -> list[str]:
    if path is None:
        return []
    try:
        return os.listdir(path)
    except OSError:  # absent (a first start) or unreadable: nothing of ours to remove there
        return []


def _size(path: str) -> int:
    """Bytes under `path` (lstat: a symlink counts as itself, never followed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not os.path.isdir(path) or os.path.islink(path):
        return st.st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def remove(paths: Iterable[str]) -> Removed:
    removed, failed, size = [], [], 0
    for path in paths:
        bytes_ = _size(path)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as err:
            failed.append(f"{path}: {err.strerror or err}")
            continue
        removed.append(path)
        size += bytes_
    return Removed(tuple(removed), size, tuple(failed))


def clean(tmp: str | None, run_dir: str | None, say: Callable[[str], None]) -> Removed:
    """Remove the scratch in `tmp` (None: this process's temporary directory) and, for the
    chief (`run_dir` given: a mounted run directory), the run directory's; say it in one line
    when there was any."""
    tmp = tmp if tmp is not None else tempfile.gettempdir()
    found = leftovers(
        tmp,
        _listing(tmp),
        run_dir,
        _listing(run_dir),
        _listing(os.path.join(run_dir, CHECKPOINTS) if run_dir is not None else None),
    )
    result = remove(found)
    line = result.summary()
    if line:
        say(line)
    return result
