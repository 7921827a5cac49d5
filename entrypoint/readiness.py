"""A worker's readiness: Ready means "in a group that trains" (pure).

The kubelet's readinessProbe asks the launcher (`GET /ready` on the metrics port). A worker is
Ready while its group is formed and stepping: the run is Running and, for the built-in trainer,
a training step has been taken in the current attempt (its heartbeat says `train`); a user
command, which writes no heartbeat, is Ready once its attempt runs. Every other phase of a run
under way is NotReady: Pending (the group forms), Restarting and Resizing (it re-forms), Waiting
(a worker is not running), Suspended (its pods are going away). A run that has ended is Ready:
its idle workers guard nothing, and a PodDisruptionBudget or `helm --wait` must not wait on them.

What follows from it (docs/lifecycle.md, "Readiness"):
- the PodDisruptionBudget counts a worker healthy only while the group trains, so a drain
  evicts the next worker only once the group has re-formed from the last eviction;
- `kubectl rollout status`, `helm --wait` and Kueue's WaitForPodsReady see the group train;
- the headless Service publishes not-ready addresses (publishNotReadyAddresses), so peers
  find each other while NotReady.
"""

from __future__ import annotations

from .lifecycle import TERMINAL, Phase, RunState

# A group that has made no progress (no new heartbeat) for this long is not training: a hung
# collective, a cut-off peer, or a checkpoint write this slow. Longer than the slowest normal
# gap between beats (they come at most twice a second while stepping), shorter than Kueue's
# and the hang watchdog's bounds.
STALL_SECONDS = 60.0


def in_group(
    state: RunState, stepped_this_attempt: bool, beats: bool, seconds_without_progress: float = 0.0
) -> tuple[bool, str]:
    """(ready, why) for a worker whose run is in `state`."""
    if state.phase in TERMINAL:
        return True, f"the run has ended ({state.phase}): nothing to guard"
    if state.phase is not Phase.RUNNING:
        return False, f"the group is not training: {state.phase}"
    if beats and not stepped_this_attempt:
        return False, "the group is forming: no training step in this attempt yet"
    if beats and seconds_without_progress > STALL_SECONDS:
        return False, f"no training progress for {seconds_without_progress:.0f}s"
    return True, "the group trains"
