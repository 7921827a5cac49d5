"""`python -m entrypoint.training`: the built-in MWMS trainer (see docs/training.md).

Order matters: the environment, TF_CONFIG and the config are checked and the COMPLETED
marker is looked at before TensorFlow is imported, so refusals and "already done" take
well under a second. A marker that cannot be read is neither: exit 75, retried.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from .. import loglines
from ..cluster import worker_group
from ..errors import EXIT_OK, EXIT_RETRYABLE, EXIT_SIGTERM
from ..rundir import MarkerUnreadable, RunDir, read_completed
from .config import ConfigError, resolve, run_env
from .failures import TrainingError, error_summary, exit_code_for, is_retryable
from .sigterm import SigtermFlag


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint.training", description="Built-in MultiWorkerMirroredStrategy trainer."
    )
    parser.add_argument(
        "--config",
        default=os.environ.get("TFMW_TRAINING_CONFIG"),
        help="YAML/JSON training config (default: $TFMW_TRAINING_CONFIG; none: all defaults)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, e.g. --set steps=100 --set model.name=mlp (repeatable)",
    )
    parser.add_argument("--shared-dir", help="shared storage path (default: $TFMW_SHARED_DIR)")
    parser.add_argument("--run-id", help="run id (default: $TFMW_RUN_ID, else 'default')")
    parser.add_argument("--check", action="store_true", help="validate the config, print it as JSON, exit")
    parser.add_argument(
        "--evaluate",
        action="store_true",
        help="evaluate each new checkpoint of the run until it completes (the evaluator; "
        "also what a TF_CONFIG evaluator task does)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    stop = SigtermFlag()
    stop.install()
    try:
        config = resolve(args.config, args.overrides)
        cluster = worker_group(os.environ.get("TF_CONFIG"))
        env = run_env(os.environ, args.shared_dir, args.run_id)
    except ConfigError as err:
        print(str(err), file=sys.stderr, flush=True)
        return err.exit_code
    if args.check:
        import json

        print(json.dumps(config, indent=2, sort_keys=True, allow_nan=False))  # validated: all finite
        return EXIT_OK

    if not os.environ.get("TF_CONFIG"):
        os.environ.pop("TF_CONFIG", None)  # TensorFlow fails on an empty TF_CONFIG; unset means one worker
    if args.evaluate or cluster.evaluator:
        # Outside the collective: no strategy, so TensorFlow must not see the group's TF_CONFIG.
        os.environ.pop("TF_CONFIG", None)
        from . import sidecar

        try:
            return sidecar.run(config, env, stop, os.environ)
        except ConfigError as err:
            print(str(err), file=sys.stderr, flush=True)
            return err.exit_code
    ended = ended_before_training(RunDir.of(env.shared_dir, env.run_id), env.run_id, cluster.worker_index)
    if ended is not None:
        return ended

    try:
        from .trainer import train  # TensorFlow is imported here, not before

        outcome = train(config, cluster, env, stop)
    except ConfigError as err:
        print(str(err), file=sys.stderr, flush=True)
        return err.exit_code
    except Exception as err:  # every failure becomes an exit code the launcher understands
        # retryable=true: exit 75, the launcher restarts training in place; retryable=false:
        # exit 4, permanent (the launcher does not retry). A TrainingError is a known condition
        # (corrupt data, a diverged loss) that its one line explains; anything else gets its traceback.
        retryable = is_retryable(err)
        if not retryable and not isinstance(err, TrainingError):
            traceback.print_exc()
        print(
            loglines.line(
                loglines.ERROR,
                retryable="true" if retryable else "false",
                worker=cluster.worker_index,
                text=error_summary(err),
            ),
            flush=True,
        )
        if retryable:
            # Leave here, with the exception still referenced: returning would free its
            # traceback, and with it the strategy and iterators whose C++ destructors wait on
            # RPCs to the lost peer. Measured on kill-worker: 1 run in 3 sat 5.4 s in that
            # teardown after this line, until the hang watchdog killed it.
            _exit(EXIT_RETRYABLE)
        return exit_code_for(err)
    if outcome.stopped:
        return EXIT_SIGTERM
    # '-' where a value is unknown (examples_per_sec after a restart that only exported)
    loss = "-" if outcome.final_loss is None else f"{outcome.final_loss:.4f}"
    rate = "-" if outcome.examples_per_sec is None else f"{outcome.examples_per_sec:.1f}"
    print(
        loglines.line(
            loglines.DONE,
            steps=outcome.steps,
            final_loss=loss,
            examples_per_sec=rate,
            model=outcome.model_path or "-",
            weights_digest=outcome.weights_digest,
            **{key: f"{value:.3f}" for key, value in outcome.ending_seconds.items()},
        ),
        flush=True,
    )
    return EXIT_OK


def ended_before_training(run: RunDir, run_id: str, worker: int) -> int | None:
    """The exit code when the run's COMPLETED marker says not to train (done: 0; unreadable:
    75, retried, since the run may have finished or not), None to train."""
    try:
        completed = read_completed(run) is not None
    except MarkerUnreadable as err:  # maybe finished, maybe not: neither train nor call it done
        print(loglines.line(loglines.ERROR, retryable="true", worker=worker, text=str(err)), flush=True)
        return EXIT_RETRYABLE
    if not completed:
        return None
    print(loglines.line(loglines.COMPLETED, run=run_id), flush=True)
    return EXIT_OK


def _exit(code: int) -> None:
    """Exit with `code`. After a success, a SIGTERM stop or a retryable failure, leave at once
    (os._exit), skipping TensorFlow's teardown: its gRPC server, the coordination service's
    shutdown RPCs and the collective's pump joins, which took 15-17 s after `tfmw stopped` on a
    deleted pod, 2-6.5 s after a lost peer (the warm standby cannot start the next attempt
    before this process is gone), and up to 35 s after a finished run's COMPLETED on the chief:
    time the pod's grace period, the group's recovery or the run's end pays for nothing.
    Nothing is lost: a published checkpoint, the exported model and the COMPLETED marker are
    renamed into place before this, the TensorBoard writers are closed, every line is flushed
    here, and after a success or a stop every worker has passed the group's barrier
    (entrypoint.training.leaving), so no peer still needs this one's collectives or
    coordination service. Every other outcome exits normally."""
    if code in (EXIT_OK, EXIT_SIGTERM, EXIT_RETRYABLE):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
