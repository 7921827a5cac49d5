"""SIGTERM handling that TensorFlow cannot take over.

With a multi-worker TF_CONFIG, TensorFlow's coordination agent installs its own C-level SIGTERM
handler while the strategy is created (its preemption notifier), replacing Python's: a plain
`signal.signal` handler silently stops working, and SIGTERM no longer ends the process. So
SIGTERM is blocked in every thread (threads TensorFlow creates later inherit the mask) and one
thread takes it with `sigwait`, whatever handler is installed.

What SIGTERM does depends on the phase:
- starting (TensorFlow import, waiting for peers, restore): nothing to save, exit 143 at once;
- training: set the flag; the loop agrees with the group at the next checkpoint boundary;
- finishing (export, COMPLETED): let it finish; the run ends by itself.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from .. import loglines
from ..errors import EXIT_SIGTERM


class SigtermFlag:
    def __init__(self, exit_now=os._exit):
        self.raised = False
        self.phase = "starting"
        self._exit_now = exit_now

    def install(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        threading.Thread(target=self._wait, name="tfmw-sigterm", daemon=True).start()

    def _wait(self) -> None:
        while True:
            signal.sigwait({signal.SIGTERM})
            self.handle()

    def handle(self) -> None:
        if self.phase == "starting":
            print(
                loglines.notice(loglines.SIGTERM, "stopping before training started (nothing to checkpoint)"),
                flush=True,
            )
            sys.stderr.flush()
            self._exit_now(EXIT_SIGTERM)
        elif self.phase == "training" and not self.raised:
            print(
                loglines.notice(loglines.SIGTERM, "will checkpoint and stop at the next checkpoint boundary"),
                flush=True,
            )
        self.raised = True

    def training_started(self) -> None:
        self.phase = "training"

    def training_finished(self) -> None:
        self.phase = "finishing"

    def __call__(self) -> bool:
        return self.raised
