"""The command line of an add-on of a running `make cluster`: the registry and Prometheus
(`python -m tfmw.devcluster.registry|prometheus start|stop`), Kueue (`python -m
tfmw.devcluster.kueue install|uninstall`) and the peers' controllers (`python -m
tfmw.peers.install install|uninstall tfjob|jobset`):

    python -m <module> <verb> [<its own arguments>] [--state DIR]

No running cluster at --state is one line and exit 1, as is any error the add-on names. A verb
that only stops the add-on's own processes (the registry's and Prometheus' `stop`) needs just the
cluster's state folder: it must work after the API server died, too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection
from pathlib import Path

from tfmw.devcluster import controlplane


def addon_main(
    argv: list[str] | None,
    name: str,
    doc: str,
    verbs: dict[str, Callable[..., object]],
    errors: tuple[type[BaseException], ...],
    prog: str | None = None,
    add_arguments: Callable[[argparse.ArgumentParser], object] = lambda parser: None,
    without_api: Collection[str] = (),
) -> int:
    """Parse `argv` (the verb, the add-on's own arguments, --state) and run
    verbs[verb](state, <its own arguments, by name>) on the running cluster; `errors` are said
    on one line, `<name>: error: ...`. `prog`: python -m tfmw.devcluster.<name> unless given.
    The verbs in `without_api` run on the state folder of a cluster whose API server is gone too."""
    parser = argparse.ArgumentParser(prog=prog or f"python -m tfmw.devcluster.{name}", description=doc.split("\n\n")[0])
    parser.add_argument("verb", choices=tuple(verbs))
    add_arguments(parser)
    parser.add_argument("--state", type=Path, default=controlplane.DEFAULT_STATE)
    args = vars(parser.parse_args(argv))
    verb, directory = args.pop("verb"), args.pop("state")
    if verb in without_api:
        state = controlplane.ClusterState.load(Path(directory).resolve())
    else:
        state = controlplane.running_cluster(directory)
    if state is None:
        print(f"{name}: error: no running cluster at {directory} (start one with make cluster)", file=sys.stderr)
        return 1
    try:
        verbs[verb](state, **args)
    except errors as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 1
    return 0
