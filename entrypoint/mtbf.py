"""The group's mean time between failures, from the run's record: what the launcher tells each
attempt of the built-in trainer for `checkpoint.interval: auto` (entrypoint/training/interval.py).

Pure. The launcher computes it (it holds the run's status); the trainer only reads the two
environment variables (it never imports the launcher's status).
"""

from __future__ import annotations

import math

MTBF_ENV = "TFMW_MTBF_SECONDS"  # the estimate, seconds
MTBF_SOURCE_ENV = "TFMW_MTBF_SOURCE"  # how it was made, for the interval's log line and status

# M before the run has failed once (the record then only says M > wall time): one failure a day
# of the whole group, or the failure-free wall time if longer.
PRIOR_SECONDS = 86_400.0


def estimate(restarts: int, wall_seconds: float, prior: float = PRIOR_SECONDS) -> tuple[float, str]:
    """(M, source): the prior before the first failure (source "prior"), then the observed rate,
    wall / failures (source "observed:<failures>/<wall>s": the maximum-likelihood estimate of an
    exponential's mean; a prior weighted like a failure-free day would hide a failure every
    minute for hours). restarts: RunState.restarts (failures of the group that restarted it);
    wall_seconds: goodput's productive + badput seconds, carried across launcher restarts (never
    a difference of timestamps written on other nodes)."""
    wall = wall_seconds if math.isfinite(wall_seconds) and wall_seconds > 0 else 0.0
    failures = max(restarts, 0)
    if failures == 0:
        return max(prior, wall), "prior"
    return max(wall / failures, 1.0), f"observed:{failures}/{wall:.0f}s"


def attempt_env(restarts: int, wall_seconds: float) -> dict[str, str]:
    """The two variables for the next attempt's environment."""
    mtbf, source = estimate(restarts, wall_seconds)
    return {MTBF_ENV: f"{mtbf:.1f}", MTBF_SOURCE_ENV: source}


def from_env(environ) -> tuple[float, str]:
    """(M, source) as the trainer reads them; the prior when absent or unreadable (a trainer run
    without the launcher)."""
    try:
        mtbf = float(environ.get(MTBF_ENV, ""))
    except ValueError:
        mtbf = math.nan
    if not math.isfinite(mtbf) or mtbf <= 0:
        return PRIOR_SECONDS, "prior"
    return mtbf, environ.get(MTBF_SOURCE_ENV) or "launcher"
