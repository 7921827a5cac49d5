"""Moved to entrypoint.rundir (issue 13: the launcher never imports entrypoint.training).

Transitional: trainer.py and scripts/local_run.py (other helpers' files in issue 13) still
import `entrypoint.training.rundir`; the merge points them at `entrypoint.rundir` and deletes
this file.
"""
from ..rundir import Heartbeat, RunDir, is_uri, makedirs, read_completed, write_completed  # noqa: F401
