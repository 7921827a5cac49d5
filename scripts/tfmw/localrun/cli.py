"""`make local`: the chart's rendered workers as local processes, training for real.

    python -m tfmw.localrun [--env local] [-f values.yaml[,more.yaml] ...] [--set-json k=json ...]
                                [--set k=v ...] [--set-string k=v ...] [--set-file k=path ...]
                                [--network auto|netns|loopback]
                                [--fresh] [--timeout SECONDS]

Only the command line: the run itself is tfmw.localrun.run's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tfmw.chart.helmkit import ToolError
from tfmw.localrun import run as local_run
from tfmw.localrun.podspec import LocalRunError


def parse_args(argv):
    p = argparse.ArgumentParser(prog="make local", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="local", help="values/<env>.yaml overlay (default: local)")
    p.add_argument(
        "-f",
        "--values",
        dest="values_files",
        action="append",
        default=[],
        metavar="PATH[,PATH]",
        help="values files layered after the overlay, in the order given, before any --set* (repeatable)",
    )
    p.add_argument(
        "--set-json",
        dest="set_jsons",
        action="append",
        default=[],
        help="helm --set-json item, not split on spaces: 'a.b={\"x\": 1}' (repeatable)",
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        help="helm --set items, e.g. 'workers.replicas=3' (repeatable; space-separated ok)",
    )
    p.add_argument(
        "--set-string",
        dest="set_strings",
        action="append",
        default=[],
        help="helm --set-string items: every value is text, e.g. 'workers.nodeSelector.gpu=true' (repeatable)",
    )
    p.add_argument(
        "--set-file",
        dest="set_files",
        action="append",
        default=[],
        help="helm --set-file key=path items, e.g. 'training.files.main\\.py=main.py' (repeatable)",
    )
    p.add_argument("--release", default="local", help="release name used for rendering (default: local)")
    p.add_argument("--namespace", default="default")
    p.add_argument(
        "--network",
        choices=("auto", "netns", "loopback"),
        default="auto",
        help="auto: network namespaces when root, else loopback ports",
    )
    p.add_argument(
        "--runs-dir",
        type=Path,
        default=local_run.DEFAULT_RUNS,
        help="where run state lives (shared storage, per-pod folders)",
    )
    p.add_argument(
        "--fresh", action="store_true", help="delete this run's shared state first (checkpoints, model, completion)"
    )
    p.add_argument("--timeout", type=float, default=3600, help="give up after this many seconds")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return local_run.run(args)
    except (ToolError, LocalRunError) as err:
        print(f"make local: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("make local: interrupted", file=sys.stderr)
        return local_run.EXIT_INTERRUPTED
