"""Moved to entrypoint.rundir (issue 13: the launcher never imports entrypoint.training).

Transitional: trainer.py (another helper's file in issue 13) still imports `.rundir`; the merge
changes that import to `from ..rundir import ...` and deletes this file.
"""
from ..rundir import Heartbeat, RunDir, is_uri, makedirs, write_completed  # noqa: F401
