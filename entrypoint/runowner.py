"""One owner per run directory: `<run>/OWNER` names the release that trains the run there.

Without it, two releases given one `<shared>/<runId>` (the same release name in two namespaces
on one ReadWriteMany export, or a `training.runId` reused) would rewrite each other's state
file, retire each other's checkpoints, restore each other's weights, and the one that
finishes second would read the other's COMPLETED and "succeed" untrained.

The owner is the release's StatefulSet by namespace and name (TFMW_NAMESPACE,
TFMW_STATEFULSET): unique in a cluster while it exists, and the same again when the same
release is deployed again (an upgrade, or an uninstall and install over a kept claim), which
resumes its own run on purpose. A StatefulSet's UID would call that reinstall a stranger.

The policy is pure (`decide`); the launcher reads the file (`read_owner`) before it looks at
the COMPLETED marker, and the chief's launcher writes it (`write_owner`, atomically) before any
training starts; the other workers only check. A pod that knows no release (a platform's
TF_CONFIG, an Indexed Job without TFMW_STATEFULSET) or a run directory behind an object-store
URI (the launcher reads mounted paths only) is not checked.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from .rundir import write_atomic

ADOPT_VALUE = "training.adoptRunDir"
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG)


@dataclass(frozen=True)
class Owner:
    namespace: str
    statefulset: str

    def __str__(self) -> str:
        return f"statefulset/{self.statefulset} in namespace {self.namespace}"


class Recorded(Enum):
    """What `<run>/OWNER` held when read, besides an owner."""

    NONE = "none"  # no file
    UNREADABLE = "unreadable"  # an I/O error, or bytes that name no owner


class Action(Enum):
    CLAIM = "claim"  # a new run directory: write OWNER (the chief)
    KEEP = "keep"  # this release owns it: nothing to write
    ADOPT = "adopt"  # take it over: an ownerless run from before owners, or adoptRunDir (the chief writes)
    REFUSE = "refuse"  # another release's run: exit 2, never train here


@dataclass(frozen=True)
class Decision:
    action: Action
    say: str = ""  # one log line ("" when nothing is worth saying)


def decide(
    recorded: Owner | Recorded, me: Owner, *, adopt: bool, run_exists: bool, path: str, detail: str = ""
) -> Decision:
    """What a start of `me` does with the run directory whose OWNER is `recorded` (pure).
    `run_exists`: the run directory holds anything but OWNER (an ownerless run from before
    owners were recorded is adopted, said once); `detail`: why OWNER was unreadable."""
    if recorded == me:
        return Decision(Action.KEEP)
    if recorded is Recorded.NONE:
        if run_exists:
            return Decision(Action.ADOPT, f"run directory {os.path.dirname(path)} has no OWNER: adopted by {me}")
        return Decision(Action.CLAIM)
    theirs = f"cannot tell its owner ({detail})" if recorded is Recorded.UNREADABLE else f"it belongs to {recorded}"
    where = os.path.dirname(path)
    if adopt:
        return Decision(Action.ADOPT, f"run directory {where}: {theirs}; taken over by {me} ({ADOPT_VALUE}=true)")
    return Decision(
        Action.REFUSE,
        f"run directory {where} is not this release's: {theirs}, this is {me}; "
        f"set a distinct training.runId for this release, or {ADOPT_VALUE}=true to take that run over on purpose",
    )


def owner_path(run_dir: Path) -> Path:
    return run_dir / "OWNER"


def read_owner(path: Path) -> tuple[Owner | Recorded, str]:
    """(what OWNER holds, why it is unreadable or ''). Absent: Recorded.NONE."""
    try:
        data = path.read_bytes()
    except OSError as err:
        if err.errno in _ABSENT:
            return Recorded.NONE, ""
        return Recorded.UNREADABLE, f"{path}: {type(err).__name__}: {err.strerror or err}"
    try:
        record = json.loads(data.decode("utf-8"))
        return Owner(str(record["namespace"]), str(record["statefulset"])), ""
    except (ValueError, TypeError, KeyError):
        return Recorded.UNREADABLE, f"{path} names no namespace and statefulset"


def run_has_content(run_dir: Path) -> bool:
    """Anything in the run directory besides OWNER (a run from before owners were recorded)."""
    try:
        return any(entry.name != "OWNER" for entry in os.scandir(run_dir))
    except OSError:
        return False


def write_owner(path: Path, me: Owner, pod: str | None, now: float | None = None) -> None:
    record = {
        "namespace": me.namespace,
        "statefulset": me.statefulset,
        "claimedBy": pod or "",
        "claimedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
    }
    write_atomic(str(path), json.dumps(record, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Ownership:
    """One start's look at OWNER: what to do, as whom, where."""

    decision: Decision
    me: Owner
    path: Path

    @property
    def refusal(self) -> str | None:
        return self.decision.say if self.decision.action is Action.REFUSE else None


def look(run_dir: Path | None, namespace: str | None, statefulset: str | None, adopt: bool) -> Ownership | None:
    """Read OWNER and decide; None where no owner is kept (no mounted run directory, no release)."""
    if run_dir is None or not namespace or not statefulset:
        return None
    me, path = Owner(namespace, statefulset), owner_path(run_dir)
    recorded, detail = read_owner(path)
    decision = decide(recorded, me, adopt=adopt, run_exists=run_has_content(run_dir), path=str(path), detail=detail)
    return Ownership(decision, me, path)


def settle(ownership: Ownership | None, pod: str | None, say) -> None:
    """The chief, before any training starts: write OWNER when claiming or adopting, and say
    an adoption once. A failed write is said and training goes on: the next start writes it."""
    if ownership is None or ownership.decision.action not in (Action.CLAIM, Action.ADOPT):
        return
    try:
        write_owner(ownership.path, ownership.me, pod)
    except OSError as err:
        say(f"cannot write {ownership.path} ({type(err).__name__}: {err.strerror or err}); training goes on")
        return
    if ownership.decision.say:
        say(ownership.decision.say)
