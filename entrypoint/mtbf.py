"""The group's mean time between failures, from the run's record: what the launcher tells each
attempt of the built-in trainer for `checkpoint.interval: auto` (entrypoint/training/interval.py).

The launcher computes it (it holds the run's status) when an attempt starts and writes it to a
file of its pod, `TFMW_MTBF_FILE` in the attempt's environment; the trainer reads the file (it
never imports the launcher's status). A file, not the value in the environment: the warm standby
that runs the next attempt was started, with its environment, during the attempt before, so a
value in the environment would always be one failure behind.
"""

from __future__ import annotations

import math
import os

MTBF_FILE_ENV = "TFMW_MTBF_FILE"  # the file: "<seconds> <source>"

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


def attempt_env(path: str, restarts: int, wall_seconds: float) -> dict[str, str]:
    """Write the estimate for the attempt that starts now (whole: write, then rename) and return
    the variable naming the file. An unwritable file leaves the trainer its prior."""
    mtbf, source = estimate(restarts, wall_seconds)
    try:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(f"{mtbf:.1f} {source}\n")
        os.replace(path + ".tmp", path)
    except OSError:
        pass
    return {MTBF_FILE_ENV: path}


def from_env(environ) -> tuple[float, str]:
    """(M, source) as the trainer reads them; the prior when there is no file or it is unreadable
    (a trainer run without the launcher)."""
    path = environ.get(MTBF_FILE_ENV)
    try:
        with open(path, encoding="utf-8") as f:
            seconds, _, source = f.read().strip().partition(" ")
        mtbf = float(seconds)
    except (OSError, TypeError, ValueError):
        return PRIOR_SECONDS, "prior"
    if not math.isfinite(mtbf) or mtbf <= 0:
        return PRIOR_SECONDS, "prior"
    return mtbf, source or "launcher"
