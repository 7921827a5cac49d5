"""`python -m entrypoint tf-config | run [--] CMD... | check-peers HOST... | logs RUN_DIR` — the in-container launcher.

`tf-config` prints the TF_CONFIG this pod would get; `run` derives it, exports it, waits
for every peer name to resolve, supervises the training command (default: the built-in
trainer) and ends the run (entrypoint.launcher, docs/lifecycle.md). `check-peers` runs the
same peer wait on the names given (the chart's `helm test` pod); `logs` prints the logs a run's
workers kept on shared storage (`make logs` after the pods are gone). Every refusal is one
line on stderr and a documented exit code.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping, Sequence

from . import podlog, stopsignal
from .errors import EXIT_OK, ConfigError, LauncherError
from .kubeapi import APIError, KubeAPI
from .launcher import Launcher, OutsideGroup, resolve_tf_config
from .peers import dns_resolves, port_accepts, wait_for_peers
from .regroup import statefulset_replicas
from .runcontext import Group
from .standby import FirstStandby, run_command

CHECK_PEERS_HINT = (
    "check that those pods are running (kubectl get pods) or raise --timeout-seconds "
    "(helm test: the chart's tests.timeoutSeconds)"
)


def cmd_tf_config(env: Mapping[str, str]) -> int:
    def group_size(settings) -> int:  # one read, no retry: this is a check, not a run
        try:
            return statefulset_replicas(KubeAPI.from_env(env, settings.api_dir), settings)
        except APIError as err:
            raise ConfigError(f"cannot read the group's size from statefulset {settings.statefulset}: {err}") from None

    try:
        tf_config, _, _ = resolve_tf_config(env, group_size=group_size)
    except OutsideGroup as outside:
        raise ConfigError(
            f"TFMW_POD_NAME={env.get('TFMW_POD_NAME')!r}: ordinal {outside.ordinal} is not below the group's "
            f"size {outside.size} (statefulset {env.get('TFMW_STATEFULSET')}'s spec.replicas)"
        ) from None
    print(Group.of(tf_config).encoded)  # what `run` would refuse (its size too), this refuses too
    return EXIT_OK


def cmd_check_peers(hosts: Sequence[str], timeout_seconds: float, port: int | None) -> int:
    """The launcher's own peer wait on `hosts`; with `port`, a name counts once that port
    also accepts a TCP connection (the worker's gRPC server is up)."""
    resolve, ready = (dns_resolves, "resolved") if port is None else (port_accepts(port), "reachable")
    wait_for_peers(hosts, timeout_seconds, resolve=resolve, ready=ready, hint=CHECK_PEERS_HINT)
    return EXIT_OK


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return seconds


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint",
        description="tf-multiworker launcher: TF_CONFIG from the pod, peer wait, supervision, the run's end.",
        epilog="exit codes: 0 ok, 2 bad configuration, 3 peers not found, 4 training failed permanently, "
        "5 restart limit reached, 6 deadline exceeded, 143 stopped by SIGTERM. In the chart's "
        "StatefulSet a finished or failed run idles instead of exiting (docs/lifecycle.md)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("tf-config", help="print the TF_CONFIG JSON this pod gets")
    run = sub.add_parser("run", help="derive TF_CONFIG, wait for peers, supervise the training command")
    run.add_argument(
        "training_command",
        nargs=argparse.REMAINDER,
        help="command to run (after --); default: python -m entrypoint.training",
    )
    check = sub.add_parser(
        "check-peers",
        help="wait until every host resolves (with --port: and accepts "
        "a TCP connection there); exit 0, or 3 naming the missing",
    )
    check.add_argument(
        "--timeout-seconds",
        type=_seconds,
        default=120.0,
        metavar="SECONDS",
        help="give up after this long (default 120)",
    )
    check.add_argument("--port", type=_port, help="also open a TCP connection to this port of every host")
    check.add_argument("hosts", nargs="+", metavar="HOST", help="DNS names of the workers")
    logs = sub.add_parser(
        "logs",
        help="print the logs the run's workers kept in <run dir>/logs, each line "
        "prefixed [pod/<name>]; exit 3 when there are none",
    )
    logs.add_argument("run_dir", metavar="RUN_DIR", help="the run's directory on shared storage (<shared>/<runId>)")
    return parser


def main(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None, first_standby: FirstStandby | None = None
) -> int:
    """`first_standby`: the first attempt's standby, started before these imports (entrypoint/__main__.py)."""
    args = build_parser().parse_args(argv)
    env = dict(os.environ if env is None else env)
    if args.command != "run":
        stopsignal.exit_on_signal()  # the launcher takes the stop signals over itself
    try:
        if args.command == "tf-config":
            return cmd_tf_config(env)
        if args.command == "check-peers":
            return cmd_check_peers(args.hosts, args.timeout_seconds, args.port)
        if args.command == "logs":
            return podlog.main([args.run_dir])
        return Launcher(env, run_command(args.training_command), first_standby=first_standby).run()
    except LauncherError as err:
        print(f"tfmw: {err}", file=sys.stderr, flush=True)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
