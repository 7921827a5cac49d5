"""Elastic training, the launcher's side: the epoch files in the run directory, each launcher's
liveness, the decider, and the wait of a worker outside the current epoch (docs/lifecycle.md,
"Elastic epochs"; the rule itself is entrypoint.membership's, pure).

Why the run directory: it is the one place every mode shares (make local has no API server)
and already the run's one source of truth (COMPLETED, checkpoints). Files under
`<run>/membership/`:
- `epoch-<n>.json`: epoch n (members in rank order, the configured N, why, who). Claimed by a
  hard link of a complete file, which fails if the name exists: exactly one launcher claims
  each number (the fencing token), and a reader never sees half a file.
- `alive-<ordinal>.json`: a counter each launcher rewrites every ALIVE_SECONDS while its run is
  open, with the epoch it is in. A launcher is alive while its counter changes, as this launcher's
  own monotonic clock sees it: no two machines' clocks are compared.

The decider is the lowest live ordinal (member or not). Each launcher's thread beats, reads the
others and, when it is the decider, applies membership.decide and claims the next epoch. A
launcher whose group formed at an older epoch stops its training at the next checkpoint
(supervisor.request_regroup), as for a resize; one outside the newest epoch waits in `join`.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .lifecycle import Reason, recorded_final
from .membership import Change, Epoch, Kind, decide, describe
from .runcontext import EndedElsewhere, Failure, Hooks, Run, Stopped
from .rundir import MarkerUnreadable, marker_exists

ALIVE_SECONDS = 2.0  # each launcher rewrites its alive file this often
STALE_SECONDS = 6.0  # an alive file unchanged this long: that launcher is not running
EVENTS = {
    Kind.SHRINK: "ElasticShrink",
    Kind.GROW: "ElasticGrow",
    Kind.REFORM: "ElasticReform",
    Kind.RESIZE: "ElasticResize",
}


class EpochFiles:
    """`<run>/membership/`: the epochs and the launchers' alive files."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir / "membership"

    def newest(self, replicas: int) -> Epoch:
        """The newest epoch written, or the implicit first one (every configured worker)."""
        numbers = []
        try:
            for name in os.listdir(self.dir):
                if name.startswith("epoch-") and name.endswith(".json") and name[6:-5].isdigit():
                    numbers.append(int(name[6:-5]))
        except FileNotFoundError:
            pass
        for number in sorted(numbers, reverse=True):
            try:
                return Epoch.from_json(json.loads((self.dir / f"epoch-{number}.json").read_text()))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable: an older one stands (a claim is whole or absent, so rare)
        return Epoch.first(replicas)

    def claim(self, epoch: Epoch) -> bool:
        """Write epoch `epoch.number` unless someone did: whether this launcher claimed it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".claim-", dir=self.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(epoch.to_json(), f)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, self.dir / f"epoch-{epoch.number}.json")
            except FileExistsError:
                return False
            except OSError:  # no hard links (some SMB and FUSE file systems): exclusive create
                return self._claim_exclusive(epoch)
            return True
        finally:
            os.unlink(tmp)

    def _claim_exclusive(self, epoch: Epoch) -> bool:
        """O_CREAT|O_EXCL, then the content: a reader that meets the file half-written skips it
        (newest() falls back to the epoch before) until it is whole."""
        try:
            fd = os.open(self.dir / f"epoch-{epoch.number}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(epoch.to_json(), f)
            f.flush()
            os.fsync(f.fileno())
        return True

    def beat(self, ordinal: int, counter: int, epoch: int, member: bool) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"alive-{ordinal}.json"
        fd, tmp = tempfile.mkstemp(prefix=".alive-", dir=self.dir)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"beat": counter, "epoch": epoch, "member": member}, f)
        os.replace(tmp, path)

    def beats(self) -> dict[int, str]:
        """Each launcher's alive file, as text (compared, never parsed for time)."""
        found: dict[int, str] = {}
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return found
        for name in names:
            if name.startswith("alive-") and name.endswith(".json") and name[6:-5].isdigit():
                try:
                    found[int(name[6:-5])] = (self.dir / name).read_text()
                except OSError:
                    continue
        return found


class Liveness:
    """Which launchers run, from their alive files changing on this launcher's clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, stale: float = STALE_SECONDS):
        self.clock = clock
        self.stale = stale
        self.started = clock()
        self._seen: dict[int, tuple[str, float]] = {}  # ordinal -> (file text, when it last changed)

    def observe(self, beats: dict[int, str]) -> tuple[frozenset[int], dict[int, float]]:
        """(the live ordinals, for every ordinal seen or not how long since it was last alive)."""
        now = self.clock()
        for ordinal, text in beats.items():
            last = self._seen.get(ordinal)
            if last is None:
                # First seen: not alive until it changes (a lost worker's file outlives it), and
                # gone since this observer started looking.
                self._seen[ordinal] = (text, self.started - self.stale)
            elif last[0] != text:
                self._seen[ordinal] = (text, now)
        alive = frozenset(o for o, (_, since) in self._seen.items() if now - since < self.stale)
        absent = {o: now - max(since, self.started) for o, (_, since) in self._seen.items() if o not in alive}
        return alive, absent

    def settled(self) -> bool:
        """Has this observer watched long enough to tell a running launcher from a lost one?"""
        return self.clock() - self.started >= self.stale

    def absent_for(self, ordinal: int, absent: dict[int, float]) -> float:
        """How long `ordinal` has not run: since its file last changed, or, never seen, since
        this launcher started looking."""
        return absent.get(ordinal, self.clock() - self.started)


class Elastic:
    """One launcher's elastic policy: beat, decide when it is the decider, follow the epochs."""

    def __init__(self, run: Run, hooks: Hooks, files: EpochFiles, liveness: Liveness | None = None):
        settings = run.settings
        self.run = run
        self.hooks = hooks
        self.files = files
        self.liveness = liveness or Liveness()
        self.minimum = settings.elastic_min_replicas
        self.grace = settings.elastic_grace_seconds
        self.micro = settings.elastic_micro_batches
        self.ordinal = run.identity.ordinal
        self.epoch: Epoch | None = None  # the epoch this launcher's group is formed at
        self._counter = 0
        self._lock = threading.Lock()
        self._alive: frozenset[int] = frozenset()
        self._absent: dict[int, float] = {}
        self._said = ""
        self.waiting = False  # in `join`: outside the newest epoch, or its members not all running

    @property
    def replicas(self) -> int:
        return self.run.settings.replicas

    # -- the thread -----------------------------------------------------------------------
    def start(self) -> threading.Event:
        done = threading.Event()
        self.tick()

        def loop() -> None:
            while not done.wait(ALIVE_SECONDS) and not self.hooks.stopping.is_set():
                try:
                    self.tick()
                except OSError as err:  # shared storage hiccup: said, tried again next beat
                    self._say_once(f"elastic: cannot read or write {self.files.dir}: {err}")
                except Exception as err:  # said, and the next beat tries again
                    self._say_once(f"elastic: {type(err).__name__}: {err}")

        threading.Thread(target=loop, name="tfmw-elastic", daemon=True).start()
        return done

    def tick(self) -> Change | None:
        """One beat: write this launcher's alive file, read the others', decide if this launcher
        is the decider, and stop training formed at an older epoch."""
        newest = self.files.newest(self.replicas)
        self._counter += 1
        member = self.epoch is not None and self.ordinal in self.epoch.members and self.epoch.number == newest.number
        self.files.beat(self.ordinal, self._counter, newest.number, member)
        alive, absent = self.liveness.observe(self.files.beats())
        alive = alive | {self.ordinal}
        absent = {o: self.liveness.absent_for(o, absent) for o in range(self.replicas) if o not in alive}
        with self._lock:
            self._alive, self._absent = alive, absent
        change = None
        if min(alive) == self.ordinal and self.liveness.settled():
            change = decide(newest, alive, absent, self.replicas, self.micro, self.minimum, self.grace)
            if change.claims:
                claimed = Epoch(newest.number + 1, change.members, self.replicas, change.kind.value, self.ordinal)
                if self.files.claim(claimed):
                    self.hooks.say(
                        f"elastic: epoch {claimed.number} ({change.kind.value}): members "
                        f"{list(claimed.members)}, {describe(claimed, self.micro)}: {change.why}"
                    )
                    newest = claimed
            elif change.why:
                self._say_once(f"elastic: {change.why}")
        self._follow(newest)
        return change

    def _follow(self, newest: Epoch) -> None:
        """A newer epoch than this launcher's group: stop training at the next checkpoint to
        re-form (not a failure), unless it is not training (the wait re-forms it)."""
        if self.epoch is None or newest.number == self.epoch.number or self.waiting:
            return
        supervisor = self.hooks.supervisor()
        if supervisor is not None and not self.run.in_peer_wait and not supervisor.regroup_pending:
            supervisor.request_regroup(f"elastic epoch {self.epoch.number} -> {newest.number} ({newest.reason})")

    def newer_epoch(self) -> str | None:
        """After training stopped: has a newer epoch been claimed? Its why (a regroup, not a
        failure), else None."""
        newest = self.files.newest(self.replicas)
        if self.epoch is not None and newest.number != self.epoch.number:
            return f"elastic epoch {self.epoch.number} -> {newest.number} ({newest.reason})"
        return None

    # -- the wait -------------------------------------------------------------------------
    def join(self, form: Callable[[Epoch], None]) -> bool:
        """Before training starts: wait until this launcher is a member of the newest epoch and
        every member runs, then form the group at it (`form`). Whether the group changed.
        Returns at once when the run completed (the supervisor then ends as Succeeded); raises
        EndedElsewhere when another launcher recorded its end, Failure past the deadline."""
        self.waiting = True
        entered = self.files.beats()
        looks = 0
        try:
            while True:
                self._ended(looks)
                looks += 1
                newest = self.files.newest(self.replicas)
                if newest.replicas != self.replicas:  # a resize: its epoch is not claimed yet
                    if self.hooks.stopping.wait(1.0):
                        raise Stopped()
                    continue
                with self._lock:
                    alive = self._alive
                # The rendezvous' barrier: every other member's launcher has beaten since this
                # wait began, so it runs now (a lost one's last beat may be seconds old).
                now = self.files.beats()
                fresh = {o for o in newest.members if o == self.ordinal or now.get(o) != entered.get(o)}
                if self.ordinal in newest.members and set(newest.members) <= alive and fresh == set(newest.members):
                    formed = self.run.group.at_members(self.run.settings, newest.members)
                    changed = self.epoch is None or newest != self.epoch or formed.encoded != self.run.group.encoded
                    if changed:
                        form(newest)
                        self.epoch = newest
                    return changed
                if self.ordinal not in newest.members:
                    self._say_once(
                        f"elastic: worker {self.ordinal} is not a member of epoch {newest.number} "
                        f"(members {list(newest.members)}): waiting for the group to grow at its next checkpoint"
                    )
                try:
                    if self.run.run_dir is not None and marker_exists(self.run.run_dir / "COMPLETED"):
                        return False
                except MarkerUnreadable:
                    pass  # the supervisor reads it again, with its retries, before any start
                if self.hooks.stopping.wait(1.0):
                    raise Stopped()
        finally:
            self.waiting = False

    def _ended(self, looks: int) -> None:
        """While waiting: the run's end recorded by another launcher (every 10th look: one API
        read per 10 s), or the deadline passed."""
        run = self.run
        if run.deadline is not None and time.monotonic() >= run.deadline:
            raise Failure(
                Reason.DEADLINE_EXCEEDED,
                f"training.activeDeadlineSeconds={run.settings.active_deadline_seconds} passed while "
                "waiting to join the elastic group",
            )
        if looks % 10 == 0:
            recorded = run.recorder.read()
            if recorded_final(recorded, run.tracker.state):
                raise EndedElsewhere(recorded)

    def chief_now(self) -> bool:
        """Is this launcher the chief of the newest epoch (member 0)? Before it joins: who may
        record the run's state."""
        newest = self.files.newest(self.replicas)
        return bool(newest.members) and newest.members[0] == self.ordinal

    def _say_once(self, text: str) -> None:
        if text != self._said:
            self._said = text
            self.hooks.say(text)
