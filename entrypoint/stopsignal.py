"""SIGTERM and SIGINT are caught from the first line of `python -m entrypoint` on.

In a container the launcher is PID 1, and the kernel does not deliver to PID 1 a signal it
has no handler for (pid_namespaces(7)). A SIGTERM that arrives while the launcher still
imports its modules is lost, and the kubelet waits out the pod's whole
terminationGracePeriodSeconds (120 s) before its SIGKILL. That happens whenever a pod is
deleted just as it starts. Example: a redeploy of a Failed run brings both workers back,
the first to start finds the run Failed and scales the StatefulSet to 0, and the other one
is still importing. CI saw `Pending termination: 1` outlast helm's 90 s wait.

So `python -m entrypoint` calls catch_early() before any other import. Each command then takes
over: the launcher installs its own handler, which also hears what came before (hand_over);
the short commands (tf-config, check-peers, logs) exit as the default action would have
outside PID 1 (exit_on_signal). What is left is the interpreter's own start, before its first
line runs (tens of milliseconds here). Standard library only: it runs before everything else.
"""

from __future__ import annotations

import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_caught: list[int] = []
_catching = False


def _record(signum: int, _frame) -> None:
    _caught.append(signum)


def catch_early() -> None:
    """Record stop signals until a command takes them over (`python -m entrypoint` only)."""
    global _catching
    _catching = True
    for sig in STOP_SIGNALS:
        signal.signal(sig, _record)


def caught() -> bool:
    """Has a stop signal come since catch_early(), not yet handed over?"""
    return bool(_caught)


def hand_over(handler) -> None:
    """Install `handler` for the stop signals, then call it for each one caught before."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    early, _caught[:] = list(_caught), []
    for signum in early:
        handler(signum, None)


def _exit(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)


def exit_on_signal() -> None:
    """For a command without stop handling of its own, under `python -m entrypoint`: a stop
    signal, also one caught before, ends it with 128 + its number. Elsewhere (a test calling
    the command in its own process) nothing changes."""
    if _catching:
        hand_over(_exit)
