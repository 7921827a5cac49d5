"""`python -m entrypoint tf-config | run [--] CMD...` — the in-container launcher.

`tf-config` prints the TF_CONFIG this pod would get; `run` derives it, exports it, waits
for every peer name to resolve, supervises the training command (default: the built-in
trainer) and ends the run (entrypoint.launcher, docs/lifecycle.md). Every refusal is one
line on stderr and a documented exit code.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Mapping, Sequence

from .cluster import check_tf_config_size
from .errors import EXIT_OK, LauncherError
from .launcher import DEFAULT_TRAINING_COMMAND, Launcher, resolve_tf_config  # noqa: F401 - re-exported


def cmd_tf_config(env: Mapping[str, str]) -> int:
    tf_config, _, _ = resolve_tf_config(env)
    encoded = json.dumps(tf_config, separators=(",", ":"))
    check_tf_config_size(encoded)  # what `run` would refuse, this refuses too
    print(encoded)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint",
        description="tf-multiworker launcher: TF_CONFIG from the pod, peer wait, supervision, the run's end.",
        epilog="exit codes: 0 ok, 2 bad configuration, 3 peers not found, 4 training failed permanently, "
               "5 restart limit reached, 6 deadline exceeded, 143 stopped by SIGTERM. In the chart's "
               "StatefulSet a finished or failed run idles instead of exiting (docs/lifecycle.md)")
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
        return Launcher(env, command).run()
    except LauncherError as err:
        print(f"tfmw: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
