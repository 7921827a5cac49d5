"""Exit codes and the exceptions that carry them (see docs/contracts.md).

Every refusal in the launcher is one of these: the CLI prints `str(err)` as one line on
stderr and exits with `err.exit_code`. No traceback reaches the operator. The trainer
imports this module too (never the other way round), so both sides share one table.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BAD_CONFIG = 2  # fix the values / environment; never retried
EXIT_PEERS_NOT_FOUND = 3  # some peer DNS names never resolved before the deadline
EXIT_TRAINING_FAILED = 4  # training command failed permanently (not retried)
EXIT_RETRIES_EXHAUSTED = 5  # retryable failures went on past the restart limit
EXIT_DEADLINE_EXCEEDED = 6  # training.activeDeadlineSeconds passed before the run completed
EXIT_RETRYABLE = 75  # training command's "peer/collective failure, try again" (EX_TEMPFAIL)
EXIT_UNEXPECTED = 1  # a user command's failure or a crash: retried up to the limit
EXIT_SIGTERM = 143  # stopped by SIGTERM (128 + 15) after the trainer checkpointed

# Exit codes of the training command that retrying cannot fix: the supervisor stops at once.
PERMANENT_TRAINING_EXITS = (EXIT_BAD_CONFIG, EXIT_TRAINING_FAILED)

# TensorFlow's errors of a failed group, by class name (no TensorFlow import: tf.errors classes
# are named UnavailableError, ...): a peer died, restarted or timed out, and training can resume
# from the last checkpoint. The trainer exits 75 on them (entrypoint/training/failures.py); the
# launcher reads them in a user command's traceback (entrypoint/groupbreak.py).
_RETRYABLE = {"UnavailableError", "DeadlineExceededError", "CancelledError", "AbortedError"}
# InternalError is retryable only when it comes from the collective/coordination machinery.
_GROUP_WORDS = ("collective", "coordination", "coordinator", "heartbeat", "peer", "rendezvous")
# A worker of a resized group that reached the chief while the chief's coordination service
# still served the group's old size: "Unexpected task registered with task_name=...". The
# group re-forms at the new size moments later; retrying joins it.
# A worker still in the old group when the chief's coordination service restarted (the chief
# re-formed first, a peer was slower to see the lost one): "Task with task_name=... must be
# registered before sending heartbeat messages. The service might have restarted".
_STALE_GROUP_WORDS = ("unexpected task registered", "must be registered before sending heartbeat")


def retryable_by_name(names: set[str], message: str) -> bool:
    """An error of these class names (its class and bases) and message is a failure of the
    group: the trainer's errors here, a user command's traceback in entrypoint.groupbreak."""
    if names & _RETRYABLE:
        return True
    text = message.lower()
    if "InternalError" in names:
        return any(word in text for word in _GROUP_WORDS)
    if "InvalidArgumentError" in names:
        return any(word in text for word in _STALE_GROUP_WORDS)
    return False


class LauncherError(Exception):
    """A failure with a one-line, operator-facing reason and an exit code."""

    exit_code = EXIT_TRAINING_FAILED


class ConfigError(LauncherError):
    """Bad environment, values or TF_CONFIG."""

    exit_code = EXIT_BAD_CONFIG


class PeersNotFound(LauncherError):
    exit_code = EXIT_PEERS_NOT_FOUND
