"""`python -m entrypoint tf-config | run [--] CMD...` — the in-container launcher.

`tf-config` prints the TF_CONFIG this pod would get; `run` derives it, exports it, waits
for every peer name to resolve, then supervises the training command (default: the
built-in trainer). Every refusal is one line on stderr and a documented exit code.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from .cluster import (build_tf_config, check_tf_config_size, cluster_hosts, parse_tf_config,
                      task_is_chief)
from .errors import EXIT_OK, LauncherError
from .identity import parse_pod_name
from .peers import wait_for_peers
from .settings import LauncherSettings, load_settings
from .supervisor import Supervisor, SupervisorConfig

DEFAULT_TRAINING_COMMAND = ("python", "-m", "entrypoint.training")


def resolve_tf_config(env: Mapping[str, str]) -> tuple[dict, LauncherSettings, bool]:
    """(TF_CONFIG, settings, preset?) — a platform's TF_CONFIG is validated and kept."""
    raw = env.get("TF_CONFIG", "").strip()
    if raw:
        tf_config = parse_tf_config(raw)
        return tf_config, load_settings(env, need_derivation=False), True
    settings = load_settings(env)
    identity = parse_pod_name(settings.pod_name, settings.replicas, settings.statefulset)
    return build_tf_config(settings, identity), settings, False


def cmd_tf_config(env: Mapping[str, str]) -> int:
    tf_config, _, _ = resolve_tf_config(env)
    print(json.dumps(tf_config, separators=(",", ":")))
    return EXIT_OK


def cmd_run(env: Mapping[str, str], command: Sequence[str]) -> int:
    tf_config, settings, preset = resolve_tf_config(env)
    encoded = json.dumps(tf_config, separators=(",", ":"))
    check_tf_config_size(encoded)  # refuse now, not as an exec error of the training command
    task = tf_config["task"]
    log = lambda line: print(line, flush=True)  # noqa: E731 - one-liner sink
    log(f"tfmw launcher task={task['type']}:{task['index']} "
        f"workers={sum(len(v) for v in tf_config['cluster'].values())} "
        f"tf_config={'preset by the platform' if preset else 'derived from the pod'}")
    hosts = cluster_hosts(tf_config)

    def regroup() -> None:
        wait_for_peers(hosts, settings.peer_timeout_seconds, log=log)

    regroup()
    # An object-store URI (gs://, s3://) is the trainer's business (tf.io.gfile); the
    # launcher never imports TF, so it looks for the completion marker on mounted paths only.
    run_dir = (Path(settings.shared_dir) / settings.run_id
               if settings.shared_dir and settings.run_id and "://" not in settings.shared_dir
               else None)
    child_env = dict(env, TF_CONFIG=encoded)
    heartbeat = Path(tempfile.gettempdir()) / f"tfmw-heartbeat-{os.getpid()}"
    supervisor = Supervisor(SupervisorConfig(
        command=list(command) or list(DEFAULT_TRAINING_COMMAND),
        env=child_env, run_dir=run_dir, heartbeat_file=heartbeat,
        max_restarts=settings.max_restarts,
        hang_timeout_seconds=settings.hang_timeout_seconds,
        exit_on_completion=settings.exit_on_completion,
        regroup=regroup, is_chief=task_is_chief(tf_config), log=log))
    signal.signal(signal.SIGTERM, lambda signum, _frame: supervisor.request_stop(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: supervisor.request_stop(signum))
    try:
        return supervisor.run()
    finally:
        heartbeat.unlink(missing_ok=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint",
        description="tf-multiworker launcher: TF_CONFIG from the StatefulSet pod, peer wait, supervision.",
        epilog="exit codes: 0 ok, 2 bad configuration, 3 peers not found, 4 training failed, "
               "5 retries exhausted, 143 stopped by SIGTERM")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("tf-config", help="print the TF_CONFIG JSON this pod gets")
    run = sub.add_parser("run", help="derive TF_CONFIG, wait for peers, supervise the training command")
    run.add_argument("training_command", nargs=argparse.REMAINDER,
                     help="command to run (after --); default: python -m entrypoint.training")
    return parser


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env = dict(os.environ if env is None else env)
    try:
        if args.command == "tf-config":
            return cmd_tf_config(env)
        command = list(args.training_command)
        if command and command[0] == "--":
            command = command[1:]
        return cmd_run(env, command)
    except LauncherError as err:
        print(f"tfmw: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
