"""The group's size and its forming: read, watched, re-formed; the peer wait (docs/failure-model.md,
"Resizing"; the request budget in docs/contracts.md).

Where the chart gives the launcher API access, the group's size is its StatefulSet's
`spec.replicas`, read through the `scale` subresource: a change is a resize. One launcher
watches it, the chief, with a jittered poll: it stops its own training at the next checkpoint,
so the whole group stops with it, and every launcher then reads the size once, before its
restart in place, and re-forms the group at it. Before each start (the first, every restart)
each launcher waits until the peers it needs resolve (entrypoint.peers.needed_peers): the
chief every name, the others three.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from .elastic import EVENTS, Elastic
from .errors import ConfigError, PeersNotFound
from .kubeapi import APIError, KubeAPI
from .lifecycle import Phase, Reason, recorded_final
from .membership import ELASTIC_REPLICAS_ENV, Epoch, Kind, describe
from .peers import wait_for_peers
from .peerwatch import PeerWatch
from .restarts import restart_kind
from .runcontext import EndedElsewhere, Failure, Hooks, Run, SizeChanged, Stopped, jittered
from .settings import LauncherSettings

# The why of a regroup for a new elastic epoch (entrypoint.elastic.Elastic.newer_epoch)
ELASTIC_CAUSE = "elastic epoch"


class EpochChanged(Exception):
    """A newer elastic epoch was claimed while waiting for the peers: join it instead."""


RESIZE_POLL_SECONDS = 5.0  # the chief reads its StatefulSet's replicas this often (jittered)


def statefulset_replicas(api: KubeAPI | None, settings: LauncherSettings) -> int:
    """The pod's StatefulSet's spec.replicas, read through its scale subresource (the chart's
    Role allows `get` on it). ConfigError without API credentials or when the API refuses
    (401/403/404: no retry changes that); APIError for what may pass (a timeout)."""
    if api is None or not settings.namespace or not settings.statefulset:
        raise ConfigError("no API access (TFMW_API_DIR) to read the group's size; set TFMW_REPLICAS")
    where = f"statefulset {settings.statefulset}'s scale"
    try:
        # the API server leaves out a replicas of 0 (omitempty): a scale with a spec and no
        # replicas is at 0
        replicas = (api.get_scale(settings.namespace, settings.statefulset).get("spec") or {}).get("replicas", 0)
    except APIError as err:
        if err.status in (401, 403, 404):
            raise ConfigError(
                f"cannot read the group's size from {where}: {err}; the chart's Role allows it "
                "(rbac.create), or set TFMW_REPLICAS"
            ) from None
        raise
    if not isinstance(replicas, int) or replicas < 0:
        raise APIError("bad answer", f"{where} has spec.replicas {replicas!r}")
    return replicas


class GroupSize:
    """The group's size as its StatefulSet says it."""

    def __init__(self, api: KubeAPI | None, stopping: threading.Event):
        self.api = api
        self.stopping = stopping
        self.error = ""  # why the size could not be read, the last time

    def read(self, settings: LauncherSettings) -> int | None:
        """spec.replicas now; None when it cannot be read (kept as it was)."""
        try:
            return statefulset_replicas(self.api, settings)
        except (APIError, ConfigError) as err:
            self.error = str(err)
            return None

    def at_start(self, settings: LauncherSettings) -> int:
        """The size to start with, retried with back-off for peers.timeoutSeconds (an API
        server that is restarting); ConfigError after that, or at once for what no retry
        changes. 0 (scaled to 0: the run ended, or is being stopped) is not readable yet."""
        deadline, delay, why = time.monotonic() + settings.peer_timeout_seconds, 0.5, ""
        while True:
            try:
                replicas = statefulset_replicas(self.api, settings)
                if replicas > 0:
                    return replicas
                why = "spec.replicas is 0"
            except APIError as err:
                why = str(err)
            if time.monotonic() >= deadline:
                raise ConfigError(
                    f"cannot read the group's size from statefulset {settings.statefulset}'s scale "
                    f"within peers.timeoutSeconds={settings.peer_timeout_seconds}: {why}"
                )
            if self.stopping.wait(delay):
                raise Stopped()
            delay = min(delay * 2, 10.0)


class Regroup:
    """The group's size and forming for one run."""

    def __init__(self, run: Run, hooks: Hooks, size: GroupSize, peers: PeerWatch, elastic: Elastic | None = None):
        self.run = run
        self.hooks = hooks
        self.size = size
        self.peers = peers
        self.elastic = elastic  # training.elastic: the members follow the epochs (entrypoint.elastic)

    @property
    def resizable(self) -> bool:
        return self.run.settings.resizable and not self.run.platform

    def watch(self) -> threading.Event | None:
        """The chief, while the group trains: has the StatefulSet's replicas changed? Then it
        stops its training at a checkpoint to re-form the group (the supervisor restarts it
        through before_restart); the others stop with it. Set the returned Event to stop."""
        run = self.run
        # An elastic group's chief is member 0 of its epoch, whichever ordinal: every launcher
        # watches, and only the chief of the moment reads the size.
        if not self.resizable or (not run.tracker.is_chief and self.elastic is None):
            return None
        done = threading.Event()

        def watch() -> None:
            while not done.wait(jittered(RESIZE_POLL_SECONDS)) and not self.hooks.stopping.is_set():
                if run.resize_to is not None or run.in_peer_wait or not run.tracker.is_chief:
                    continue  # the group is stopping or re-forming: the regroup reads the size itself
                size = self.size.read(run.settings)
                supervisor = self.hooks.supervisor()
                if size and size != run.size and size != run.resize_to and supervisor is not None:
                    self.resizing(size)
                    supervisor.request_regroup(f"workers.replicas {run.size} -> {size}")

        threading.Thread(target=watch, name="tfmw-size", daemon=True).start()
        return done

    def resizing(self, size: int) -> None:
        """A resize to `size` workers. A new one starts from the size the group trained at; a
        change of the size while the group is still stopped for one (a grow undone before its
        new workers could run) is the same resize with a new target."""
        run = self.run
        if run.resize_to is None:
            run.resized_from = run.size
        run.resize_to = size
        self.hooks.say(
            f"resizing: workers.replicas {run.resized_from} -> {size}: the group stops at its next "
            f"checkpoint and re-forms at {size} workers"
        )
        if run.tracker.state.phase in (Phase.RUNNING, Phase.RESTARTING, Phase.WAITING):
            run.tracker.transition(
                Phase.RESIZING,
                message=f"workers.replicas {run.size} -> {size}: stopping at the next checkpoint to re-form "
                f"the group at {size} workers",
            )

    def resized(self) -> str | None:
        """After the group stopped: has its size changed (the chief saw a resize and stopped,
        the others with it)? Then the restart is a resize (no back-off, nothing counted)."""
        run = self.run
        if self.elastic is not None and run.resize_to is None:
            why = self.elastic.newer_epoch()
            if why is not None:
                return why
        if not self.resizable or run.resize_to is not None:
            return None
        size = self.size.read(run.settings)
        if not size or size == run.size:
            return None
        self.resizing(size)
        return f"workers.replicas {run.size} -> {size}"

    def restarting(self, cause: str) -> None:
        """An attempt ended and training restarts in place: a resize's stop (the size was read
        by `resized`, or the chief's watch), or a restart."""
        tracker = self.run.tracker
        if tracker.state.phase is Phase.RESIZING:
            tracker.group_stopped()
            return
        if ELASTIC_CAUSE in cause:  # a new elastic epoch (a grow): a re-forming, not a failure
            tracker.group_stopped()
            tracker.transition(Phase.RESTARTING, message=tracker.restart_message(cause))
            return
        tracker.restart_counted(restart_kind(cause))
        tracker.transition(Phase.RESTARTING, message=tracker.restart_message(cause))

    def reform(self, size: int) -> None:
        """The group's TF_CONFIG at `size` workers (this pod's ordinal unchanged)."""
        run = self.run
        if run.identity is None:
            return
        if run.identity.ordinal >= size:
            self.hooks.say(
                f"worker {run.identity.ordinal} is outside the group of {size} workers (workers.replicas): "
                "the StatefulSet controller is removing this pod; not training again"
            )
            self.hooks.stopping.wait()
            raise Stopped()
        group = run.group.at_size(run.settings, size)
        if run.tracker.state.phase is not Phase.RESIZING or run.resize_to != size:
            self.resizing(size)
        run.group = group
        run.settings = replace(run.settings, replicas=size)
        self.hooks.say(f"re-forming the group at {size} workers")

    def wait_for_group(self) -> bool:
        """Wait for the group's peers. A resizable group whose size changes meanwhile (a grow
        undone before its new worker could be scheduled, say) is re-formed at the new size and
        waited for instead. Returns whether the TF_CONFIG changed."""
        changed = False
        while True:
            try:
                if self.elastic is not None:
                    changed = self.elastic.join(self.form_epoch) or changed
                self._wait_for_peers()
                return changed
            except SizeChanged as new:
                self.reform(new.size)
                changed = True
            except EpochChanged:  # a member lost (or one back) while waiting: join the new epoch
                changed = True

    def form_epoch(self, epoch: Epoch) -> None:
        """The group of an elastic epoch: its members, this pod's rank among them; member 0 is
        the chief (records the run, writes COMPLETED), whichever ordinal it is."""
        run = self.run
        run.group = run.group.at_members(run.settings, epoch.members)
        run.base_env[ELASTIC_REPLICAS_ENV] = str(epoch.replicas)  # the trainer keeps N's global batch
        chief = epoch.members[0] == run.identity.ordinal
        run.tracker.is_chief = chief
        run.tracker.members(len(epoch.members), epoch.replicas)
        supervisor = self.hooks.supervisor()
        if supervisor is not None:
            supervisor.cfg.is_chief = chief
        note = describe(epoch, run.settings.elastic_micro_batches)
        run.group_note = note if len(epoch.members) < epoch.replicas else ""
        self.hooks.say(
            f"elastic: forming epoch {epoch.number}: members {list(epoch.members)} ({note}); this worker is "
            f"task {run.group.tf_config['task']['index']}{' (the chief)' if chief else ''}"
        )
        event = EVENTS.get(Kind(epoch.reason)) if epoch.reason in {k.value for k in Kind} else None
        if chief and event is not None:
            kind = "Warning" if epoch.reason == Kind.SHRINK.value else "Normal"
            run.recorder.event(event, kind, f"epoch {epoch.number}: {note}")

    def before_restart(self) -> dict | None:
        """Before a restart in place: has the run ended elsewhere (a peer recorded Failed)?
        Then stop, do not wait for a group that will never form. Has the group's size changed
        (resizable)? Then re-form it at the new size. Then wait for the peers. Returns the
        training command's new environment when the TF_CONFIG changed, else None."""
        run = self.run
        recorded = run.recorder.read()
        if recorded_final(recorded, run.tracker.state):
            raise EndedElsewhere(recorded)
        changed = False
        if self.resizable:
            size = self.size.read(run.settings)
            if size and size != run.size:
                self.reform(size)
                changed = True
        changed = self.wait_for_group() or changed
        run.resize_to = None
        return run.child_env if changed else None

    # -- the peer wait -------------------------------------------------------------------
    def _wait_for_peers(self) -> None:
        run = self.run
        run.tracker.peer_wait()
        run.in_peer_wait = True
        try:
            self._wait_for_peers_until()
        finally:
            run.in_peer_wait = False
            run.tracker.peers_found()

    def _wait_for_peers_until(self) -> None:
        run, settings = self.run, self.run.settings
        timeout, bounded = float(settings.peer_timeout_seconds), False
        if run.deadline is not None and run.deadline - time.monotonic() < timeout:  # monotonic: RunClock
            timeout, bounded = max(run.deadline - time.monotonic(), 0.0), True
        # Only the chief reads the size and its peers' pods while it waits; the others wait
        # for three names, which resolve as soon as those pods have their addresses.
        watches = run.tracker.is_chief and run.identity is not None
        checked = time.monotonic()
        period = jittered(RESIZE_POLL_SECONDS)

        def sleep(seconds: float) -> None:
            nonlocal checked, period
            if self.hooks.stopping.wait(seconds):
                raise Stopped()
            if self.elastic is not None and self.elastic.newer_epoch() is not None:
                raise EpochChanged()
            if watches and time.monotonic() - checked >= period:
                checked, period = time.monotonic(), jittered(RESIZE_POLL_SECONDS)
                if self.resizable:
                    size = self.size.read(settings)
                    if size and size != run.size:
                        raise SizeChanged(size)
                self.peers.workers_waiting()

        try:
            wait_for_peers(run.group.hosts_to_wait_for(), timeout, log=self.hooks.log, sleep=sleep)
        except PeersNotFound as err:
            if bounded:
                raise Failure(
                    Reason.DEADLINE_EXCEEDED,
                    f"training.activeDeadlineSeconds={settings.active_deadline_seconds} passed "
                    f"while waiting for peers: {err}",
                ) from None
            # What the chief last read of the workers it waited for (a volume that never attached,
            # a pod the scheduler refused) belongs in the reason the run failed.
            seen = run.waiting.last_seen() if run.waiting is not None else ""
            raise Failure(
                Reason.PEERS_NOT_FOUND, f"{err}; the pods when last read: {seen}" if seen else str(err)
            ) from None
