"""Leaving together: no worker exits while a peer may still need it (docs/training.md,
"Leaving together").

A ring all-reduce returning on one worker does not mean its peers are done with it: a peer
may still be pulling the last chunks from this worker. A worker that left right after its
last all-reduce made that peer fail (`UNAVAILABLE: Socket closed` on RecvBuf) and exit 75
after a finished run. So after its last collective every worker waits at a barrier of
TensorFlow's coordination service; once all have arrived, nobody needs anybody's collective
again and each may leave at once (os._exit), skipping TensorFlow's seconds of teardown.

The chief hosts the coordination service, so its exit can cut a peer's barrier reply short.
After a finished run the chief writes the COMPLETED marker right after the barrier, before it
exits; a peer whose barrier wait broke looks for that marker before calling the group broken.
After a stop the checkpoint is already saved by every worker, so a broken barrier changes
nothing there.

Pure: the barrier wait and the marker check are passed in (the trainer passes TensorFlow's);
the tests drive every branch without a group.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..rundir import MarkerUnreadable

# The barriers' names in the coordination service: one per way of leaving.
FINISHED = "tfmw-finished"
STOPPED = "tfmw-stopped"
# How long a non-chief looks for the chief's COMPLETED marker after its barrier wait broke:
# the chief writes it within milliseconds of the barrier, on shared storage that may lag.
MARKER_WAIT_SECONDS = 10.0
MARKER_POLL_SECONDS = 0.2
# Without the run's timeoutSeconds the barrier waits a day: a slow export on a peer is not a
# failure; a dead peer is reported by the coordination service's heartbeat long before that.
DEFAULT_TIMEOUT_MS = 24 * 3600 * 1000


def barrier_timeout_ms(timeout_seconds: float | None) -> int:
    """The barrier's timeout from the run's `timeoutSeconds` (None: a day)."""
    if timeout_seconds is None:
        return DEFAULT_TIMEOUT_MS
    return max(1, int(timeout_seconds * 1000))


def leave_together(
    wait: Callable[[str, int], None],
    barrier: str,
    timeout_ms: int,
    *,
    is_chief: bool,
    completed: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    marker_wait: float | None = None,
) -> str | None:
    """Wait at `barrier` until every worker has arrived. None: this worker may leave. Otherwise
    the reason the group broke before everyone arrived (the caller decides what it costs).

    `completed` (finished runs, non-chief workers): whether the chief's COMPLETED marker
    exists. The chief writes it only after its own barrier wait returned, so a marker means
    every worker arrived, and only the reply to this one was lost with the chief's exit. A
    marker that cannot be read (rundir.MarkerUnreadable) is not seen: looked for again."""
    try:
        wait(barrier, timeout_ms)
        return None
    except Exception as err:  # TensorFlow's OpError subclasses, or the service gone
        reason = f"{type(err).__name__} at barrier {barrier}: {' '.join(str(err).split())[:200]}"
    if is_chief or completed is None:
        return reason
    deadline = clock() + (MARKER_WAIT_SECONDS if marker_wait is None else marker_wait)
    unreadable = ""
    while True:
        try:
            if completed():
                return None
        except MarkerUnreadable as err:  # not known yet: never "done", so look again until the deadline
            unreadable = f"; {err}"
        if clock() >= deadline:
            return reason + unreadable
        sleep(MARKER_POLL_SECONDS)
