"""`make cluster` / `make cluster-down`: a real Kubernetes control plane on this machine.

    python -m scripts.kube.cluster up   [--nodes N] [--gpus-per-node G] [--state DIR]
    python -m scripts.kube.cluster down [--state DIR]
    python -m scripts.kube.cluster status [--state DIR]

`up` builds the pinned binaries once (scripts/kube/build.py), starts etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and the node agent (scripts/kube/controlplane.py),
waits until the nodes are Ready and prints one line to use it: `export KUBECONFIG=<path>`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scripts.kube import controlplane
from scripts.kube.controlplane import ClusterError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.kube.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--state", type=Path, default=controlplane.DEFAULT_STATE,
                        help="state folder (default: .cluster/ in the repo)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes to register (1-7, default 1)")
    parser.add_argument("--gpus-per-node", type=int, default=0,
                        help="nvidia.com/gpu capacity each node advertises (no GPU is used; default 0)")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            state = controlplane.up(args.state, nodes=args.nodes, gpus_per_node=args.gpus_per_node)
            print(f"export KUBECONFIG={state.kubeconfig}", flush=True)
        elif args.action == "down":
            controlplane.down(args.state)
        else:
            state = controlplane.ClusterState.load(args.state.resolve())
            if not controlplane.running(state):
                print(f"cluster: none running in {args.state.resolve()}")
                return 3
            print(f"cluster: running, API server {state.server}, nodes {', '.join(state.nodes)}; "
                  f"export KUBECONFIG={state.kubeconfig}")
        return 0
    except ClusterError as err:
        print(f"make cluster: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("make cluster: interrupted (everything started was stopped)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
