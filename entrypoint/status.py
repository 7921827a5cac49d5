"""Record the run where kubectl and machines read it, off the training path.

- the status ConfigMap's data (docs/lifecycle.md): a merge patch of string values,
  applied only to the version just read, and never over a terminal state already recorded
  for the same attempt (terminal states are recorded once);
- core/v1 Events on the StatefulSet (its uid comes from the `scale` subresource);
- `statefulsets/scale` to 0 replicas, which releases every worker's resources.

Everything goes through one background thread fed by a coalescing queue: the newest status
wins, at most one request is in flight, each request has a short timeout. An API error is
logged once per kind and never reaches training.

Fenced: before each batch of writes the recorder reads its own pod (when it knows its UID,
TFMW_POD_UID). A pod that is gone, or that has another UID, was force-deleted and replaced
(its node was lost or cut off: docs/failure-model.md), and its replacement owns the run: this
launcher then writes nothing more, ever. Without that check a launcher cut off from the API
would send its queued "Failed" and its scale to 0 once the network heals, and stop the
replacement's group. A pod that cannot be read (403: an older Role; the API unreachable) is
not fenced: the write itself says what is wrong.

Where the workers' Role leaves a right out on purpose (TFMW_RBAC_OFF: rbac.events,
rbac.pods.get), the recorder does not ask: no Events, or no fence. Where there is no API server
by design (TFMW_NO_API_SERVER: `make local`), nothing is recorded or scaled, and nothing says so.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from . import loglines
from .kubeapi import APIError, KubeAPI
from .lifecycle import STATUS_KEYS, RunState, from_data, recorded_final, rfc3339, to_data

EVENT_COMPONENT = "tf-multiworker-launcher"
MAX_QUEUED_EVENTS = 32
# A scale to 0 is asked for once training is over: what its failure means then.
SCALE_NOT_DONE = "the pods keep their resources until the StatefulSet is scaled to 0 or uninstalled"


class StatusRecorder:
    def __init__(
        self,
        api: KubeAPI | None,
        *,
        namespace: str | None,
        configmap: str | None,
        statefulset: str | None,
        pod_name: str | None,
        log: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        pod_uid: str | None = None,
        events: bool = True,
        fence: bool = True,
        no_api_server: bool = False,
    ):
        self.api = api
        self.namespace = namespace or ""
        self.configmap = configmap
        self.statefulset = statefulset
        self.pod_name = pod_name or ""
        self.pod_uid = pod_uid or ""
        self.fenced = False  # this pod was replaced: no write from here on
        self.events = events  # the Role allows Events (rbac.events)
        self.fence = fence  # the Role allows reading this pod (rbac.pods.get): writes are fenced
        self.no_api_server = no_api_server  # none by design (make local): nothing to say about it
        self.log = log
        self.clock = clock
        self._cond = threading.Condition()
        self._data: dict[str, str] | None = None  # the next status write (coalesced)
        self._state: RunState | None = None
        self._unsent: dict[str, str] = {}  # a failed write, resent with the next one
        self._events: collections.deque = collections.deque(maxlen=MAX_QUEUED_EVENTS)
        self._scale = False
        self._submitted = 0
        self._done = 0
        self._thread: threading.Thread | None = None
        self._logged: set[tuple[str, str]] = set()
        self._log_lock = threading.Lock()
        self._scale_wanted = False  # a scale to 0 was asked for (retried while idle until done)
        self._uid: str | None = None
        self.scaled_to_zero = False  # the StatefulSet was scaled to 0 by this launcher
        self.status_ok: bool | None = None  # the last status write: True ok, False failed
        self.superseded: RunState | None = None  # a terminal state found recorded by a peer

    # -- what can be done at all ---------------------------------------------------------
    @property
    def records_status(self) -> bool:
        return self.api is not None and bool(self.configmap and self.namespace)

    @property
    def can_scale_to_zero(self) -> bool:
        return self.api is not None and bool(self.statefulset and self.namespace)

    # -- the synchronous read at start (before training) ---------------------------------
    def read(self) -> RunState | None:
        """The recorded state, or None (no status object, no API access, or an error: logged)."""
        if not self.records_status:
            return None
        try:
            return from_data(self.api.get_configmap(self.namespace, self.configmap).get("data"))
        except APIError as err:
            self._log_once("read the status from", f"configmap/{self.configmap}", err)
            return None

    # -- queued work ---------------------------------------------------------------------
    def record(self, state: RunState, keys: tuple[str, ...] | None = None) -> None:
        if not self.records_status:
            return
        data = to_data(state, keys or STATUS_KEYS)
        with self._cond:
            self._data = {**self._unsent, **(self._data or {}), **data}
            self._unsent = {}
            self._state = state
            self._kick()

    def event(self, reason: str, event_type: str, message: str) -> None:
        if not self.can_scale_to_zero or not self.events:  # events need the StatefulSet too
            return
        with self._cond:
            self._events.append((reason, event_type, message, rfc3339(self.clock())))
            self._kick()

    def scale_to_zero(self) -> None:
        if not self.can_scale_to_zero:
            if self.no_api_server:
                return  # nothing to scale: the caller says what the end is
            self._log_once(
                "scale",
                f"statefulset/{self.statefulset or '?'} to 0",
                APIError("no API access", "TFMW_API_DIR is not set: this pod has no API credentials"),
                then=SCALE_NOT_DONE,
            )
            return
        with self._cond:
            self._scale = True
            self._kick()

    def retry_unsent(self) -> None:
        """Try again what failed (while idle): the last status write and the scale to 0."""
        with self._cond:
            if self._unsent and self._state is not None:
                self._data, self._unsent = {**self._unsent, **(self._data or {})}, {}
                self._kick()
            if self._scale_wanted and not self.scaled_to_zero:
                self._scale = True
                self._kick()

    def flush(self, timeout: float) -> bool:
        """Wait (bounded) until everything queued so far has been tried."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._submitted
            while self._done < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _kick(self) -> None:  # caller holds self._cond
        self._submitted += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="tfmw-status", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._done == self._submitted:
                    self._cond.wait()
                target = self._submitted
                data, state = self._data, self._state
                self._data = None
                events = list(self._events)
                self._events.clear()
                scale, self._scale = self._scale, False
                if scale:
                    self._scale_wanted = True
            if (data is not None or events or scale) and self._replaced():
                data, events, scale = None, [], False
                with self._cond:
                    self._unsent, self._scale_wanted = {}, False
            if data is not None and state is not None:
                self._write_status(data, state)
            for event in events:
                self._create_event(*event)
            if scale:
                self._scale_to_zero()
            with self._cond:
                self._done = target
                self._cond.notify_all()

    # -- the requests (background thread only) ------------------------------------------
    def _replaced(self) -> bool:
        """Fenced: this pod no longer exists under its UID (see the module docstring)."""
        if self.fenced:
            return True
        if not (self.fence and self.pod_uid and self.pod_name and self.namespace):
            return False
        try:
            uid = (self.api.get_pod(self.namespace, self.pod_name).get("metadata") or {}).get("uid", "")
        except APIError as err:
            if err.status != 404:
                return False
            uid = ""
        if uid == self.pod_uid:
            return False
        self.fenced = True
        now = f"has uid {uid}" if uid else "is gone"
        self.log(
            loglines.line(
                loglines.LAUNCHER,
                text=f"fenced: pod {self.pod_name} {now}, not this pod's {self.pod_uid} (force-deleted and "
                "replaced: its node was lost or cut off); no status, Event or scale from this launcher again",
            )
        )
        return True

    def _write_status(self, data: dict[str, str], state: RunState) -> None:
        try:
            for attempt in range(3):
                current = self.api.get_configmap(self.namespace, self.configmap)
                recorded = from_data(current.get("data"))
                if recorded_final(recorded, state):
                    self.superseded = recorded
                    self.status_ok = True
                    return
                version = (current.get("metadata") or {}).get("resourceVersion")
                try:
                    self.api.patch_configmap_data(self.namespace, self.configmap, data, version)
                    self.status_ok = True
                    return
                except APIError as err:
                    if err.status != 409 or attempt == 2:
                        raise  # 409: someone wrote in between; read again and decide again
        except APIError as err:
            self.status_ok = False
            with self._cond:
                if self._data is not None:  # a newer write is queued: it carries these keys too
                    self._data = {**data, **self._data}
                else:  # resent with the next write, or by retry_unsent()
                    self._unsent = {**data, **self._unsent}
            self._log_once("record the status in", f"configmap/{self.configmap}", err)

    def _statefulset_uid(self) -> str:
        if self._uid is None:
            scale = self.api.get_scale(self.namespace, self.statefulset)
            self._uid = (scale.get("metadata") or {}).get("uid", "")
        return self._uid

    def _create_event(self, reason: str, event_type: str, message: str, when: str) -> None:
        try:
            uid = self._statefulset_uid()
            self.api.create_event(
                self.namespace,
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{self.statefulset}.{time.time_ns():x}", "namespace": self.namespace},
                    "involvedObject": {
                        "apiVersion": "apps/v1",
                        "kind": "StatefulSet",
                        "name": self.statefulset,
                        "namespace": self.namespace,
                        "uid": uid,
                    },
                    "reason": reason,
                    "message": message[:1000],
                    "type": event_type,
                    "source": {"component": EVENT_COMPONENT},
                    "reportingComponent": EVENT_COMPONENT,
                    "reportingInstance": self.pod_name[:128],
                    "firstTimestamp": when,
                    "lastTimestamp": when,
                    "count": 1,
                },
            )
        except APIError as err:
            self._log_once("record", f"Event {reason} on statefulset/{self.statefulset}", err)

    def _scale_to_zero(self) -> None:
        try:
            self.api.patch_scale(self.namespace, self.statefulset, 0)
        except APIError as err:
            self._log_once("scale", f"statefulset/{self.statefulset} to 0", err, then=SCALE_NOT_DONE)
            return
        if not self.scaled_to_zero:
            self.scaled_to_zero = True
            self.log(
                loglines.line(loglines.LAUNCHER, text=f"scaled to zero: statefulset/{self.statefulset} has 0 replicas")
            )

    def _log_once(self, verb: str, what: str, err: APIError, then: str = "training goes on") -> None:
        key = (verb, err.kind)
        with self._log_lock:
            if key in self._logged:
                return
            self._logged.add(key)
        detail = f"{err.kind}: {err.detail}" if err.detail else err.kind
        self.log(loglines.line(loglines.LAUNCHER, text=f"status: cannot {verb} {what} ({detail}); {then}"))
