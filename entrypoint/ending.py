"""The run's end, as one launcher sees it (docs/lifecycle.md): the terminal state recorded, the
StatefulSet scaled to 0 if the policy says so, and the pod idle until it is deleted (an exited
container would be restarted: CrashLoopBackOff, resources held). Also the ends that are not the
run's: a pod stopped while the run goes on (suspended, evicted by its queue, or just this pod),
a run that had ended before this launcher started, and a pod environment the launcher refuses.
Where a platform owns the lifecycle (TF_CONFIG preset, an Indexed Job, a JobSet) the end is an
exit code instead.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from . import loglines
from .errors import EXIT_OK, ConfigError
from .goodput import Accounting
from .kubeapi import APIError, KubeAPI
from .lifecycle import (
    EDGES,
    FAILED_ALREADY,
    SUCCEEDED_ALREADY,
    Phase,
    Reason,
    RunState,
    exit_code,
    fresh,
    rfc3339,
    status_message,
)
from .queueing import evicted_by_queue, requeued_message
from .regroup import GroupSize
from .runcontext import Run
from .rundir import completed_fields
from .settings import POLICIES, LauncherSettings, rbac_off
from .status import StatusRecorder
from .tracker import RunTracker

FLUSH_SECONDS = 30.0  # at the end: how long the status, Events and scale may take
IDLE_RETRY_SECONDS = (10.0, 300.0)  # while idle: retry a failed terminal write / scale, backing off


def goodput_fields(state: RunState) -> dict[str, str]:
    """`goodput=0.8731 badput="restart=9.8 startup=5.1 ..."` for the `tfmw completed` line."""
    account = Accounting.from_fields(state.productive_seconds, state.badput_seconds)
    return account.line_fields() if account is not None else {}


def _env_name(env: Mapping[str, str], key: str) -> str | None:
    """A name from the environment, only if it is a plausible Kubernetes name (used when the
    settings themselves were refused, to still record the failure)."""
    value = env.get(key, "")
    return value if re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", value) else None


class RunEnd:
    """How one launcher ends its part of the run."""

    def __init__(
        self,
        log: Callable[[str], None],
        stopping: threading.Event,
        flush_seconds: float = FLUSH_SECONDS,
        idle_retry: tuple[float, float] = IDLE_RETRY_SECONDS,
    ):
        self.log = log
        self.stopping = stopping
        self.flush_seconds = flush_seconds
        self.idle_retry = idle_retry

    def say(self, text: str) -> None:
        """One `tfmw launcher <text>` line."""
        self.log(loglines.line(loglines.LAUNCHER, text=text))

    # -- a pod stopped while the run goes on ---------------------------------------------
    def stopped(self, run: Run, returncode: int, size: GroupSize) -> int:
        """The pod is going away (SIGTERM) and training stopped, at the group's checkpoint when it
        trained. Where its StatefulSet is at 0 replicas while the run is not over, that is a
        suspend (`suspend: true`, or a scale to 0 by hand): the chief records Suspended, so a
        later `suspend: false` resumes the run from that checkpoint. Where its queue evicts the
        whole group, the chief records Waiting: it comes back once readmitted."""
        tracker = run.tracker
        if run.platform or not tracker.is_chief or not run.settings.resizable or tracker.state.terminal:
            return returncode
        replicas = size.read(run.settings)
        if replicas is None:
            self.say(
                f"stopped: the group's size cannot be read ({size.error}), so a suspend is not told from "
                "an eviction; nothing recorded"
            )
            return returncode
        step = tracker.state.last_checkpoint_step or 0
        if replicas != 0:
            evicted = self._evicted_by_queue(run)
            # the whole group is going, and comes back once the queue admits it
            if evicted and (tracker.state.phase, Phase.WAITING) in EDGES:
                tracker.transition(Phase.WAITING, message=requeued_message(evicted, step))
                run.recorder.flush(self.flush_seconds)
            return returncode  # else this pod alone is going (a drain, a preemption): the group re-forms
        tracker.transition(
            Phase.SUSPENDED,
            message=f"suspended at step {step} (the StatefulSet at 0 replicas: suspend: true): the workers are "
            "removed, the run and its storage kept; suspend: false (make resume) continues it from there",
        )
        run.recorder.flush(self.flush_seconds)
        return returncode

    @staticmethod
    def _evicted_by_queue(run: Run) -> str | None:
        """Kueue's reason when it is evicting this pod's group (entrypoint/queueing.py)."""
        settings = run.settings
        if run.api is None or not settings.namespace or not settings.pod_name or "pods.get" in settings.rbac_off:
            return None
        try:
            return evicted_by_queue(run.api.get_pod(settings.namespace, settings.pod_name))
        except APIError:
            return None

    # -- a run that ended before this launcher started -----------------------------------
    def ended_already(self, run: Run) -> int:
        """The run Succeeded or Failed before this launcher started: the chief says why the
        workers came back, and they go away again."""
        recorder, plan = run.recorder, run.plan
        if run.tracker.is_chief and plan.action == SUCCEEDED_ALREADY:
            if plan.state != run.recorded:  # the marker is there, the status lags behind: record it
                recorder.record(plan.state)
            recorder.event("Succeeded", "Normal", f"run {run.run_id} already completed: not training again")
        elif run.tracker.is_chief and plan.action == FAILED_ALREADY:
            recorder.event(
                "Failed",
                "Warning",
                f"run {run.run_id} already Failed ({plan.state.reason}: {plan.state.message}) at "
                f"revision {run.settings.pod_revision}; not retrying: fix the values (a changed pod "
                "template trains again) or set a new training.runId",
            )
        return self.finish(run.tracker, run.settings, run.platform, run.run_dir)

    # -- a pod environment the launcher refuses ------------------------------------------
    def refused(self, env: Mapping[str, str], err: ConfigError, api_timeout: float) -> int:
        """A bad environment in the chart's StatefulSet: Failed (BadConfig), recorded with what
        can still be trusted, then idle: exiting would only crash-loop on the same values."""
        api_dir = env.get("TFMW_API_DIR") if env.get("TFMW_API_DIR", "").startswith("/") else None
        recorder = StatusRecorder(
            KubeAPI.from_env(env, api_dir, timeout=api_timeout),
            namespace=_env_name(env, "TFMW_NAMESPACE"),
            configmap=_env_name(env, "TFMW_STATUS_CONFIGMAP"),
            statefulset=_env_name(env, "TFMW_STATEFULSET"),
            pod_name=_env_name(env, "TFMW_POD_NAME"),
            log=self.log,
            pod_uid=env.get("TFMW_POD_UID", "")[:64],
            events="events" not in rbac_off(env),
            fence="pods.get" not in rbac_off(env),
            no_api_server=env.get("TFMW_NO_API_SERVER") in ("1", "true", "yes"),
        )
        run_id = _env_name(env, "TFMW_RUN_ID") or "default"
        revision = env.get("TFMW_POD_REVISION", "")[:63]
        ordinal = re.search(r"-(0|[1-9][0-9]*)$", env.get("TFMW_POD_NAME", ""))
        tracker = RunTracker(
            fresh(run_id, revision, rfc3339(time.time())),
            recorder,
            is_chief=False,
            worker_index=int(ordinal.group(1)) if ordinal else -1,
            log=self.log,
        )
        tracker.transition(Phase.FAILED, Reason.BAD_CONFIG, str(err))
        on_failure = env.get("TFMW_ON_FAILURE") if env.get("TFMW_ON_FAILURE") in POLICIES else "idle"
        return self.end(tracker, recorder, on_failure, scale_to_zero=on_failure == "scaleToZero", run_dir=None)

    # -- the run's end -------------------------------------------------------------------
    def finish(self, tracker: RunTracker, settings: LauncherSettings, platform: bool, run_dir: Path | None) -> int:
        state = tracker.state
        if platform:
            self.log_end(state, run_dir)
            return exit_code(state)
        succeeded = state.phase is Phase.SUCCEEDED
        policy = settings.on_success if succeeded else settings.on_failure
        # Succeeded is the chief's to decide and scale to zero; a Failed run is scaled to zero by any
        # worker that knows of it (a crash-looping or idle group would hold its GPUs).
        scale_to_zero = policy == "scaleToZero" and (not succeeded or tracker.is_chief)
        return self.end(tracker, tracker.recorder, policy, scale_to_zero, run_dir)

    def log_end(self, state: RunState, run_dir: Path | None) -> None:
        if state.phase is Phase.SUCCEEDED:
            self.log(
                loglines.line(
                    loglines.COMPLETED, run=state.run_id, **completed_fields(run_dir), **goodput_fields(state)
                )
            )
            return
        self.log(
            loglines.line(
                loglines.FAILED,
                run=state.run_id,
                reason=state.reason,
                exit_code=exit_code(state),
                message=state.message,
            )
        )
        # the CLI's one-line refusal format (`tfmw: <what>`), as cli.main prints a LauncherError
        print(f"tfmw: {state.reason}: {status_message(state.message)}", file=sys.stderr, flush=True)

    def end(
        self, tracker: RunTracker, recorder: StatusRecorder, policy: str, scale_to_zero: bool, run_dir: Path | None
    ) -> int:
        state = tracker.state
        succeeded = state.phase is Phase.SUCCEEDED
        self.log_end(state, run_dir)
        can_scale_to_zero = scale_to_zero and recorder.can_scale_to_zero
        if scale_to_zero:
            recorder.scale_to_zero()  # without API access: says so once, and nothing to retry
        recorder.flush(self.flush_seconds)
        what = "this run is complete" if succeeded else f"the run failed ({state.reason}); not retrying"
        setting = f"completion.{'onSuccess' if succeeded else 'onFailure'}: scaleToZero"
        if policy == "scaleToZero" and not recorder.can_scale_to_zero and recorder.no_api_server:
            how = "no API server by design (a local run): nothing is recorded or scaled to 0"
        elif policy == "scaleToZero" and scale_to_zero and not can_scale_to_zero:
            how = f"no API access to scale to 0 ({setting}): uninstall the release to free its resources"
        elif policy == "scaleToZero":
            by = "this worker" if scale_to_zero else "the chief"  # a worker only leaves a success to the chief
            how = f"waiting for the StatefulSet controller to delete this pod (scaled to 0 by {by}, {setting})"
        elif succeeded:
            how = "uninstall the release or set a new training.runId to train again"
        else:
            how = (
                "fix the cause, then helm upgrade (a changed pod template trains again) or set a new "
                "training.runId; uninstall the release to free its resources"
            )
        self.say(f"idle: {what}; {how}")
        self.idle(recorder, can_scale_to_zero)
        return EXIT_OK

    def idle(self, recorder: StatusRecorder, scale_to_zero: bool) -> None:
        """Sleep until SIGTERM (the pod is deleted); meanwhile retry, with back-off, a terminal
        status write or a scale to 0 that failed (an API server that was restarting)."""
        delay, cap = self.idle_retry
        while True:
            retry = (scale_to_zero and not recorder.scaled_to_zero) or recorder.status_ok is False
            if self.stopping.wait(delay if retry else None):
                return
            recorder.retry_unsent()
            delay = min(delay * 2, cap)
