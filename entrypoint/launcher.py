"""`python -m entrypoint run`: from the pod's environment to a finished run (docs/lifecycle.md).

`Launcher.run` is the run's life, in order:
1. identity and TF_CONFIG (a StatefulSet pod, an Indexed Job pod, or a platform's TF_CONFIG);
2. the run's record: the chief's COMPLETED marker and the status ConfigMap decide whether
   to train at all (a redeployed finished or failed run does not train again);
3. the checks before training, then the peer wait and supervised training
   (entrypoint.supervisor), with the activeDeadlineSeconds;
4. the end (entrypoint.ending).
Each policy of that life keeps its own file: the group's size and forming (entrypoint.regroup),
the peers' pods (entrypoint.peerwatch), the end (entrypoint.ending), over one run context
(entrypoint.runcontext) with the one API client.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from . import envfrom, loglines, metrics, runowner, scratch, stopsignal
from .cluster import build_tf_config, is_chief, is_evaluator, parse_tf_config
from .elastic import Elastic, EpochFiles
from .ending import FLUSH_SECONDS, IDLE_RETRY_SECONDS, RunEnd
from .errors import EXIT_OK, EXIT_SIGTERM, ConfigError
from .goodput import Accounting, Ledger
from .identity import (
    INDEXED_JOB,
    PRESET_TF_CONFIG,
    STATEFULSET,
    parse_indexed_hostname,
    parse_pod_name,
    platform_owns_lifecycle,
    pod_kind,
)
from .kubeapi import KubeAPI
from .lifecycle import (
    FAILED_ALREADY,
    SUCCEEDED_ALREADY,
    Phase,
    Reason,
    RunState,
    continues_attempt,
    parse_rfc3339,
    plan_start,
    rfc3339,
    run_clock,
)
from .membership import ELASTIC_REPLICAS_ENV, bounds_problem
from .peerwatch import PeerWatch
from .podlog import PodLog, log_path
from .regroup import GroupSize, Regroup
from .runcontext import EndedElsewhere, Failure, Group, Hooks, Run, Stopped
from .rundir import MarkerUnreadable, RunDir, completed_marker, marker_exists_retrying
from .settings import INDEXED_JOB_REQUIRED, LauncherSettings, load_settings, rbac_off_line
from .standby import DEFAULT_TRAINING_COMMAND, FirstStandby, is_builtin_trainer, standby_plan
from .startchecks import command_problem, shared_dir_problem
from .status import StatusRecorder
from .supervisor import Ending, Supervisor, SupervisorConfig
from .tracker import RunTracker
from .waiting import WaitingNote

MARKER_RETRY_SECONDS = 60.0  # a user command finished: how long writing COMPLETED may be retried
IDENTITY = {STATEFULSET: "statefulset", PRESET_TF_CONFIG: "preset", INDEXED_JOB: "indexed-job"}


class OutsideGroup(Exception):
    """This StatefulSet pod's ordinal is not below the group's size: it is being scaled away."""

    def __init__(self, ordinal: int, size: int):
        super().__init__(f"worker {ordinal} is outside the group of {size}")
        self.ordinal, self.size = ordinal, size


def resolve_group(
    env: Mapping[str, str],
    hostname: str | None = None,
    group_size: Callable[[LauncherSettings], int] | None = None,
) -> tuple[Group, LauncherSettings, str]:
    """(the group, settings, pod kind) — a platform's TF_CONFIG is validated and kept; an
    Indexed Job pod's is derived from its hostname and JOB_COMPLETION_INDEX; a StatefulSet
    pod's from its name (parsed once), and from `group_size` (the StatefulSet's replicas, read
    through the API) where the settings are resizable. The TF_CONFIG is checked against the
    environment's size limit here, not as an exec error of the training command."""
    kind = pod_kind(env)
    if kind == PRESET_TF_CONFIG:
        return Group.of(parse_tf_config(env["TF_CONFIG"].strip())), load_settings(env, need_derivation=False), kind
    if kind == INDEXED_JOB:
        settings = load_settings(env, required=INDEXED_JOB_REQUIRED)
        # The container runtime sets HOSTNAME to the pod's hostname; the UTS name is the same.
        host = hostname or env.get("HOSTNAME") or socket.gethostname()
        identity = parse_indexed_hostname(host, env["JOB_COMPLETION_INDEX"], settings.replicas)
        return Group.of(build_tf_config(settings, identity)), settings, kind
    settings = load_settings(env)
    if settings.resizable and group_size is None:
        raise ConfigError("TFMW_REPLICAS not set; the chart sets it, or the launcher reads the group's size")
    # Resizable: any ordinal parses here; the group's size decides below whether it belongs.
    identity = parse_pod_name(settings.pod_name, settings.replicas or 1 << 30, settings.statefulset)
    if settings.resizable:
        size = group_size(settings)
        if identity.ordinal >= size:
            raise OutsideGroup(identity.ordinal, size)
        settings = replace(settings, replicas=size)
    return Group.of(build_tf_config(settings, identity), identity), settings, kind


def resolve_tf_config(
    env: Mapping[str, str],
    hostname: str | None = None,
    group_size: Callable[[LauncherSettings], int] | None = None,
) -> tuple[dict, LauncherSettings, str]:
    """(TF_CONFIG, settings, pod kind), for a caller that needs only the TF_CONFIG (resolve_group)."""
    group, settings, kind = resolve_group(env, hostname, group_size)
    return group.tf_config, settings, kind


def elastic_problem(run: Run, command: Sequence[str]) -> str | None:
    """Why training.elastic cannot follow this run's members, in one line; None if it can: the
    epochs live in a mounted run directory, the members are a StatefulSet's ordinals, and only
    the built-in trainer re-deals its input over them (entrypoint.training.data.elastic_input)."""
    where = f"training.elastic.minReplicas={run.settings.elastic_min_replicas}"
    if run.platform or run.identity is None:
        return (
            f"{where}: a platform's TF_CONFIG or an Indexed Job fixes the members; "
            "elastic training needs the chart's StatefulSet"
        )
    if run.run_dir is None:
        return (
            f"{where} needs shared storage mounted in the pods (storage.type existingClaim or "
            "createClaim): the epochs live in the run directory"
        )
    if not is_builtin_trainer(command):
        return (
            f"{where} needs the built-in trainer (training.command unset): another command cannot "
            "re-deal its input over fewer workers"
        )
    problem = bounds_problem(run.size, run.settings.elastic_micro_batches, run.settings.elastic_min_replicas)
    return problem


def start_ledger(recorded: RunState | None, state: RunState, launched: float, beats: bool) -> Ledger:
    """This launcher's time account: the recorded one carried on when it continues the same
    attempt of the run (its pod was recreated), the time since that record counted as restart."""
    same_attempt = continues_attempt(recorded, state)
    carried = Accounting.from_fields(recorded.productive_seconds, recorded.badput_seconds) if same_attempt else None
    # The time since the record is a restart's (the pod was recreated), not a suspend's: a run
    # suspended on purpose is not losing time.
    counted = carried is not None and recorded.phase is not Phase.SUSPENDED
    last = parse_rfc3339(recorded.updated_at) if counted else None
    return Ledger(launched, beats=beats, carried=carried, absent_seconds=launched - last if last is not None else 0.0)


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
        first_standby: FirstStandby | None = None,
    ):
        self.env = dict(env)
        # The first attempt's standby, started before the launcher's own imports
        # (entrypoint.standby.prestart): held for the first attempt, discarded on every way
        # of the run that does not train, so no TensorFlow process idles beside an idle pod.
        self.first_standby = first_standby or FirstStandby()
        self.command = list(command) or list(DEFAULT_TRAINING_COMMAND)
        self._print = log or (lambda line: print(line, flush=True))
        self.podlog: PodLog | None = None  # the log kept on shared storage, once the run dir is known
        self.hostname = hostname
        self.api_timeout = api_timeout
        self.marker_retry_seconds = marker_retry_seconds
        self.stopping = threading.Event()
        self.supervisor: Supervisor | None = None
        self.api: KubeAPI | None = None  # the one API client, made once the settings are read
        self.ending = RunEnd(self.log, self.stopping, flush_seconds, idle_retry)
        self.hooks = Hooks(log=self.log, say=self._say, stopping=self.stopping, supervisor=lambda: self.supervisor)

    def log(self, line: str) -> None:
        """Print one line; also keep it with the run (entrypoint.podlog) once that is set up."""
        self._print(line)
        if self.podlog is not None:
            self.podlog.line(line)

    def _say(self, text: str) -> None:
        """One `tfmw launcher <text>` line."""
        self.log(loglines.line(loglines.LAUNCHER, text=text))

    def _say_only(self, text: str) -> None:  # PodLog's error line: printed, never kept (it could not be)
        self._print(loglines.line(loglines.LAUNCHER, text=text))

    def _api(self, settings: LauncherSettings) -> KubeAPI | None:
        if self.api is None:
            self.api = KubeAPI.from_env(self.env, settings.api_dir, timeout=self.api_timeout)
        return self.api

    # -- signals -------------------------------------------------------------------------
    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        if self.supervisor is not None:  # the trainer hears it before anyone acts on `stopping`
            self.supervisor.request_stop(signum)
        self.first_standby.discard()  # not taken yet: it goes now, not at the run's end
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
        try:
            return self._life()
        finally:
            self.first_standby.discard()  # an exception's way out too

    def _life(self) -> int:
        no_training = self.first_standby.discard  # before each way that idles or exits untrained
        # First: a reserved name in an envFrom Secret would otherwise steer everything below
        # (a TF_CONFIG of its own makes this pod look like a platform's) or be silently hidden.
        collided = envfrom.collisions(self.env.get(envfrom.PROBE))
        if collided:
            no_training()
            self._say(f"refused: {envfrom.refusal(collided)}")
            refused = ConfigError(envfrom.refusal(collided))
            return self.ending.refused(envfrom.trusted(self.env, collided), refused, self.api_timeout)
        platform = platform_owns_lifecycle(pod_kind(self.env))
        try:
            group, settings, kind = resolve_group(self.env, self.hostname, self._size_at_start)
        except ConfigError as err:
            no_training()
            if platform:
                raise  # one line and exit 2: the platform's failure policy takes it from here
            return self.ending.refused(self.env, err, self.api_timeout)
        except OutsideGroup as outside:
            no_training()
            return self._outside(outside)
        except Stopped:
            self._say("stopped by signal while reading the group's size")
            return EXIT_SIGTERM
        self._announce(group, kind, platform)
        if is_evaluator(group.tf_config):
            no_training()  # the evaluator's one command starts cold (outside the supervisor)
            return self._evaluate(group.encoded)
        run = self._open_run(group, settings, platform)
        if run.plan.action in (SUCCEEDED_ALREADY, FAILED_ALREADY):
            no_training()
            return self.ending.ended_already(run)
        try:
            try:
                self._check_before_training(run)
                ending = self._train(run)
            finally:
                no_training()  # the first attempt took it, or there was none (stopped, failed, done)
        except Stopped:
            self._say("stopped by signal while waiting for peers")
            return self.ending.stopped(run, EXIT_SIGTERM, GroupSize(run.api, self.stopping))
        except Failure as failure:
            run.tracker.transition(Phase.FAILED, failure.reason, failure.message)
            return self.ending.finish(run.tracker, settings, platform, run.run_dir)
        except EndedElsewhere as ended:
            run.tracker.adopt(ended.state)
            return self.ending.finish(run.tracker, settings, platform, run.run_dir)
        if ending.phase is None:
            return self.ending.stopped(run, ending.returncode, GroupSize(run.api, self.stopping))
        run.tracker.transition(ending.phase, ending.reason, ending.message)
        return self.ending.finish(run.tracker, run.settings, platform, run.run_dir)

    def _size_at_start(self, settings: LauncherSettings) -> int:
        return GroupSize(self._api(settings), self.stopping).at_start(settings)

    def _outside(self, outside: OutsideGroup) -> int:
        """This pod is beyond the group's size (workers.replicas was lowered): the StatefulSet
        controller is deleting it. Nothing to train and nothing to record: wait for SIGTERM."""
        self._say(
            f"worker {outside.ordinal} is outside the group of {outside.size} workers (workers.replicas): "
            "the StatefulSet controller is removing this pod; not training"
        )
        self.stopping.wait()
        return EXIT_OK

    def _announce(self, group: Group, kind: str, platform: bool) -> None:
        task = group.tf_config["task"]
        self.log(
            loglines.line(
                loglines.LAUNCHER,
                task=f"{task['type']}:{task['index']}",
                workers=group.workers,
                identity=IDENTITY[kind],
                lifecycle="platform" if platform else "launcher",
            )
        )

    def _open_run(self, group: Group, settings: LauncherSettings, platform: bool) -> Run:
        """The run's record and COMPLETED marker read, the start planned (plan_start), the
        tracker and the /metrics endpoint up."""
        task = group.tf_config["task"]
        run_id = settings.run_id or "default"
        # An object-store URI (gs://, s3://) is the trainer's business (tf.io.gfile); the
        # launcher never imports TF, so it looks for the completion marker on mounted paths only.
        mounted = RunDir.on_mount(settings.shared_dir, settings.run_id)
        run_dir = Path(mounted.root) if mounted is not None else None
        if settings.keep_log_mib and run_dir is not None and settings.pod_name:
            # From here on, this pod's log (launcher and trainer) is also kept in <run>/logs.
            self.podlog = PodLog(log_path(run_dir, settings.pod_name), settings.keep_log_mib << 20, say=self._say_only)
        api = self._api(settings)
        recorder = self._recorder(api, settings if not platform else None)
        launched, since = time.time(), time.monotonic()
        recorded = recorder.read()
        # Whose run directory this is, before its COMPLETED marker means anything to this release.
        ownership = runowner.look(run_dir, settings.namespace, settings.statefulset, settings.adopt_run_dir)
        completed, unreadable = False, None
        try:
            if ownership is None or ownership.refusal is None:
                marker = completed_marker(run_dir)
                completed = marker_exists_retrying(marker, self.marker_retry_seconds, self.stopping.wait, self._say)
        except MarkerUnreadable as err:  # not known: never train (it may have finished)
            unreadable = str(err)
        plan = plan_start(recorded, run_id, settings.pod_revision, completed, rfc3339(launched))
        clock = run_clock(recorded, plan.state, launched, since)  # the deadline's: monotonic, carried
        tracker = RunTracker(
            plan.state,
            recorder,
            is_chief=is_chief(group.tf_config),
            worker_index=task["index"],
            log=self.log,
            ledger=start_ledger(recorded, plan.state, launched, is_builtin_trainer(self.command)),
            grace_seconds=settings.grace_seconds,
            run_clock=clock,
        )
        self._serve_metrics(settings, tracker, task)
        self._say(f"run={run_id} revision={settings.pod_revision or '-'}: {plan.why}")
        if api is not None and not platform and settings.rbac_off:
            self._say(rbac_off_line(settings))
        return Run(
            group=group,
            settings=settings,
            platform=platform,
            api=api,
            run_id=run_id,
            run_dir=run_dir,
            recorder=recorder,
            recorded=recorded,
            plan=plan,
            tracker=tracker,
            unreadable=unreadable,
            base_env=self.env,
            deadline=clock.deadline(settings.active_deadline_seconds),
            waiting=WaitingNote(tracker, group.identity.host_prefix) if group.identity is not None else None,
            ownership=ownership,
        )

    def _recorder(self, api: KubeAPI | None, settings: LauncherSettings | None) -> StatusRecorder:
        if settings is None:  # a platform owns the lifecycle: it records the run itself
            return StatusRecorder(None, namespace=None, configmap=None, statefulset=None, pod_name=None, log=self.log)
        return StatusRecorder(
            api,
            namespace=settings.namespace,
            configmap=settings.status_configmap,
            statefulset=settings.statefulset,
            pod_name=settings.pod_name,
            log=self.log,
            pod_uid=settings.pod_uid,
            events="events" not in settings.rbac_off,
            fence="pods.get" not in settings.rbac_off,
            no_api_server=settings.no_api_server,
        )

    def _check_before_training(self, run: Run) -> None:
        """What no restart can fix fails the run now (Failure), before the peer wait."""
        settings = run.settings
        if run.ownership is not None and run.ownership.refusal:  # another release's run: never train in it
            raise Failure(Reason.BAD_CONFIG, run.ownership.refusal)
        if run.deadline is not None and time.monotonic() >= run.deadline:
            raise Failure(
                Reason.DEADLINE_EXCEEDED,
                f"training.activeDeadlineSeconds={settings.active_deadline_seconds} passed "
                f"({run.tracker.run_clock.elapsed(time.monotonic()):.0f}s of this attempt elapsed, "
                f"run started {run.plan.state.started_at}); "
                "not starting training",
            )
        if run.unreadable:  # retried for marker_retry_seconds already: fail closed
            if self.stopping.is_set():
                raise Stopped()
            raise Failure(Reason.BAD_CONFIG, run.unreadable)
        problem = command_problem(self.command, run.child_env)
        if problem:  # no retry makes a missing program appear
            raise Failure(Reason.BAD_CONFIG, problem)
        problem = shared_dir_problem(run.run_dir) if run.tracker.is_chief else None
        if problem:  # the chief could never record completion: do not train first
            raise Failure(Reason.BAD_CONFIG, problem)
        if run.tracker.is_chief:  # before any training: the run directory is this release's from here
            runowner.settle(run.ownership, settings.pod_name, self._say)
        try:
            run.heartbeat = Path(tempfile.gettempdir()) / f"tfmw-heartbeat-{os.getpid()}"
        except OSError as err:  # FileNotFoundError: no writable TMPDIR, /tmp, /var/tmp or cwd
            raise Failure(
                Reason.BAD_CONFIG,
                f"no writable temporary directory for the heartbeat file ({err}); mount an emptyDir at /tmp",
            ) from None

    def _train(self, run: Run) -> Ending:
        """The peer wait, then the training command under the supervisor (restarts in place,
        the watchdog, the deadline) until it ends; meanwhile the chief watches the group's size
        and three launchers the peers' pods, while the group is stalled."""
        task = run.group.tf_config["task"]
        resumed_event = (
            ("Restarted", "Warning", f"worker {task['index']}'s pod restarted, {run.tracker.resume_point()}")
            if run.plan.resumed
            else ("Resumed", "Normal", run.plan.state.message)
            if run.recorded is not None and run.recorded.phase is Phase.SUSPENDED
            else None
        )
        elastic = self._elastic(run)
        if elastic is not None:  # the chief is member 0 of the newest epoch: it records the run
            run.tracker.is_chief = elastic.chief_now()
        run.tracker.record_now(resumed_event)
        peers = PeerWatch(run, self.hooks)
        regroup = Regroup(run, self.hooks, GroupSize(run.api, self.stopping), peers, elastic)
        self.supervisor = Supervisor(self._supervisor_config(run, regroup))
        watchers = (regroup.watch(), peers.start(), elastic.start() if elastic is not None else None)
        try:
            if regroup.wait_for_group():
                self.supervisor.cfg.env = run.child_env
            if self.stopping.is_set():
                return Ending(None, None, "", EXIT_SIGTERM)
            return self.supervisor.run()
        finally:
            for watcher in watchers:
                if watcher is not None:
                    watcher.set()
            run.heartbeat.unlink(missing_ok=True)
            Path(f"{run.heartbeat}.mtbf").unlink(missing_ok=True)  # the trainer's MTBF estimate (entrypoint.mtbf)

    def _elastic(self, run: Run) -> Elastic | None:
        """training.elastic's policy for this run (entrypoint.elastic), or None. Refused (Failed,
        BadConfig) where the members cannot be followed: see elastic_problem."""
        run.base_env.pop(ELASTIC_REPLICAS_ENV, None)  # only the launcher says it (workers.extraEnv may not)
        if not run.settings.elastic:
            return None
        problem = elastic_problem(run, self.command)
        if problem:
            raise Failure(Reason.BAD_CONFIG, problem)
        return Elastic(run, self.hooks, EpochFiles(run.run_dir))

    def _supervisor_config(self, run: Run, regroup: Regroup) -> SupervisorConfig:
        settings, tracker = run.settings, run.tracker
        preload, why = standby_plan(settings.warm_standby, self.command)
        chief_dir = tracker.is_chief and run.run_dir is not None  # the run directory's only writer
        if preload is None:
            self.first_standby.discard()
        elif self.first_standby.pid is not None:
            why += f"; the first attempt's started with the launcher (pid {self.first_standby.pid})"
        self._say(f"warm standby: {why}")
        return SupervisorConfig(
            command=self.command,
            env=run.child_env,
            run_dir=run.run_dir,
            marker_retry_seconds=self.marker_retry_seconds,
            heartbeat_file=run.heartbeat,
            max_restarts=settings.max_restarts,
            same_error_limit=settings.same_error_limit,
            hang_timeout_seconds=settings.hang_timeout_seconds,
            hang_detection=settings.hang_detection,
            is_chief=tracker.is_chief,
            log=self.log,
            regroup=regroup.before_restart,
            resized=regroup.resized,
            deadline=run.deadline,
            deadline_seconds=settings.active_deadline_seconds,
            on_attempt=lambda attempt: self._attempt(tracker, attempt, run.group_note or f"{run.workers} workers"),
            on_restart=regroup.restarting,
            on_output=tracker.on_line,
            on_beat=tracker.beat,
            on_group_broken=tracker.group_broke,
            standby_preload=preload,
            first_standby=lambda: self.first_standby.take(self.command, preload),
            tee=self.podlog.write if self.podlog is not None else None,
            clean_scratch=lambda: scratch.clean(None, str(run.run_dir) if chief_dir else None, self._say),
            attempt_env=lambda: tracker.attempt_env(f"{run.heartbeat}.mtbf"),
        )

    @staticmethod
    def _attempt(tracker: RunTracker, attempt: int, workers: str) -> None:
        """`workers`: `4 workers`, or an elastic group's `members 3/4 (elastic, micro-batches 4)`."""
        tracker.attempt_started()
        phase = tracker.state.phase
        elastic = workers.startswith("members")
        if phase is Phase.PENDING:
            tracker.transition(Phase.RUNNING, message=f"run {tracker.state.run_id}: {workers} training")
        elif phase in (Phase.RESTARTING, Phase.WAITING):
            tracker.transition(Phase.RUNNING, message=f"attempt {attempt}" + (f": {workers}" if elastic else ""))
        elif phase is Phase.RESIZING:
            step = tracker.state.last_checkpoint_step or 0
            tracker.transition(Phase.RUNNING, message=f"{workers} training, resumed from step {step}")

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
