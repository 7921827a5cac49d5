"""SIGTERM to one of two workers mid-run: today's path against PreemptionCheckpointHandler.

    python -m tfmw.bench.preemption [--rounds 3] [--steps 400] [--every 50] [--after 120] [--markdown]

Two paths, each run as two real MWMS workers on loopback (docs/training.md, "Stopping:
PreemptionCheckpointHandler, measured"):
- today: `python -m entrypoint.training` (sigterm.py sets a flag, the group votes on it at the
  next checkpoint boundary, all save there and exit 143);
- handler: the same trainer's set_up, step and boundaries (entrypoint.training.trainer), with
  tf.distribute.experimental.PreemptionCheckpointHandler deciding when to save and stop. Its
  termination_watcher_fn is the same SIGTERM flag (TensorFlow's own C-level SIGTERM handler
  would otherwise swallow the signal before the handler exists), its save_fn the trainer's
  checkpoint writer, its exit_fn the same exit 143.

Per path and round: SIGTERM to worker 1 once worker 0 logged step >= --after; the time until
both processes have exited; each worker's `tfmw stopped` step and the step the chief's
published checkpoint holds; then both restarted: the step each resumes from, the first step it
logs, the steps it finishes with and whether both end with the same weights digest.

`--worker handler ARGS` is one worker of the handler path (the orchestrator starts two).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from entrypoint import loglines
from entrypoint.errors import EXIT_RETRYABLE, EXIT_SIGTERM
from entrypoint.rundir import RunDir
from tfmw.table import console_table, markdown_table

from .procs import PY, REPO, base_env, free_ports, tf_config

PATHS = {"today": ["-m", "entrypoint.training"], "handler": ["-m", "tfmw.bench.preemption", "--worker", "handler"]}


def handler_worker(argv: list[str]) -> int:
    """One worker of the handler path: the trainer's steps, PreemptionCheckpointHandler.run around
    each, our SIGTERM flag as its termination watcher, the trainer's writer as its save_fn."""
    from entrypoint.cluster import worker_group
    from entrypoint.training.__main__ import parse_args
    from entrypoint.training.config import resolve, run_env
    from entrypoint.training.sigterm import SigtermFlag

    args = parse_args(argv)
    flag = SigtermFlag()
    flag.install()
    config = resolve(args.config, args.overrides)
    cluster = worker_group(os.environ.get("TF_CONFIG"))
    env = run_env(os.environ, args.shared_dir, args.run_id)
    import tensorflow as tf

    from entrypoint.training import trainer

    s = trainer.set_up(config, cluster, env)
    state = trainer.LoopState(step=s.start_step, window_first=s.start_step, window_start=time.monotonic())

    class Stopped(Exception):
        pass

    def save():  # at the step the handler agreed on with every worker
        trainer.check_finite(s, state.step)
        s.writer.save(state.step)

    def leave():
        raise Stopped

    scratch = tempfile.mkdtemp(prefix="tfmw-pch-")  # the handler's own (unused) checkpoint manager
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        s.agreement.strategy.cluster_resolver,
        tf.train.Checkpoint(),
        checkpoint_dir=os.path.join(scratch, "pch"),
        termination_config=tf.distribute.experimental.TerminationConfig(
            termination_watcher_fn=flag, exit_fn=leave, grace_period=0, save_fn=save
        ),
    )
    every_ckpt, every_log = config["checkpoint"]["everySteps"], config["logEverySteps"]
    flag.training_started()
    try:
        while state.step < s.total:
            handler.run(s.train_step, s.iterator)
            state.step += 1
            if state.step % every_log == 0 or state.step == s.total:
                trainer.log_window(s, state)
            if state.step % every_ckpt == 0 or state.step == s.total:
                trainer.at_boundary(s, state, False)
    except Stopped:  # returns, as train() does, so the exit pays the same teardown
        trainer.log(
            loglines.line(
                loglines.STOPPED, step=f"{state.step}/{s.total}", reason="sigterm", checkpoint=s.run.checkpoints
            )
        )
        return EXIT_SIGTERM
    finally:
        flag.training_finished()
        s.writer.close()
        shutil.rmtree(scratch, ignore_errors=True)
    result = trainer.finish(s, state, trainer.weights_digest(s.model), time.monotonic())
    trainer.log(loglines.line(loglines.DONE, steps=result.steps, weights_digest=result.weights_digest))
    return 0


def run_handler_worker(argv: list[str]) -> int:
    """handler_worker with the built-in trainer's exit codes (75 retryable, 4 permanent) and its
    way out: at once after a stop or a retryable failure, a normal exit otherwise (so the handler's
    watcher threads are torn down as they would be in the trainer)."""
    from entrypoint.training.failures import error_summary, exit_code_for, is_retryable

    try:
        code = handler_worker(argv)
    except Exception as err:  # the same one line and exit code as the trainer's
        print(loglines.line(loglines.ERROR, f"retryable={str(is_retryable(err)).lower()}", text=error_summary(err)))
        code = exit_code_for(err)
    sys.stdout.flush()
    if code in (EXIT_SIGTERM, EXIT_RETRYABLE):
        os._exit(code)
    return code


@dataclass
class Round:
    path: str
    signalled_after: int  # worker 0's last logged step when worker 1 got SIGTERM
    seconds_to_exit: float  # SIGTERM -> both processes exited
    seconds_to_stopped: float | None  # SIGTERM -> both `tfmw stopped` lines seen (the decision and the save)
    codes: list  # exit codes of the stopped run
    stop_steps: list  # each worker's `tfmw stopped` step (None: no line)
    checkpoint_step: int | None  # the step of the checkpoint the chief's state file names
    resume_steps: list  # each restarted worker's `resume_step`
    first_logged: list  # each restarted worker's first `tfmw progress` step
    done_steps: list  # each restarted worker's `tfmw done` steps
    same_digest: bool  # both restarted workers end with the same weights
    restart_codes: list  # exit codes of the restarted run (0: finished)

    def exact(self, log_every: int) -> bool:
        """Both stopped at one step, the chief published it, both resumed there and went on."""
        stop = self.stop_steps[0]
        return (
            stop is not None
            and self.stop_steps == [stop] * 2
            and self.checkpoint_step == stop
            and self.resume_steps == [stop] * 2
            and all(f is not None and stop < f <= stop + log_every for f in self.first_logged)
        )


def _start(path: str, train_args: list[str], shared: Path, tag: str) -> tuple[list, list[Path]]:
    ports = free_ports(2)
    procs, logs = [], []
    for i in range(2):
        log = shared / f"{path}-{tag}-worker{i}.log"
        env = base_env({"TF_CONFIG": tf_config(ports, i), "TFMW_SHARED_DIR": str(shared), "TFMW_RUN_ID": "bench"})
        with open(log, "w") as out:
            procs.append(
                subprocess.Popen(
                    [PY, *PATHS[path], *train_args], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            )
        logs.append(log)
    return procs, logs


def _kill(procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _fields(log: Path, kind: str) -> list[loglines.LogLine]:
    return loglines.find(log.read_text(errors="replace").splitlines(), kind)


def _first_int(log: Path, kind: str, key: str) -> int | None:
    found = _fields(log, kind)
    return found[0].int_field(key) if found else None


def published_step(checkpoints: Path) -> int | None:
    """The step of the checkpoint the chief's `checkpoint` state file names."""
    try:
        match = re.search(r'^model_checkpoint_path: "[^"]*ckpt-(\d+)"', (checkpoints / "checkpoint").read_text(), re.M)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _wait_for_step(path: str, procs, log: Path, after: int, timeout: float) -> int:
    """Worker 0's logged step once it is >= after."""
    deadline = time.monotonic() + timeout
    logged = 0
    while logged < after:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit(f"{path}: worker 0 never logged step {after}; see {log}")
        steps = [p.int_field("step") for p in _fields(log, loglines.PROGRESS)]
        logged = max([s for s in steps if s is not None], default=0)
        time.sleep(0.02)
    return logged


def run_round(path: str, train_args: list[str], after: int, workdir: Path, timeout: float = 300) -> Round:
    shared = Path(tempfile.mkdtemp(prefix=f"{path}-", dir=workdir))
    procs, logs = _start(path, train_args, shared, "first")
    try:
        logged = _wait_for_step(path, procs, logs[0], after, timeout)
        signalled = time.monotonic()
        procs[1].send_signal(signal.SIGTERM)
        stopped_seen = None
        while any(p.poll() is None for p in procs):
            if time.monotonic() - signalled > timeout:
                raise SystemExit(f"{path}: the workers did not exit within {timeout:.0f}s of SIGTERM; see {logs}")
            if stopped_seen is None and all(_fields(log, loglines.STOPPED) for log in logs):
                stopped_seen = time.monotonic() - signalled
            time.sleep(0.01)
        seconds = time.monotonic() - signalled
    finally:
        _kill(procs)
    codes = [p.returncode for p in procs]
    stop_steps = [_first_int(log, loglines.STOPPED, "step") for log in logs]
    checkpoint_step = published_step(Path(RunDir.of(str(shared), "bench").checkpoints))

    again, again_logs = _start(path, train_args, shared, "restart")
    try:
        for proc in again:
            proc.wait(timeout=timeout)
    finally:
        _kill(again)
    digests = {
        (_fields(log, loglines.DONE) or [loglines.LogLine("done")])[0].fields.get("weights_digest")
        for log in again_logs
    }
    return Round(
        path,
        logged,
        seconds,
        stopped_seen,
        codes,
        stop_steps,
        checkpoint_step,
        [_first_int(log, loglines.START, "resume_step") for log in again_logs],
        [_first_int(log, loglines.PROGRESS, "step") for log in again_logs],
        [_first_int(log, loglines.DONE, "steps") for log in again_logs],
        len(digests) == 1 and None not in digests,
        [p.returncode for p in again],
    )


@dataclass
class HungPeer:
    path: str
    seconds: float | None  # SIGTERM -> the signalled worker exited (None: still running at the cap)
    code: int | None  # its exit code
    last_line: str  # its last tfmw line


def run_hung_peer(path: str, train_args: list[str], after: int, workdir: Path, cap: float) -> HungPeer:
    """Worker 0 hangs (SIGSTOP), then worker 1 gets SIGTERM: does worker 1 still get out, and how fast?"""
    shared = Path(tempfile.mkdtemp(prefix=f"{path}-hung-", dir=workdir))
    procs, logs = _start(path, train_args, shared, "hung")
    try:
        _wait_for_step(path, procs, logs[0], after, 300)
        procs[0].send_signal(signal.SIGSTOP)
        signalled = time.monotonic()
        procs[1].send_signal(signal.SIGTERM)
        try:
            procs[1].wait(timeout=cap)
            seconds, code = time.monotonic() - signalled, procs[1].returncode
        except subprocess.TimeoutExpired:
            seconds, code = None, None
    finally:
        procs[0].send_signal(signal.SIGCONT)
        _kill(procs)
    lines = [raw for raw in logs[1].read_text(errors="replace").splitlines() if loglines.parse(raw)]
    return HungPeer(path, seconds, code, lines[-1] if lines else "")


def _pair(values: list) -> str:
    return "/".join("-" if v is None else str(v) for v in values)


HEADERS = [
    "path",
    "SIGTERM after step",
    "stopped at (w0/w1)",
    "chief's checkpoint",
    "resumed at (w0/w1)",
    "first logged",
    "finished",
    "same digest",
    "exit codes (stop/restart)",
    "exact",
    "SIGTERM -> both stopped lines (s)",
    "SIGTERM -> both exited (s)",
]


def rows(rounds: list[Round], log_every: int) -> list[list]:
    return [
        [
            r.path,
            r.signalled_after,
            _pair(r.stop_steps),
            r.checkpoint_step,
            _pair(r.resume_steps),
            _pair(r.first_logged),
            _pair(r.done_steps),
            r.same_digest,
            f"{_pair(r.codes)} / {_pair(r.restart_codes)}",
            r.exact(log_every),
            None if r.seconds_to_stopped is None else round(r.seconds_to_stopped, 2),
            round(r.seconds_to_exit, 2),
        ]
        for r in rounds
    ]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:2] == ["--worker", "handler"]:
        return run_handler_worker(argv[2:])
    parser = argparse.ArgumentParser(prog="python -m tfmw.bench.preemption", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", type=int, default=50, help="checkpoint.everySteps")
    parser.add_argument("--after", type=int, default=120, help="SIGTERM once worker 0 logged this step")
    parser.add_argument("--paths", default="today,handler")
    parser.add_argument(
        "--hung-peer",
        type=float,
        default=0,
        metavar="CAP",
        help="also: SIGSTOP worker 0, SIGTERM worker 1, wait up to CAP seconds for it to exit",
    )
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    log_every = 10
    train_args = [
        "--set",
        "model.name=mlp",
        "--set",
        "data.synthetic.inputShape=[8,8]",
        "--set",
        "export.enabled=false",
        "--set",
        f"steps={args.steps}",
        "--set",
        f"checkpoint.everySteps={args.every}",
        "--set",
        f"logEverySteps={log_every}",
        "--set",
        "timeoutSeconds=30",
    ]
    workdir = Path(tempfile.mkdtemp(prefix="tfmw-preemption-"))
    rounds, hung = [], []
    try:
        if args.hung_peer:
            hung = [
                run_hung_peer(path, train_args, args.after, workdir, args.hung_peer) for path in args.paths.split(",")
            ]
        for _ in range(args.rounds):
            for path in args.paths.split(","):
                rounds.append(run_round(path, train_args, args.after, workdir))
                print(console_table(HEADERS, rows(rounds[-1:], log_every)).splitlines()[-1], file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    table = markdown_table if args.markdown else console_table
    print(f"steps={args.steps} checkpoint.everySteps={args.every} logEverySteps={log_every}; SIGTERM to worker 1")
    print(table(HEADERS, rows(rounds, log_every)))
    for path in args.paths.split(","):
        times = [r.seconds_to_exit for r in rounds if r.path == path]
        exact = sum(r.exact(log_every) for r in rounds if r.path == path)
        print(
            f"{path}: SIGTERM -> both exited median {statistics.median(times):.2f}s "
            f"(min {min(times):.2f}, max {max(times):.2f}); exact stop and resume {exact}/{len(times)}"
        )
    if hung:
        print(f"\nworker 0 hung (SIGSTOP), then SIGTERM to worker 1; cap {args.hung_peer:.0f}s")
        print(
            table(
                ["path", "worker 1 exited after (s)", "exit code", "its last tfmw line"],
                [[h.path, None if h.seconds is None else round(h.seconds, 1), h.code, h.last_line[:100]] for h in hung],
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
