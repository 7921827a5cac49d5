"""`python -m entrypoint run`: from the pod's environment to a finished run (docs/lifecycle.md).

1. identity and TF_CONFIG (a StatefulSet pod, an Indexed Job pod, or a platform's TF_CONFIG);
2. the run's record: the chief's COMPLETED marker and the status ConfigMap decide whether
   to train at all (a redeployed finished or failed run does not train again);
3. peers, then supervision (entrypoint.supervisor), with the activeDeadlineSeconds; where the
   group's size is its StatefulSet's spec.replicas (read through the API), a change of it
   stops the group at a checkpoint and re-forms it at the new size (a resize);
4. the end: where a platform owns the lifecycle (TF_CONFIG preset, an Indexed Job or a
   JobSet) exit 0 or a permanent non-zero code; in the chart's StatefulSet record the
   terminal state, scale the StatefulSet to 0 if the policy says so, and idle until the pod
   is deleted (an exited container would be restarted: CrashLoopBackOff, resources held).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from . import loglines, metrics, stopsignal
from .cluster import build_tf_config, check_tf_config_size, cluster_hosts, is_chief, is_evaluator, parse_tf_config
from .errors import EXIT_OK, EXIT_SIGTERM, ConfigError, PeersNotFound
from .goodput import Accounting, Ledger
from .identity import (
    INDEXED_JOB,
    PRESET_TF_CONFIG,
    STATEFULSET,
    PodIdentity,
    parse_indexed_hostname,
    parse_pod_name,
    platform_owns_lifecycle,
    pod_kind,
)
from .kubeapi import APIError, KubeAPI
from .lifecycle import (
    EDGES,
    FAILED_ALREADY,
    SUCCEEDED_ALREADY,
    Phase,
    Reason,
    RunState,
    StartPlan,
    deadline_epoch,
    exit_code,
    fresh,
    parse_rfc3339,
    plan_start,
    recorded_final,
    rfc3339,
    status_message,
)
from .nodeloss import lost_with_node, pod_address
from .peers import wait_for_peers
from .podlog import PodLog, log_path
from .queueing import evicted_by_queue, requeued_message
from .settings import INDEXED_JOB_REQUIRED, POLICIES, LauncherSettings, load_settings
from .standby import is_builtin_trainer, standby_plan
from .status import StatusRecorder
from .supervisor import (
    Ending,
    MarkerUnreadable,
    Supervisor,
    SupervisorConfig,
    command_problem,
    completed_fields,
    completed_marker,
    marker_exists,
    restart_kind,
    shared_dir_problem,
)
from .tracker import RunTracker
from .waiting import NAMED_AT_MOST, Waiting, WaitingNote, pod_waiting_reason

DEFAULT_TRAINING_COMMAND = ("python", "-m", "entrypoint.training")
FLUSH_SECONDS = 30.0  # at the end: how long the status, Events and scale may take
MARKER_RETRY_SECONDS = 60.0  # a user command finished: how long writing COMPLETED may be retried
IDLE_RETRY_SECONDS = (10.0, 300.0)  # while idle: retry a failed terminal write / scale, backing off
WAITING_PODS_CHECKED = 20  # the new workers' pods read per resize poll, for why they are not running
# A peer lost with its node (entrypoint/nodeloss.py): looked for this often, and only once
# the group has made no progress for STALLED_SECONDS (no API reads while training goes on).
NODE_LOSS_POLL_SECONDS = 5.0
STALLED_SECONDS = 10.0
PEER_PROBE_SECONDS = 2.0  # a lost peer's TF port must not take a connection within this
RESIZE_POLL_SECONDS = 5.0  # a resizable group's launchers read their StatefulSet's replicas this often

IDENTITY = {STATEFULSET: "statefulset", PRESET_TF_CONFIG: "preset", INDEXED_JOB: "indexed-job"}


class OutsideGroup(Exception):
    """This StatefulSet pod's ordinal is not below the group's size: it is being scaled away."""

    def __init__(self, ordinal: int, size: int):
        super().__init__(f"worker {ordinal} is outside the group of {size}")
        self.ordinal, self.size = ordinal, size


def statefulset_replicas(env: Mapping[str, str], settings: LauncherSettings, timeout: float = 5.0) -> int:
    """The pod's StatefulSet's spec.replicas, read through its scale subresource (the chart's
    Role allows `get` on it). ConfigError without API credentials or when the API refuses
    (401/403/404: no retry changes that); APIError for what may pass (a timeout)."""
    api = KubeAPI.from_env(env, settings.api_dir, timeout=timeout)
    if api is None or not settings.namespace or not settings.statefulset:
        raise ConfigError("no API access (TFMW_API_DIR) to read the group's size; set TFMW_REPLICAS")
    where = f"statefulset {settings.statefulset}'s scale"
    try:
        # the API server leaves out a replicas of 0 (omitempty): a scale with a spec and no
        # replicas is at 0
        replicas = (api.get_scale(settings.namespace, settings.statefulset).get("spec") or {}).get("replicas", 0)
    except APIError as err:
        if err.status in (401, 403, 404):
            raise ConfigError(
                f"cannot read the group's size from {where}: {err}; the chart's Role allows it "
                "(rbac.create), or set TFMW_REPLICAS"
            ) from None
        raise
    if not isinstance(replicas, int) or replicas < 0:
        raise APIError("bad answer", f"{where} has spec.replicas {replicas!r}")
    return replicas


def resolve_tf_config(
    env: Mapping[str, str],
    hostname: str | None = None,
    group_size: Callable[[LauncherSettings], int] | None = None,
) -> tuple[dict, LauncherSettings, str]:
    """(TF_CONFIG, settings, pod kind) — a platform's TF_CONFIG is validated and kept; an
    Indexed Job pod's is derived from its hostname and JOB_COMPLETION_INDEX; a StatefulSet
    pod's from its name, and from `group_size` (the StatefulSet's replicas, read through the
    API) where the settings are resizable."""
    kind = pod_kind(env)
    if kind == PRESET_TF_CONFIG:
        return parse_tf_config(env["TF_CONFIG"].strip()), load_settings(env, need_derivation=False), kind
    if kind == INDEXED_JOB:
        settings = load_settings(env, required=INDEXED_JOB_REQUIRED)
        # The container runtime sets HOSTNAME to the pod's hostname; the UTS name is the same.
        host = hostname or env.get("HOSTNAME") or socket.gethostname()
        identity = parse_indexed_hostname(host, env["JOB_COMPLETION_INDEX"], settings.replicas)
        return build_tf_config(settings, identity), settings, kind
    settings = load_settings(env)
    if settings.resizable:
        if group_size is None:
            raise ConfigError("TFMW_REPLICAS not set; the chart sets it, or the launcher reads the group's size")
        size = group_size(settings)
        ordinal = parse_pod_name(settings.pod_name, 1 << 30, settings.statefulset).ordinal
        if ordinal >= size:
            raise OutsideGroup(ordinal, size)
        settings = replace(settings, replicas=size)
    identity = parse_pod_name(settings.pod_name, settings.replicas, settings.statefulset)
    return build_tf_config(settings, identity), settings, kind


def start_ledger(recorded: RunState | None, state: RunState, launched: float, beats: bool) -> Ledger:
    """This launcher's time account: the recorded one carried on when it continues the same
    attempt of the run (its pod was recreated), the time since that record counted as restart."""
    same_attempt = (
        recorded is not None
        and recorded.run_id == state.run_id
        and not recorded.terminal
        and bool(recorded.started_at)
        and recorded.started_at == state.started_at
    )
    carried = Accounting.from_fields(recorded.productive_seconds, recorded.badput_seconds) if same_attempt else None
    # The time since the record is a restart's (the pod was recreated), not a suspend's: a run
    # suspended on purpose is not losing time.
    counted = carried is not None and recorded.phase is not Phase.SUSPENDED
    last = parse_rfc3339(recorded.updated_at) if counted else None
    return Ledger(launched, beats=beats, carried=carried, absent_seconds=launched - last if last is not None else 0.0)


def goodput_fields(state: RunState) -> dict[str, str]:
    """`goodput=0.8731 badput="restart=9.8 startup=5.1 ..."` for the `tfmw completed` line."""
    account = Accounting.from_fields(state.productive_seconds, state.badput_seconds)
    return account.line_fields() if account is not None else {}


@dataclass
class _Run:
    """One launcher's view of the run, as `run`'s steps share it."""

    tf_config: dict
    settings: LauncherSettings
    platform: bool  # a platform (JobSet, TFJob, ...) owns the lifecycle: no run record
    run_id: str
    run_dir: Path | None  # on mounted shared storage; None for an object store or no storage
    recorder: StatusRecorder
    recorded: RunState | None  # the status ConfigMap's record when this launcher started
    plan: StartPlan
    tracker: RunTracker
    unreadable: str | None  # why the COMPLETED marker could not be read, if so
    child_env: dict[str, str]  # the training command's environment (with TF_CONFIG)
    deadline: float | None  # epoch seconds of training.activeDeadlineSeconds
    hosts: list[str]  # the peers' host names
    workers: int  # the group's size (TF_CONFIG's tasks)
    identity: PodIdentity | None  # a StatefulSet pod's: its TF_CONFIG is rebuilt at a new size
    heartbeat: Path | None = None  # the trainer's heartbeat file, chosen before training
    resize_to: int | None = None  # the size a resize was asked for, until the group re-forms
    resized_from: int | None = None  # the size before the last resize (its new workers: from there up)
    in_peer_wait: bool = False  # in the DNS peer wait (its deadline: peers.timeoutSeconds)
    waiting: WaitingNote | None = None  # the chief's one "waiting for workers" message

    def waiting_state(self) -> Waiting:
        return Waiting(
            phase=self.tracker.state.phase,
            workers=self.workers,
            resized_from=self.resized_from,
            in_peer_wait=self.in_peer_wait,
            peer_timeout_seconds=self.settings.peer_timeout_seconds,
        )


class _Stopped(Exception):
    """SIGTERM while waiting (for peers): the pod is going away."""


class _SizeChanged(Exception):
    """The group's size changed while waiting for its peers: wait for the new group instead."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


class _Failure(Exception):
    def __init__(self, reason: Reason, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class _EndedElsewhere(Exception):
    def __init__(self, state: RunState):
        super().__init__(state.phase)
        self.state = state


def _answers(address: str, port: int) -> bool:
    """Does anything take a TCP connection on address:port within PEER_PROBE_SECONDS? A pod
    whose processes run does, however slow its training; a lost or cut-off one does not."""
    try:
        with socket.create_connection((address, port), timeout=PEER_PROBE_SECONDS):
            return True
    except OSError:
        return False


def _env_name(env: Mapping[str, str], key: str) -> str | None:
    """A name from the environment, only if it is a plausible Kubernetes name (used when the
    settings themselves were refused, to still record the failure)."""
    value = env.get(key, "")
    return value if re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", value) else None


class Launcher:
    def __init__(
        self,
        env: Mapping[str, str],
        command: Sequence[str],
        *,
        log: Callable[[str], None] | None = None,
        hostname: str | None = None,
        flush_seconds: float = FLUSH_SECONDS,
        idle_retry: tuple[float, float] = IDLE_RETRY_SECONDS,
        api_timeout: float = 5.0,
        marker_retry_seconds: float = MARKER_RETRY_SECONDS,
    ):
        self.env = dict(env)
        self.command = list(command) or list(DEFAULT_TRAINING_COMMAND)
        self._print = log or (lambda line: print(line, flush=True))
        self.podlog: PodLog | None = None  # the log kept on shared storage, once the run dir is known
        self.hostname = hostname
        self.flush_seconds = flush_seconds
        self.idle_retry = idle_retry
        self.api_timeout = api_timeout
        self.marker_retry_seconds = marker_retry_seconds
        self.stopping = threading.Event()
        self.supervisor: Supervisor | None = None
        self.size_error = ""  # why the group's size could not be read, the last time

    def log(self, line: str) -> None:
        """Print one line; also keep it with the run (entrypoint.podlog) once that is set up."""
        self._print(line)
        if self.podlog is not None:
            self.podlog.line(line)

    def _keep_log(self, settings: LauncherSettings, run_dir: Path | None) -> None:
        """From here on, this pod's log (launcher and trainer) is also kept in <run>/logs."""
        if settings.keep_log_mib and run_dir is not None and settings.pod_name:
            self.podlog = PodLog(log_path(run_dir, settings.pod_name), settings.keep_log_mib << 20, say=self._say_only)

    def _say_only(self, text: str) -> None:  # PodLog's error line: printed, never kept (it could not be)
        self._print(loglines.line(loglines.LAUNCHER, text=text))

    # -- signals -------------------------------------------------------------------------
    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        if self.supervisor is not None:  # the trainer hears it before anyone acts on `stopping`
            self.supervisor.request_stop(signum)
        self.stopping.set()

    def _on_signal(self, signum: int, _frame) -> None:
        # Not request_stop() here: a handler runs in the main thread, which may be inside
        # Event.wait() holding that Event's (non-reentrant) lock; set() would then deadlock and
        # SIGTERM would never reach the trainer. A thread waits its turn for the lock instead.
        threading.Thread(target=self.request_stop, args=(signum,), name="tfmw-stop", daemon=True).start()

    def _install_signals(self) -> None:
        if threading.current_thread() is threading.main_thread():
            stopsignal.hand_over(self._on_signal)  # with one that came during the imports

    # -- the run -------------------------------------------------------------------------
    def run(self) -> int:
        """The run's life (docs/lifecycle.md): the TF_CONFIG, the run's record, a run that
        already ended, the checks before training, the peer wait, supervised training, the end."""
        self._install_signals()
        platform = platform_owns_lifecycle(pod_kind(self.env))
        try:
            tf_config, settings, kind = resolve_tf_config(self.env, self.hostname, self._group_size_at_start)
            encoded = json.dumps(tf_config, separators=(",", ":"))
            check_tf_config_size(encoded)  # refuse now, not as an exec error of the training command
        except ConfigError as err:
            if platform:
                raise  # one line and exit 2: the platform's failure policy takes it from here
            return self._refused(err)
        except OutsideGroup as outside:
            return self._outside(outside)
        except _Stopped:
            self._say("stopped by signal while reading the group's size")
            return EXIT_SIGTERM
        self._announce(tf_config, kind, platform)
        if is_evaluator(tf_config):
            return self._evaluate(encoded)
        run = self._open_run(tf_config, encoded, settings, platform, kind)
        if run.plan.action in (SUCCEEDED_ALREADY, FAILED_ALREADY):
            return self._ended_already(run)
        try:
            self._check_before_training(run)
            ending = self._train(run)
        except _Stopped:
            self._say("stopped by signal while waiting for peers")
            return self._stopped(run, EXIT_SIGTERM)
        except _Failure as failure:
            run.tracker.transition(Phase.FAILED, failure.reason, failure.message)
            return self._finish(run.tracker, settings, platform, run.run_dir)
        except _EndedElsewhere as ended:
            run.tracker.adopt(ended.state)
            return self._finish(run.tracker, settings, platform, run.run_dir)
        if ending.phase is None:
            return self._stopped(run, ending.returncode)
        run.tracker.transition(ending.phase, ending.reason, ending.message)
        return self._finish(run.tracker, settings, platform, run.run_dir)

    def _stopped(self, run: _Run, returncode: int) -> int:
        """The pod is going away (SIGTERM) and training stopped, at the group's checkpoint when it
        trained. Where its StatefulSet is at 0 replicas while the run is not over, that is a
        suspend (`suspend: true`, or a scale to 0 by hand): the chief records Suspended, so a
        later `suspend: false` resumes the run from that checkpoint."""
        tracker = run.tracker
        if run.platform or not tracker.is_chief or not run.settings.resizable or tracker.state.terminal:
            return returncode
        size = self._read_size(run.settings)
        if size is None:
            self._say(
                f"stopped: the group's size cannot be read ({self.size_error}), so a suspend is not told from "
                "an eviction; nothing recorded"
            )
            return returncode
        step = tracker.state.last_checkpoint_step or 0
        if size != 0:
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

    def _evicted_by_queue(self, run: _Run) -> str | None:
        """Kueue's reason when it is evicting this pod's group (entrypoint/queueing.py)."""
        api = KubeAPI.from_env(self.env, run.settings.api_dir, timeout=self.api_timeout)
        if api is None or not run.settings.namespace or not run.settings.pod_name:
            return None
        try:
            return evicted_by_queue(api.get_pod(run.settings.namespace, run.settings.pod_name))
        except APIError:
            return None

    def _announce(self, tf_config: dict, kind: str, platform: bool) -> None:
        task = tf_config["task"]
        self.log(
            loglines.line(
                loglines.LAUNCHER,
                task=f"{task['type']}:{task['index']}",
                workers=sum(len(v) for v in tf_config["cluster"].values()),
                identity=IDENTITY[kind],
                lifecycle="platform" if platform else "launcher",
            )
        )

    def _open_run(self, tf_config: dict, encoded: str, settings: LauncherSettings, platform: bool, kind: str) -> _Run:
        """The run's record and COMPLETED marker read, the start planned (plan_start), the
        tracker and the /metrics endpoint up."""
        task = tf_config["task"]
        run_id = settings.run_id or "default"
        # An object-store URI (gs://, s3://) is the trainer's business (tf.io.gfile); the
        # launcher never imports TF, so it looks for the completion marker on mounted paths only.
        run_dir = (
            Path(settings.shared_dir) / settings.run_id
            if settings.shared_dir and settings.run_id and "://" not in settings.shared_dir
            else None
        )
        self._keep_log(settings, run_dir)
        recorder = self._recorder(settings if not platform else None)
        launched = time.time()
        recorded = recorder.read()
        try:
            completed, unreadable = marker_exists(completed_marker(run_dir)), None
        except MarkerUnreadable as err:  # not known: never train (it may have finished)
            completed, unreadable = False, str(err)
        plan = plan_start(recorded, run_id, settings.pod_revision, completed, rfc3339(launched))
        tracker = RunTracker(
            plan.state,
            recorder,
            is_chief=is_chief(tf_config),
            worker_index=task["index"],
            log=self.log,
            ledger=start_ledger(recorded, plan.state, launched, is_builtin_trainer(self.command)),
            grace_seconds=settings.grace_seconds,
        )
        self._serve_metrics(settings, tracker, task)
        self._say(f"run={run_id} revision={settings.pod_revision or '-'}: {plan.why}")
        identity = (
            parse_pod_name(settings.pod_name, settings.replicas, settings.statefulset) if kind == STATEFULSET else None
        )
        return _Run(
            tf_config=tf_config,
            settings=settings,
            platform=platform,
            run_id=run_id,
            run_dir=run_dir,
            recorder=recorder,
            recorded=recorded,
            plan=plan,
            tracker=tracker,
            unreadable=unreadable,
            child_env=dict(self.env, TF_CONFIG=encoded),
            deadline=deadline_epoch(plan.state.started_at, settings.active_deadline_seconds, launched),
            hosts=cluster_hosts(tf_config),
            workers=sum(len(v) for v in tf_config["cluster"].values()),
            identity=identity,
            waiting=WaitingNote(tracker, identity.host_prefix) if identity is not None else None,
        )

    def _ended_already(self, run: _Run) -> int:
        """The run Succeeded or Failed before this launcher started: the chief says why the
        workers came back, and they go away again."""
        recorder, plan = run.recorder, run.plan
        if run.tracker.is_chief and plan.action == SUCCEEDED_ALREADY:
            if plan.state != run.recorded:  # the marker is there, the status lags behind: record it
                recorder.record(plan.state)
            recorder.event("Succeeded", "Normal", f"run {run.run_id} already completed: not training again")
        elif run.tracker.is_chief:
            recorder.event(
                "Failed",
                "Warning",
                f"run {run.run_id} already Failed ({plan.state.reason}: {plan.state.message}) at "
                f"revision {run.settings.pod_revision}; not retrying: fix the values (a changed pod "
                "template trains again) or set a new training.runId",
            )
        return self._finish(run.tracker, run.settings, run.platform, run.run_dir)

    def _check_before_training(self, run: _Run) -> None:
        """What no restart can fix fails the run now (_Failure), before the peer wait."""
        settings = run.settings
        if run.deadline is not None and time.time() >= run.deadline:
            raise _Failure(
                Reason.DEADLINE_EXCEEDED,
                f"training.activeDeadlineSeconds={settings.active_deadline_seconds} passed "
                f"(run started {run.plan.state.started_at}); not starting training",
            )
        if run.unreadable:
            raise _Failure(Reason.BAD_CONFIG, run.unreadable)
        problem = command_problem(self.command, run.child_env)
        if problem:  # no retry makes a missing program appear
            raise _Failure(Reason.BAD_CONFIG, problem)
        problem = shared_dir_problem(run.run_dir) if run.tracker.is_chief else None
        if problem:  # the chief could never record completion: do not train first
            raise _Failure(Reason.BAD_CONFIG, problem)
        try:
            run.heartbeat = Path(tempfile.gettempdir()) / f"tfmw-heartbeat-{os.getpid()}"
        except OSError as err:  # FileNotFoundError: no writable TMPDIR, /tmp, /var/tmp or cwd
            raise _Failure(
                Reason.BAD_CONFIG,
                f"no writable temporary directory for the heartbeat file ({err}); mount an emptyDir at /tmp",
            ) from None

    def _train(self, run: _Run) -> Ending:
        """The peer wait, then the training command under the supervisor (restarts in place,
        the watchdog, the deadline) until it ends."""
        task = run.tf_config["task"]
        resumed_event = (
            ("Restarted", "Warning", f"worker {task['index']}'s pod restarted, {run.tracker.resume_point()}")
            if run.plan.resumed
            else ("Resumed", "Normal", run.plan.state.message)
            if run.recorded is not None and run.recorded.phase is Phase.SUSPENDED
            else None
        )
        run.tracker.record_now(resumed_event)
        self.supervisor = Supervisor(self._supervisor_config(run))
        watching = self._watch_size(run) if run.settings.resizable and not run.platform else None
        api = KubeAPI.from_env(self.env, run.settings.api_dir, timeout=self.api_timeout)
        lost_peers = (
            self._watch_for_lost_peers(run, api)
            if api is not None and run.identity is not None and run.settings.namespace and not run.platform
            else None
        )
        try:
            if self._wait_for_group(run):
                self.supervisor.cfg.env = run.child_env
            if self.stopping.is_set():
                return Ending(None, None, "", EXIT_SIGTERM)
            return self.supervisor.run()
        finally:
            for watcher in (watching, lost_peers):
                if watcher is not None:
                    watcher.set()
            run.heartbeat.unlink(missing_ok=True)

    def _supervisor_config(self, run: _Run) -> SupervisorConfig:
        settings, tracker = run.settings, run.tracker
        preload, why = standby_plan(settings.warm_standby, self.command)
        self._say(f"warm standby: {why}")
        return SupervisorConfig(
            command=self.command,
            env=run.child_env,
            run_dir=run.run_dir,
            marker_retry_seconds=self.marker_retry_seconds,
            heartbeat_file=run.heartbeat,
            max_restarts=settings.max_restarts,
            hang_timeout_seconds=settings.hang_timeout_seconds,
            hang_detection=settings.hang_detection,
            is_chief=tracker.is_chief,
            log=self.log,
            regroup=lambda: self._regroup(run),
            deadline=run.deadline,
            deadline_seconds=settings.active_deadline_seconds,
            on_attempt=lambda attempt: self._attempt(tracker, attempt, run.workers),
            on_restart=lambda cause: self._restarting(run, cause),
            on_output=tracker.on_line,
            on_beat=tracker.beat,
            standby_preload=preload,
            tee=self.podlog.write if self.podlog is not None else None,
        )

    def _evaluate(self, encoded: str) -> int:
        """A platform's evaluator task (TFJob or Volcano Evaluator replica): outside the
        collective, so no peer wait, no group restart and no run record. The command runs once
        with the TF_CONFIG; the built-in trainer evaluates each new checkpoint until the run
        completes (entrypoint.training.sidecar). Its exit code is the pod's: the platform's
        restart policy owns it."""
        child_env = dict(self.env, TF_CONFIG=encoded)
        problem = command_problem(self.command, child_env)
        if problem:  # one line and exit 2, as for a worker of the platform (cli.main)
            raise ConfigError(problem)
        self._say("evaluator task: evaluating checkpoints outside the training group")
        child = subprocess.Popen(self.command, env=child_env)
        while child.poll() is None:
            if self.stopping.wait(0.5):
                child.send_signal(signal.SIGTERM)
                return child.wait()
        return child.returncode

    def _serve_metrics(self, settings: LauncherSettings, tracker: RunTracker, task: dict) -> None:
        if not settings.metrics_port:
            return
        # a loopback group (make local without network namespaces): worker j on port + j, as gRPC
        port = settings.metrics_port + (task["index"] if settings.loopback_ports else 0)
        role = "chief" if tracker.is_chief else task["type"]
        collector = metrics.RunCollector(tracker, worker=task["index"], role=role)

        def ready() -> tuple[bool, str]:
            supervisor = self.supervisor
            return tracker.ready(supervisor.seconds_without_progress() if supervisor is not None else 0.0)

        if metrics.serve(port, collector, self._say, ready=ready) is not None:
            self._say(f"metrics: serving /metrics on port {port}")

    def _restarting(self, run: _Run, cause: str) -> None:
        """An attempt ended and training restarts in place; when the group's size changed
        (a peer's pod was scaled away and the group stopped with it), that is a resize."""
        tracker = run.tracker
        if tracker.state.phase is not Phase.RESIZING and run.settings.resizable:
            size = self._read_size(run.settings)
            if size and size != run.workers:
                self._resizing(run, size)
        if tracker.state.phase is Phase.RESIZING:
            tracker.group_stopped()
            return
        tracker.restart_counted(restart_kind(cause))
        tracker.transition(Phase.RESTARTING, message=tracker.restart_message(cause))

    def _attempt(self, tracker: RunTracker, attempt: int, workers: int) -> None:
        tracker.attempt_started()
        phase = tracker.state.phase
        if phase is Phase.PENDING:
            tracker.transition(Phase.RUNNING, message=f"run {tracker.state.run_id}: {workers} workers training")
        elif phase in (Phase.RESTARTING, Phase.WAITING):
            tracker.transition(Phase.RUNNING, message=f"attempt {attempt}")
        elif phase is Phase.RESIZING:
            step = tracker.state.last_checkpoint_step or 0
            tracker.transition(Phase.RUNNING, message=f"{workers} workers training, resumed from step {step}")

    # -- the group's size: a resize ------------------------------------------------------
    def _read_size(self, settings: LauncherSettings) -> int | None:
        """The StatefulSet's spec.replicas now; None when it cannot be read (kept as it was)."""
        try:
            return statefulset_replicas(self.env, settings, self.api_timeout)
        except (APIError, ConfigError) as err:
            self.size_error = str(err)
            return None

    def _group_size_at_start(self, settings: LauncherSettings) -> int:
        """The group's size to start with: the StatefulSet's replicas, retried with back-off
        for peers.timeoutSeconds (an API server that is restarting); ConfigError after that,
        or at once for what no retry changes. 0 (scaled to 0: the run ended, or is being
        stopped) counts as not readable yet."""
        deadline, delay, why = time.monotonic() + settings.peer_timeout_seconds, 0.5, ""
        while True:
            try:
                replicas = statefulset_replicas(self.env, settings, self.api_timeout)
                if replicas > 0:
                    return replicas
                why = "spec.replicas is 0"
            except APIError as err:
                why = str(err)
            if time.monotonic() >= deadline:
                raise ConfigError(
                    f"cannot read the group's size from statefulset {settings.statefulset}'s scale "
                    f"within peers.timeoutSeconds={settings.peer_timeout_seconds}: {why}"
                )
            if self.stopping.wait(delay):
                raise _Stopped()
            delay = min(delay * 2, 10.0)

    def _outside(self, outside: OutsideGroup) -> int:
        """This pod is beyond the group's size (workers.replicas was lowered): the StatefulSet
        controller is deleting it. Nothing to train and nothing to record: wait for SIGTERM."""
        self._say(
            f"worker {outside.ordinal} is outside the group of {outside.size} workers (workers.replicas): "
            "the StatefulSet controller is removing this pod; not training"
        )
        self.stopping.wait()
        return EXIT_OK

    def _watch_size(self, run: _Run) -> threading.Event:
        """Every RESIZE_POLL_SECONDS while the group trains: has the StatefulSet's replicas
        changed? Then stop the group at a checkpoint to re-form it (the supervisor restarts it
        through _regroup). Set the returned Event to stop watching."""
        done = threading.Event()

        def watch() -> None:
            while not done.wait(RESIZE_POLL_SECONDS) and not self.stopping.is_set():
                if run.resize_to is not None or run.in_peer_wait:
                    continue  # the group is stopping or re-forming: the regroup reads the size itself
                size = self._read_size(run.settings)
                if size and size != run.workers and size != run.resize_to and self.supervisor is not None:
                    self._resizing(run, size)
                    self.supervisor.request_regroup(f"workers.replicas {run.workers} -> {size}")

        threading.Thread(target=watch, name="tfmw-size", daemon=True).start()
        return done

    def _watch_for_lost_peers(self, run: _Run, api: KubeAPI) -> threading.Event:
        """While the group makes no progress: is a peer's pod lost with its node? Then force-
        delete it, so the StatefulSet controller replaces it on a node that answers. The chief
        watches every peer, the others watch the chief: a lost chief is replaced by them, and
        the new chief then sees to the rest. Set the returned Event to stop watching."""
        done = threading.Event()
        refused: list[str] = []  # why deleting is not allowed, once known: said once, never retried

        def watch() -> None:
            while not done.wait(NODE_LOSS_POLL_SECONDS) and not self.stopping.is_set():
                supervisor = self.supervisor
                if supervisor is None or supervisor.seconds_without_progress() < STALLED_SECONDS:
                    run.waiting.trains()
                    continue
                mine = run.identity.ordinal
                reasons, unread = {}, False
                for ordinal in range(1, run.workers) if mine == 0 else [0]:
                    pod = self._replace_if_lost(run, api, f"{run.identity.host_prefix}-{ordinal}", refused)
                    unread |= pod is None
                    why = pod_waiting_reason(pod) if pod is not None else None
                    if why:
                        reasons[ordinal] = why
                # A replacement with no node that has room: the group's attempt waits inside
                # TensorFlow for a worker that is not running; the status says which and why
                # (unless the group trained again while the pods were read).
                if reasons and supervisor.seconds_without_progress() >= STALLED_SECONDS:
                    run.waiting.report(run.waiting_state(), reasons)
                elif not reasons and not unread and not run.tracker.ledger.beats:
                    # A user command writes no heartbeat, so its progress never says the group
                    # trains again: every peer running again does.
                    run.waiting.trains()

        threading.Thread(target=watch, name="tfmw-lost-peers", daemon=True).start()
        return done

    def _replace_if_lost(self, run: _Run, api: KubeAPI, name: str, refused: list[str]) -> dict | None:
        """Force-delete peer `name` if its pod is lost with its node. The pod as read (None when
        it could not be read)."""
        namespace = run.settings.namespace
        try:
            pod = api.get_pod(namespace, name)
        except APIError as err:
            if err.status == 403 and not refused:
                refused.append(err.detail)
                self._say(
                    f"cannot read peer {name}'s pod to see whether it was lost with its node: {err.kind}: "
                    f"{err.detail}; a peer on a lost node then waits for an admin's "
                    f"`kubectl delete pod --force --grace-period=0`"
                )
            return None  # gone already (404), not allowed, or no answer: nothing to decide on
        why = lost_with_node(pod)
        if why is None:
            return pod
        address = pod_address(pod)
        if address and _answers(address, run.settings.port):
            return pod  # its processes run (a not-ready node whose kubelet stops them): not lost
        if refused:
            return pod
        uid = (pod.get("metadata") or {}).get("uid") or ""
        try:
            api.force_delete_pod(namespace, name, uid)
        except APIError as err:
            if err.status in (404, 409):
                return pod  # deleted, or replaced, meanwhile
            refused.append(err.detail)
            self._say(
                f"peer {name} is lost with its node ({why}) but cannot be force-deleted: {err.kind}: "
                f"{err.detail}; the Role needs `delete` on the release's pods (rbac.create), else an admin "
                f"runs `kubectl delete pod {name} -n {namespace} --force --grace-period=0`"
            )
            return pod
        message = (
            f"peer {name} was lost with its node: {why}; its TF port {address}:{run.settings.port} does not "
            f"answer. Force-deleted it, so the StatefulSet controller replaces it on a node that answers"
        )
        self._say(message)
        run.recorder.event("PeerLost", "Warning", message)
        return pod

    def _workers_waiting(self, run: _Run) -> None:
        """The chief, while its group waits for its peers: why the workers it waits for are not
        running (their pods' PodScheduled condition, the scheduler's reason; a container's
        waiting reason), in the status message (entrypoint.waiting). Resizing: the new workers;
        otherwise every other worker (the first start; a restart after a lost node, whose
        replacement has no node with room). The Role allows `get` on the release's pods by
        name; without it, nothing."""
        tracker, settings = run.tracker, run.settings
        if not tracker.is_chief or run.identity is None or run.waiting is None:
            return
        old = run.resized_from
        if tracker.state.phase is Phase.RESIZING and old is not None:
            ordinals = range(old, run.workers)
        elif tracker.state.phase in (Phase.PENDING, Phase.RESTARTING, Phase.WAITING):
            ordinals = [o for o in range(run.workers) if o != run.identity.ordinal]
        else:
            return
        api = KubeAPI.from_env(self.env, settings.api_dir, timeout=self.api_timeout)
        if api is None or not settings.namespace:
            return
        reasons: dict[int, str] = {}
        # The scheduler places new pods in the order they were created, so the last are the
        # ones left Pending: look from the highest ordinal down, a bounded number of GETs
        # every RESIZE_POLL_SECONDS.
        for ordinal in list(reversed(ordinals))[:WAITING_PODS_CHECKED]:
            if len(reasons) == NAMED_AT_MOST:
                break
            try:
                why = pod_waiting_reason(api.get_pod(settings.namespace, f"{run.identity.host_prefix}-{ordinal}"))
            except APIError as err:
                if err.status != 404:
                    return  # no permission, or no answer: the message stays as it is
                why = "not created yet"
            if why:
                reasons[ordinal] = why
        run.waiting.report(run.waiting_state(), reasons)

    def _resizing(self, run: _Run, size: int) -> None:
        """A resize to `size` workers. A new one starts from the size the group trained at; a
        change of the size while the group is still stopped for one (a grow undone before its
        new workers could run) is the same resize with a new target."""
        if run.resize_to is None:
            run.resized_from = run.workers
        run.resize_to = size
        self._say(
            f"resizing: workers.replicas {run.resized_from} -> {size}: the group stops at its next "
            f"checkpoint and re-forms at {size} workers"
        )
        if run.tracker.state.phase in (Phase.RUNNING, Phase.RESTARTING, Phase.WAITING):
            run.tracker.transition(
                Phase.RESIZING,
                message=f"workers.replicas {run.workers} -> {size}: stopping at the next checkpoint to re-form "
                f"the group at {size} workers",
            )

    def _reform(self, run: _Run, size: int) -> None:
        """The group's TF_CONFIG at `size` workers (this pod's ordinal unchanged)."""
        if run.identity is None:
            return
        if run.identity.ordinal >= size:
            self._say(
                f"worker {run.identity.ordinal} is outside the group of {size} workers (workers.replicas): "
                "the StatefulSet controller is removing this pod; not training again"
            )
            self.stopping.wait()
            raise _Stopped()
        settings = replace(run.settings, replicas=size)
        tf_config = build_tf_config(settings, run.identity)
        encoded = json.dumps(tf_config, separators=(",", ":"))
        check_tf_config_size(encoded)
        if run.tracker.state.phase is not Phase.RESIZING or run.resize_to != size:
            self._resizing(run, size)
        run.settings, run.tf_config, run.hosts, run.workers = settings, tf_config, cluster_hosts(tf_config), size
        run.child_env = dict(run.child_env, TF_CONFIG=encoded)
        self._say(f"re-forming the group at {size} workers")

    def _wait_for_group(self, run: _Run) -> bool:
        """Wait for the group's peers. A resizable group whose size changes meanwhile (a grow
        undone before its new worker could be scheduled, say) is re-formed at the new size and
        waited for instead. Returns whether the TF_CONFIG changed."""
        changed = False
        while True:
            try:
                self._wait_for_peers(run.hosts, run.settings, run.deadline, run.tracker, run)
                return changed
            except _SizeChanged as new:
                self._reform(run, new.size)
                changed = True

    def _wait_for_peers(
        self,
        hosts: list[str],
        settings: LauncherSettings,
        deadline: float | None,
        tracker: RunTracker,
        run: _Run | None = None,
    ) -> None:
        tracker.peer_wait()
        if run is not None:
            run.in_peer_wait = True
        try:
            self._wait_for_peers_until(hosts, settings, deadline, run)
        finally:
            if run is not None:
                run.in_peer_wait = False
            tracker.peers_found()

    def _wait_for_peers_until(
        self, hosts: list[str], settings: LauncherSettings, deadline: float | None, run: _Run | None = None
    ) -> None:
        timeout, bounded = float(settings.peer_timeout_seconds), False
        if deadline is not None and deadline - time.time() < timeout:
            timeout, bounded = max(deadline - time.time(), 0.0), True
        checked = time.monotonic()

        def sleep(seconds: float) -> None:
            nonlocal checked
            if self.stopping.wait(seconds):
                raise _Stopped()
            if run is not None and run.settings.resizable and time.monotonic() - checked >= RESIZE_POLL_SECONDS:
                checked = time.monotonic()
                size = self._read_size(run.settings)
                if size and size != run.workers:
                    raise _SizeChanged(size)
                self._workers_waiting(run)

        try:
            wait_for_peers(hosts, timeout, log=self.log, sleep=sleep)
        except PeersNotFound as err:
            if bounded:
                raise _Failure(
                    Reason.DEADLINE_EXCEEDED,
                    f"training.activeDeadlineSeconds={settings.active_deadline_seconds} passed "
                    f"while waiting for peers: {err}",
                ) from None
            raise _Failure(Reason.PEERS_NOT_FOUND, str(err)) from None

    def _regroup(self, run: _Run) -> dict | None:
        """Before a restart in place: has the run ended elsewhere (a peer recorded Failed)?
        Then stop, do not wait for a group that will never form. Has the group's size changed
        (resizable)? Then re-form it at the new size. Then wait for the peers. Returns the
        training command's new environment when the TF_CONFIG changed, else None."""
        recorded = run.recorder.read()
        if recorded_final(recorded, run.tracker.state):
            raise _EndedElsewhere(recorded)
        changed = False
        if run.settings.resizable:
            size = self._read_size(run.settings)
            if size and size != run.workers:
                self._reform(run, size)
                changed = True
        changed = self._wait_for_group(run) or changed
        run.resize_to = None
        return run.child_env if changed else None

    # -- the end -------------------------------------------------------------------------
    def _recorder(self, settings: LauncherSettings | None) -> StatusRecorder:
        if settings is None:  # a platform owns the lifecycle: it records the run itself
            return StatusRecorder(None, namespace=None, configmap=None, statefulset=None, pod_name=None, log=self.log)
        return StatusRecorder(
            KubeAPI.from_env(self.env, settings.api_dir, timeout=self.api_timeout),
            namespace=settings.namespace,
            configmap=settings.status_configmap,
            statefulset=settings.statefulset,
            pod_name=settings.pod_name,
            log=self.log,
            pod_uid=settings.pod_uid,
        )

    def _refused(self, err: ConfigError) -> int:
        """A bad environment in the chart's StatefulSet: Failed (BadConfig), recorded with what
        can still be trusted, then idle: exiting would only crash-loop on the same values."""
        env = self.env
        api_dir = env.get("TFMW_API_DIR") if env.get("TFMW_API_DIR", "").startswith("/") else None
        recorder = StatusRecorder(
            KubeAPI.from_env(env, api_dir, timeout=self.api_timeout),
            namespace=_env_name(env, "TFMW_NAMESPACE"),
            configmap=_env_name(env, "TFMW_STATUS_CONFIGMAP"),
            statefulset=_env_name(env, "TFMW_STATEFULSET"),
            pod_name=_env_name(env, "TFMW_POD_NAME"),
            log=self.log,
            pod_uid=env.get("TFMW_POD_UID", "")[:64],
        )
        run_id = _env_name(env, "TFMW_RUN_ID") or "default"
        now = rfc3339(time.time())
        revision = env.get("TFMW_POD_REVISION", "")[:63]
        ordinal = re.search(r"-(0|[1-9][0-9]*)$", env.get("TFMW_POD_NAME", ""))
        tracker = RunTracker(
            fresh(run_id, revision, now),
            recorder,
            is_chief=False,
            worker_index=int(ordinal.group(1)) if ordinal else -1,
            log=self.log,
        )
        tracker.transition(Phase.FAILED, Reason.BAD_CONFIG, str(err))
        on_failure = env.get("TFMW_ON_FAILURE") if env.get("TFMW_ON_FAILURE") in POLICIES else "idle"
        return self._end(tracker, recorder, on_failure, scale_to_zero=on_failure == "scaleToZero", run_dir=None)

    def _finish(self, tracker: RunTracker, settings: LauncherSettings, platform: bool, run_dir: Path | None) -> int:
        state = tracker.state
        if platform:
            self._log_end(state, run_dir)
            return exit_code(state)
        succeeded = state.phase is Phase.SUCCEEDED
        policy = settings.on_success if succeeded else settings.on_failure
        # Succeeded is the chief's to decide and scale to zero; a Failed run is scaled to zero by any
        # worker that knows of it (a crash-looping or idle group would hold its GPUs).
        scale_to_zero = policy == "scaleToZero" and (not succeeded or tracker.is_chief)
        return self._end(tracker, tracker.recorder, policy, scale_to_zero, run_dir)

    def _say(self, text: str) -> None:
        """One `tfmw launcher <text>` line."""
        self.log(loglines.line(loglines.LAUNCHER, text=text))

    def _log_end(self, state: RunState, run_dir: Path | None) -> None:
        if state.phase is Phase.SUCCEEDED:
            self.log(
                loglines.line(
                    loglines.COMPLETED, run=state.run_id, **completed_fields(run_dir), **goodput_fields(state)
                )
            )
        else:
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

    def _end(
        self, tracker: RunTracker, recorder: StatusRecorder, policy: str, scale_to_zero: bool, run_dir: Path | None
    ) -> int:
        state = tracker.state
        succeeded = state.phase is Phase.SUCCEEDED
        self._log_end(state, run_dir)
        can_scale_to_zero = scale_to_zero and recorder.can_scale_to_zero
        if scale_to_zero:
            recorder.scale_to_zero()  # without API access: says so once, and nothing to retry
        recorder.flush(self.flush_seconds)
        what = "this run is complete" if succeeded else f"the run failed ({state.reason}); not retrying"
        setting = f"completion.{'onSuccess' if succeeded else 'onFailure'}: scaleToZero"
        if policy == "scaleToZero" and scale_to_zero and not can_scale_to_zero:
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
        self._say(f"idle: {what}; {how}")
        self._idle(recorder, can_scale_to_zero)
        return EXIT_OK

    def _idle(self, recorder: StatusRecorder, scale_to_zero: bool) -> None:
        """Sleep until SIGTERM (the pod is deleted); meanwhile retry, with back-off, a terminal
        status write or a scale to 0 that failed (an API server that was restarting)."""
        delay, cap = self.idle_retry
        while True:
            retry = (scale_to_zero and not recorder.scaled_to_zero) or recorder.status_ok is False
            if self.stopping.wait(delay if retry else None):
                return
            recorder.retry_unsent()
            delay = min(delay * 2, cap)
