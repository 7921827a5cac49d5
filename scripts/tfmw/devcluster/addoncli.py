"""The command line of an add-on installed on a running `make cluster` (Kueue:
`python -m tfmw.devcluster.kueue`; the peers' controllers: `python -m tfmw.peers.install`):

    python -m <module> install|uninstall [<its own arguments>] [--state DIR]

No running cluster at --state is one line and exit 1, as is any error the add-on names.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from tfmw.devcluster import controlplane

ACTIONS = ("install", "uninstall")


def addon_main(
    argv: list[str] | None,
    name: str,
    prog: str,
    description: str,
    act: Callable[[controlplane.ClusterState, argparse.Namespace], None],
    errors: tuple[type[BaseException], ...],
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None,
) -> int:
    """Parse `argv` (the action, the add-on's own arguments, --state) and run act(state, args) on
    the running cluster; `errors` are said on one line, `<name>: error: ...`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("action", choices=ACTIONS)
    add_arguments(parser)
    parser.add_argument("--state", type=Path, default=controlplane.DEFAULT_STATE)
    args = parser.parse_args(argv)
    state = controlplane.running_cluster(args.state)
    if state is None:
        print(f"{name}: error: no running cluster at {args.state} (start one with make cluster)", file=sys.stderr)
        return 1
    try:
        act(state, args)
    except errors as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 1
    return 0
