"""The peers' pods: why workers the group waits for are not running, and peers lost with their
node (entrypoint/nodeloss.py), read with a fixed number of requests whatever the group's size
(docs/contracts.md, "Request budget").

Only while the group makes no progress (or trains as an elastic group without some of its
workers: entrypoint.elastic), and only three launchers look: the chief lists the
release's worker pods in one request (the chart's worker selector, TFMW_POD_SELECTOR) and sees
to every peer; worker 1 and the last worker read the chief's pod (two, far apart in the group:
seldom on one node), so that a lost chief is replaced by them and the new chief then sees to
the rest. Without a selector or the Role's `list` (a StatefulSet or a Role of the user's own)
the chief reads at most BY_NAME_AT_MOST pods by name per period, in turn. A peer lost with its
node (deleted by the taint manager, not Ready, its TF port taking no connection) is
force-deleted, so the StatefulSet controller replaces it on a node that answers; a pod merely
slow or stopped is never deleted. Where the chart's Role leaves reading or deleting pods out
(TFMW_RBAC_OFF: rbac.pods.get, rbac.pods.delete; the launcher said so at start) nothing is read,
or a lost peer is named for an admin instead of deleted.
"""

from __future__ import annotations

import re
import socket
import threading
import time

from .kubeapi import APIError
from .lifecycle import Phase
from .nodeloss import lost_with_node, pod_address
from .runcontext import Hooks, Run, jittered
from .waiting import NAMED_AT_MOST, pod_waiting_reason

NODE_LOSS_POLL_SECONDS = 5.0  # looked for this often (jittered) while the group is stalled
STALLED_SECONDS = 10.0  # no progress this long: the group is stalled (no reads while it trains)
PEER_PROBE_SECONDS = 2.0  # a lost peer's TF port must not take a connection within this
BY_NAME_AT_MOST = 20  # without a pod list: pods read by name per period, in turn


def answers(address: str, port: int) -> bool:
    """Does anything take a TCP connection on address:port within PEER_PROBE_SECONDS? A pod
    whose processes run does, however slow its training; a lost or cut-off one does not."""
    try:
        with socket.create_connection((address, port), timeout=PEER_PROBE_SECONDS):
            return True
    except OSError:
        return False


class PeerWatch:
    """One run's reads of its peers' pods."""

    def __init__(self, run: Run, hooks: Hooks):
        self.run = run
        self.hooks = hooks
        self.refused: list[str] = []  # why reading or deleting is not allowed, once known: said once
        self.unlisted = not run.settings.pod_selector  # no list: pods are read by name
        self._turn = 0  # where the next reading by name starts
        self.named: set[str] = set()  # lost peers named for an admin (no delete right): once each

    # -- reading the pods ---------------------------------------------------------------
    @property
    def _can_read(self) -> bool:
        run = self.run
        return (
            run.api is not None
            and run.identity is not None
            and bool(run.settings.namespace)
            and not run.platform
            and "pods.get" not in run.settings.rbac_off
        )

    def _name(self, ordinal: int) -> str:
        return f"{self.run.identity.host_prefix}-{ordinal}"

    def _not_allowed(self, what: str, err: APIError) -> None:
        if err.status == 403 and not self.refused:
            self.refused.append(err.detail)
            self.hooks.say(
                f"cannot read {what} to see why peers are not running or whether one was lost with its node: "
                f"{err.kind}: {err.detail}; a peer on a lost node then waits for an admin's "
                "`kubectl delete pod --force --grace-period=0`"
            )

    def peer_pods(self, ordinals) -> dict[int, dict | None] | None:
        """The release's worker pods by ordinal, in one request (an ordinal without a pod: not
        there); without a pod list, up to BY_NAME_AT_MOST of `ordinals` read by name, in the
        order given (None: read, not there). None when nothing could be read."""
        run = self.run
        if not self._can_read:
            return None
        if not self.unlisted:
            try:
                pods = run.api.list_pods(run.settings.namespace, run.settings.pod_selector)
            except APIError as err:
                if err.status != 403:
                    return None  # no answer: nothing to decide on this time
                self.unlisted = True
                self.hooks.say(
                    f"cannot list the release's pods ({err.kind}: {err.detail}); reading at most "
                    f"{BY_NAME_AT_MOST} of them by name every {NODE_LOSS_POLL_SECONDS:g} s instead (the chart's "
                    "Role allows `list` on pods with rbac.pods.list=true)"
                )
            else:
                pattern = re.compile(re.escape(run.identity.host_prefix) + r"-(0|[1-9][0-9]*)")
                found = {}
                for pod in pods:
                    m = pattern.fullmatch((pod.get("metadata") or {}).get("name", ""))
                    if m:
                        found[int(m.group(1))] = pod
                return found
        return self._by_name(list(ordinals)[:BY_NAME_AT_MOST])

    def _by_name(self, ordinals: list[int]) -> dict[int, dict | None] | None:
        run, found, answered = self.run, {}, False
        for ordinal in ordinals:
            try:
                found[ordinal] = run.api.get_pod(run.settings.namespace, self._name(ordinal))
                answered = True
            except APIError as err:
                if err.status == 404:
                    answered, found[ordinal] = True, None  # read: not there
                    continue
                self._not_allowed(f"peer {self._name(ordinal)}'s pod", err)
                return None
        return found if answered or not ordinals else None

    def _in_turn(self, ordinals: list[int]) -> list[int]:
        """`ordinals` from where the last reading by name stopped (all of them with a list)."""
        if not self.unlisted or len(ordinals) <= BY_NAME_AT_MOST:
            return ordinals
        start = self._turn % len(ordinals)
        self._turn = start + BY_NAME_AT_MOST
        return ordinals[start:] + ordinals[:start]

    def chief_pod(self) -> dict | None:
        """The chief's pod; None when it cannot be read (or is gone)."""
        run = self.run
        try:
            return run.api.get_pod(run.settings.namespace, self._name(0))
        except APIError as err:
            self._not_allowed(f"the chief's pod {self._name(0)}", err)
            return None

    # -- why the group waits (the chief, in the peer wait) -------------------------------
    def workers_waiting(self) -> None:
        """The chief, while its group waits for its peers: why the workers it waits for are not
        running (the scheduler's reason, a container's waiting reason), in the status message
        (entrypoint.waiting). Resizing: the new workers; otherwise every other worker (the first
        start; a restart after a lost node, whose replacement has no node with room)."""
        run, tracker = self.run, self.run.tracker
        if not tracker.is_chief or run.waiting is None or not self._can_read:
            return
        old = run.resized_from
        if tracker.state.phase is Phase.RESIZING and old is not None:
            ordinals = range(old, run.size)
        elif tracker.state.phase in (Phase.PENDING, Phase.RESTARTING, Phase.WAITING):
            ordinals = [o for o in range(run.size) if o != run.identity.ordinal]
        else:
            return
        pods = self.peer_pods(list(reversed(ordinals)))
        if pods is None:
            return  # no permission, or no answer: the message stays as it is
        reasons: dict[int, str] = {}
        # The scheduler places new pods in the order they were created, so the last are the
        # ones left Pending: name them from the highest ordinal down.
        for ordinal in reversed(ordinals):
            if len(reasons) == NAMED_AT_MOST:
                break
            if self.unlisted and ordinal not in pods:
                continue  # not read this time (by name, at most BY_NAME_AT_MOST): no word on it
            pod = pods.get(ordinal)
            why = pod_waiting_reason(pod, time.time()) if pod is not None else "not created yet"
            if why:
                reasons[ordinal] = why
        run.waiting.report(run.waiting_state(), reasons)

    # -- peers lost with their node (while the group is stalled) -------------------------
    def start(self) -> threading.Event | None:
        """Watch while the group makes no progress: the chief every peer, worker 1 and the last
        worker the chief, nobody else. Set the returned Event to stop watching."""
        run = self.run
        if not self._can_read:
            return None
        if run.identity.ordinal not in (0, 1, run.size - 1):
            return None
        done = threading.Event()
        threading.Thread(target=self._watch, args=(done,), name="tfmw-lost-peers", daemon=True).start()
        return done

    def _watch(self, done: threading.Event) -> None:
        run = self.run
        while not done.wait(jittered(NODE_LOSS_POLL_SECONDS)) and not self.hooks.stopping.is_set():
            supervisor = self.hooks.supervisor()
            if supervisor is None or supervisor.seconds_without_progress() < STALLED_SECONDS:
                run.waiting.trains()
                # An elastic group training without some of its workers still replaces a peer
                # lost with its node: else its pod stays Terminating and the group never grows back.
                if supervisor is None or run.workers >= run.size:
                    continue
            if run.identity.ordinal == 0:
                peers = self._in_turn(list(range(1, run.size)))
                read = self.peer_pods(peers)
                if self.unlisted:
                    peers = peers[:BY_NAME_AT_MOST]
            else:
                chief = self.chief_pod()
                read = None if chief is None else {0: chief}
                peers = [0]
            reasons, unread = {}, read is None
            for ordinal in peers:
                pod = (read or {}).get(ordinal)
                if pod is None:
                    unread = True  # not there (being replaced), or not readable: nothing to decide on
                    continue
                self.replace_if_lost(pod)
                why = pod_waiting_reason(pod, time.time())
                if why:
                    reasons[ordinal] = why
            # A replacement with no node that has room: the group's attempt waits inside
            # TensorFlow for a worker that is not running; the status says which and why
            # (unless the group trained again while the pods were read).
            if reasons and supervisor.seconds_without_progress() >= STALLED_SECONDS:
                run.waiting.report(run.waiting_state(), reasons)
            elif not reasons and not unread and not run.tracker.ledger.beats:
                # A user command writes no heartbeat, so its progress never says the group
                # trains again: every peer running again does.
                run.waiting.trains()

    def replace_if_lost(self, pod: dict) -> None:
        """Force-delete this peer's pod if it is lost with its node."""
        run = self.run
        namespace, name = run.settings.namespace, (pod.get("metadata") or {}).get("name", "")
        why = lost_with_node(pod)
        if why is None:
            return
        address = pod_address(pod)
        if address and answers(address, run.settings.port):
            return  # its processes run (a not-ready node whose kubelet stops them): not lost
        if self.refused:
            return
        if "pods.delete" in run.settings.rbac_off:
            if name not in self.named:
                self.named.add(name)
                self.hooks.say(
                    f"peer {name} is lost with its node ({why}); the workers may not delete pods "
                    f"(rbac.pods.delete=false): an admin runs `kubectl delete pod {name} -n {namespace} --force "
                    "--grace-period=0` so that it is replaced"
                )
            return
        uid = (pod.get("metadata") or {}).get("uid") or ""
        try:
            run.api.force_delete_pod(namespace, name, uid)
        except APIError as err:
            if err.status in (404, 409):
                return  # deleted, or replaced, meanwhile
            self.refused.append(err.detail)
            self.hooks.say(
                f"peer {name} is lost with its node ({why}) but cannot be force-deleted: {err.kind}: "
                f"{err.detail}; the Role needs `delete` on the release's pods (rbac.pods.delete), else an admin "
                f"runs `kubectl delete pod {name} -n {namespace} --force --grace-period=0`"
            )
            return
        message = (
            f"peer {name} was lost with its node: {why}; its TF port {address}:{run.settings.port} does not "
            f"answer. Force-deleted it, so the StatefulSet controller replaces it on a node that answers"
        )
        self.hooks.say(message)
        run.recorder.event("PeerLost", "Warning", message)
