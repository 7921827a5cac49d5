"""The restart rule: what the supervisor does after an attempt of the training command ends.

Pure (no I/O, no clock): the supervisor (entrypoint.supervisor) runs an attempt, describes
how it ended (AttemptOutcome), and acts on `decide(outcome, history)`: succeed, fail, stop,
re-form the group, restart in place after a back-off, or give up. Every line the launcher
logs and every message it records about that decision is worded here, so it is tested here.
The model is torch elastic's agent loop (`_invoke_run` over WorkerState): the loop only acts.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass, replace

from . import crashprint
from .errors import EXIT_BAD_CONFIG, EXIT_OK, EXIT_RETRYABLE, EXIT_SIGTERM, EXIT_TRAINING_FAILED
from .groupbreak import group_error
from .hangwatch import Verdict
from .lifecycle import Reason
from .oomkill import OOM_KILLED

DONE, PERMANENT, RETRY = "done", "permanent", "retry"

# The training command's permanent exit codes and the run's terminal reason for each.
PERMANENT_REASONS = {EXIT_BAD_CONFIG: Reason.BAD_CONFIG, EXIT_TRAINING_FAILED: Reason.TRAINING_FAILED}


def classify_exit(returncode: int) -> str:
    """Map the training command's exit status to what the supervisor does next.

    0 -> done; 2 (a bad training config) and 4 (a permanent training error: corrupt data, a
    non-finite loss, anything the trainer logs with retryable=false) -> permanent, retrying
    cannot help; 75 (EX_TEMPFAIL: a lost peer), a signal (negative code) or any other failure
    -> retry (a user script dies with 1 on a lost peer just as on a bug; the restart limit
    bounds the cost of guessing wrong).
    """
    if returncode == EXIT_OK:
        return DONE
    if returncode in PERMANENT_REASONS:
        return PERMANENT
    return RETRY


# Why an attempt failed, as the metrics label it (tfmw_restarts_total{kind=...}).
HANG, OOM, SIGNAL, GROUP, EXIT = "hang", "oom", "signal", "group", "exit"
RESTART_KINDS = (GROUP, SIGNAL, OOM, HANG, EXIT)
GROUP_REASON = f"a peer failed or the group broke (exit {EXIT_RETRYABLE})"
BROKEN_REASON = "the group broke"  # a user command's traceback said so (entrypoint.groupbreak)
# A SIGKILLed trainer (the OOM killer's signal): -9, or 137 from a shell's SIGKILLed child.
SIGKILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)
# Signals a process sends itself when its code is at fault (a segfault, an abort): a crash that
# may repeat. A SIGKILL or SIGTERM came from outside (the OOM killer, a node's shutdown).
CRASH_SIGNALS = (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)


def attempt_reason(
    returncode: int,
    *,
    broken: str | None = None,
    broken_killed: bool = False,
    hung: Verdict | None = None,
    deadline_hit: bool = False,
    oom: str | None = None,
) -> str:
    """Why an attempt ended, for the log and the Restarted Event: the group broke (`broken`,
    the error its output named; `broken_killed`: ended after the grace), the watchdog's
    verdict (`hung`), the OOM killer (`oom`: oomkill.oom_cause's line, read after a SIGKILL),
    a signal, exit 75 or another exit code."""
    if broken is not None and returncode != EXIT_RETRYABLE:
        how = "ended after the grace" if broken_killed else f"exit {returncode}"
        return f"{BROKEN_REASON}: {broken} ({how})"
    if hung:
        return f"hang: no progress for {hung.timeout:.3g}s ({hung.basis})"
    if returncode in SIGKILLED and not deadline_hit and oom is not None:
        return oom  # "OOMKilled: ... at the container's memory limit (2.0 GiB): raise ..."
    if returncode < 0:
        return f"killed by signal {signal_name(-returncode)}"
    if returncode == EXIT_RETRYABLE:
        return GROUP_REASON
    return f"training exited with {returncode}"


def restart_kind(reason: str) -> str:
    """The kind of a failed attempt's reason, as attempt_reason words it: hang, oom, signal,
    group (exit 75: a peer failed or the group broke) or exit (any other exit code)."""
    if reason.startswith("hang:"):
        return HANG
    if reason.startswith(OOM_KILLED):
        return OOM
    if reason.startswith("killed by signal"):
        return SIGNAL
    return GROUP if reason == GROUP_REASON or reason.startswith(BROKEN_REASON) else EXIT


def signal_name(number: int) -> str:
    """SIGKILL, or the number for one Python has no name for (a real-time signal, SIGRTMIN+n)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def backoff_seconds(failures: int, first: float = 1.0, cap: float = 30.0) -> float:
    """The wait before restart number `failures` without progress: none for the first (an
    attempt that trained and then lost a peer restarts at once: the group re-forms as soon as
    the peer is back, and a wait here only adds to every recovery), then first, 2x first, ...
    up to cap, so a command that fails at once does not spin."""
    if failures <= 1:
        return 0.0
    return min(first * (2 ** (failures - 2)), cap)


@dataclass(frozen=True)
class AttemptOutcome:
    """What happened in the attempt that just ended."""

    returncode: int = EXIT_OK  # the command's exit status (-N: killed by signal N)
    progressed: bool = False  # its heartbeat moved: it trained
    reason: str = ""  # why it ended (attempt_reason), for the log and the Restarted Event
    deadline_hit: bool = False  # training.activeDeadlineSeconds passed while it ran
    last_error: str = ""  # the command's last `tfmw error ...` text, else its last output line
    stopped: bool = False  # a signal asked supervision to stop (the pod is going away)
    regroup_why: str | None = None  # the group's size changed: why (it must re-form), else None
    start_refused: str | None = None  # the kernel refused to start the command: start_problem's line
    # what the command left running when its main process exited, ended by the launcher
    # (entrypoint.reaper): "sleep (pid 42): ended with SIGTERM", ...
    left_running: tuple[str, ...] = ()
    # what its output said of its failure (entrypoint.crashprint): the exception line of the last
    # traceback it printed, its last error line, and whether it printed anything the attempt
    # before did not (or saved a checkpoint): progress the heartbeat cannot show
    exception: str | None = None
    error_line: str = ""
    new_output: bool = False


@dataclass(frozen=True)
class History:
    """What came before, and the limits that bound it."""

    max_restarts: int = 20  # training.maxRestarts: restarts without progress before giving up
    backoff_first: float = 1.0  # the second restart's wait without progress (then doubled)
    records_completion: bool = False  # the chief with shared storage: it writes COMPLETED for the command
    deadline_seconds: int = 0  # training.activeDeadlineSeconds, for the message only
    failures_without_progress: int = 0  # attempts in a row that failed without training
    same_error_limit: int = 2  # training.sameErrorLimit: attempts in a row ended by one error (0: off)
    last_error_print: str | None = None  # the last failed attempt's fingerprint (None: not countable)
    same_error_count: int = 0  # ... and how many attempts in a row it ended with no progress between


class Next(enum.Enum):
    """What the supervisor does next."""

    SUCCEED = "succeed"  # the command finished: Succeeded (after recording COMPLETED if `record`)
    FAIL = "fail"  # a failure no retry fixes: Failed with `reason`
    STOP = "stop"  # a signal stopped supervision: exit with `returncode`
    REGROUP = "regroup"  # the group's size changed: re-form it; not a failure, no back-off, not counted
    RESTART = "restart"  # restart in place after `delay`
    GIVE_UP = "give_up"  # too many restarts without progress: Failed (RestartLimit)
    REPEATED = "repeated"  # the same error ended training.sameErrorLimit attempts in a row: Failed (RepeatedError)
    DEADLINE = "deadline"  # training.activeDeadlineSeconds passed: Failed (DeadlineExceeded)


@dataclass(frozen=True)
class Decision:
    kind: Next
    history: History  # what the next decision sees
    say: str = ""  # the `tfmw launcher` line to log now ("": none)
    reason: Reason | None = None  # FAIL, GIVE_UP, REPEATED, DEADLINE: the run's terminal reason
    message: str = ""  # ... and its message
    record: bool = False  # SUCCEED: write COMPLETED for the command first
    returncode: int = EXIT_OK  # STOP: what the launcher exits with
    cause: str = ""  # REGROUP, RESTART: why, for the run's record (the Restarted Event)
    delay: float = 0.0  # RESTART: the back-off before the next attempt


def may_be_a_resize(outcome: AttemptOutcome) -> bool:
    """Could this attempt have stopped because the group's size changed, as another launcher
    saw it? Only then does the supervisor ask (it reads the API): a retryable exit, not
    stopped nor at the deadline, no resize known yet."""
    return (
        outcome.start_refused is None
        and not outcome.stopped
        and classify_exit(outcome.returncode) == RETRY
        and not outcome.deadline_hit
        and outcome.regroup_why is None
    )


def decide(outcome: AttemptOutcome, history: History) -> Decision:
    """What the supervisor does after `outcome`, given `history`."""
    if outcome.start_refused is not None:  # no retry makes the kernel start it
        message = outcome.start_refused
        return Decision(Next.FAIL, history, f"{message}; not retrying", Reason.BAD_CONFIG, message)
    returncode = outcome.returncode
    if outcome.stopped:
        return Decision(
            Next.STOP,
            history,
            f"stopped by signal; training exited with {returncode}",
            returncode=EXIT_SIGTERM if returncode != 0 else EXIT_OK,
        )
    exit_class = classify_exit(returncode)
    if exit_class == DONE:
        # A user command knows nothing of the marker: the chief records completion for it,
        # so a restarted pod of this run never trains again either.
        return Decision(Next.SUCCEED, history, "training finished", record=history.records_completion)
    if outcome.deadline_hit:
        message = deadline_message(history.deadline_seconds, f"training stopped (exit {returncode})")
        return Decision(Next.DEADLINE, history, reason=Reason.DEADLINE_EXCEEDED, message=message)
    if exit_class == RETRY and outcome.regroup_why is not None:
        why = outcome.regroup_why
        say = f"training stopped (exit {returncode}) for the group to re-form: {why}"
        return Decision(Next.REGROUP, history, say, cause=f"resize: {why}")
    if exit_class == PERMANENT:
        return _permanent(outcome, history)
    failures = 1 if outcome.progressed else history.failures_without_progress + 1
    history = replace(history, failures_without_progress=failures, **_same_error(outcome, history))
    if history.same_error_limit and history.same_error_count >= history.same_error_limit:
        return _repeated(history)
    if failures > history.max_restarts:
        return _give_up(outcome, history)
    delay = backoff_seconds(failures, first=history.backoff_first)
    say = f"restarting training in place in {delay:.0f}s: {outcome.reason}"
    return Decision(Next.RESTART, history, say, cause=outcome.reason, delay=delay)


def _permanent(outcome: AttemptOutcome, history: History) -> Decision:
    returncode = outcome.returncode
    reason = PERMANENT_REASONS[returncode]
    bad_config = reason is Reason.BAD_CONFIG
    what = "training refused its configuration" if bad_config else "training failed permanently"
    say = f"{what} (exit {returncode}); not retrying" + (": fix training.config" if bad_config else "")
    return Decision(Next.FAIL, history, say, reason, outcome.last_error or f"training exited with {returncode}")


def error_print(outcome: AttemptOutcome) -> str | None:
    """The fingerprint of a failed attempt that a repeat may count (entrypoint.crashprint); None
    for a failure that says nothing of the command's code: the group broke (a peer, the
    collective: never counted), a hang, a kill from outside (the OOM killer, a signal)."""
    if outcome.deadline_hit or restart_kind(outcome.reason) not in (EXIT, SIGNAL):
        return None
    if outcome.returncode < 0 and -outcome.returncode not in CRASH_SIGNALS:
        return None
    if outcome.exception is not None and group_error(outcome.exception) is not None:
        return None
    return crashprint.fingerprint(outcome.exception, outcome.reason, outcome.error_line)


def _same_error(outcome: AttemptOutcome, history: History) -> dict:
    """The repeat count after `outcome`: one more when the same fingerprint ended it with no
    progress since the attempt before (no new step, checkpoint or output), else a new count."""
    printed = error_print(outcome)
    repeated = (
        printed is not None
        and not outcome.progressed
        and not outcome.new_output
        and crashprint.same(printed, history.last_error_print)
    )
    count = history.same_error_count + 1 if repeated else (1 if printed is not None else 0)
    return {"last_error_print": printed, "same_error_count": count}


def _repeated(history: History) -> Decision:
    count, limit, printed = history.same_error_count, history.same_error_limit, history.last_error_print
    say = (
        f"ending the run: the same error ended {count} attempts in a row with no progress between them "
        f"(training.sameErrorLimit={limit}; fix the command, or set it higher, 0: off): {printed}"
    )
    return Decision(Next.REPEATED, history, say, Reason.REPEATED_ERROR, printed or "")


def _give_up(outcome: AttemptOutcome, history: History) -> Decision:
    restarts, limit = history.failures_without_progress - 1, history.max_restarts
    say = f"giving up: {restarts} restarts without progress (limit {limit}); last failure: {outcome.reason}"
    message = f"{restarts} restarts without progress (training.maxRestarts={limit}); last failure: {outcome.reason}" + (
        f": {outcome.last_error}" if outcome.last_error else ""
    )
    return Decision(Next.GIVE_UP, history, say, Reason.RESTART_LIMIT, message)


def deadline_message(deadline_seconds: int, detail: str) -> str:
    """The run's DeadlineExceeded message: `detail` says what became of training."""
    return f"training.activeDeadlineSeconds={deadline_seconds} passed; {detail}"


def finished_message(detail: str) -> str:
    """Succeeded after this attempt: `detail` is rundir.completed_detail's (' steps=315 ...')."""
    return f"training finished:{detail or ' exit 0'}"


def found_message(detail: str) -> str:
    """Succeeded before any attempt: the COMPLETED marker was there already."""
    return f"COMPLETED marker found:{detail or ' the run finished'}"
