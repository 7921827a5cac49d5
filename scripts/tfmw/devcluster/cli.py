"""`make cluster` / `make cluster-down` / `make cluster-load`: a real Kubernetes on this machine.

    python -m tfmw.devcluster up   [--nodes N] [--gpus-per-node G] [--state DIR] [--base ...] [--kueue] [--flux]
    python -m tfmw.devcluster load [--state DIR] [--base ...]   (the current worker image into every node)
    python -m tfmw.devcluster down [--state DIR]
    python -m tfmw.devcluster status [--state DIR]

`up` builds the pinned binaries once (scripts/tfmw/devcluster/build.py, build_coredns.py) and the worker
image when its sources changed (workerimage.py, through scripts/tfmw/image/build.py, CPU variant: the
image values/local.yaml pulls), starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
CoreDNS and the nodes (kubelet, containerd, kube-proxy: scripts/tfmw/devcluster/controlplane.py,
nodes.py), imports the image into every node, waits until the nodes are Ready and prints one line to
use it: `export KUBECONFIG=<path>`. With --kueue (`make cluster KUEUE=1`) it then installs the pinned
Kueue and its queues (scripts/tfmw/devcluster/kueue.py; the manager is built once); with --flux
(`make cluster FLUX=1`) the pinned Flux source-controller and helm-controller, on the host
(scripts/tfmw/devcluster/flux.py; built once), and the local OCI registry they install charts from
(registry.py). This file only parses and dispatches.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tfmw.devcluster import controlplane, flux, kueue, registry, workerimage
from tfmw.devcluster.build import KubeBuildError
from tfmw.devcluster.controlplane import ClusterError
from tfmw.devcluster.nodes import NodeError
from tfmw.devcluster.pki import PkiError
from tfmw.k8s.api import ApiError


def up(args: argparse.Namespace) -> None:
    controlplane.preflight(args.nodes, args.gpus_per_node)
    if not args.no_image:
        workerimage.check_image_engine()
    images = workerimage.images_for_up(args.state, args.base, args.no_image)
    state = controlplane.up(args.state, nodes=args.nodes, gpus_per_node=args.gpus_per_node, images=images)
    if args.kueue:
        kueue.install(state)
    if args.flux:
        registry.start(state)
        flux.start(state)
    print(f"export KUBECONFIG={state.kubeconfig}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfmw.devcluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status", "load"))
    parser.add_argument(
        "--state", type=Path, default=controlplane.DEFAULT_STATE, help="state folder (default: .cluster/ in the repo)"
    )
    parser.add_argument("--nodes", type=int, default=2, help="nodes (1-7, default 2)")
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        help="nvidia.com/gpu capacity each node advertises (no GPU is used; default 0)",
    )
    parser.add_argument(
        "--base",
        choices=("debian", "official"),
        default="debian",
        help="the worker image's base when it must be built: a Debian-made "
        "python:3.11-slim-bookworm equivalent (default; no registry needed) or the "
        "official python image",
    )
    parser.add_argument(
        "--kueue",
        action="store_true",
        help="install the pinned Kueue (its own chart) and a ClusterQueue once the nodes are Ready",
    )
    parser.add_argument(
        "--flux",
        action="store_true",
        help="start the pinned Flux source-controller and helm-controller and the local OCI registry",
    )
    parser.add_argument(
        "--no-image",
        action="store_true",
        help="start without the worker image (pods that need it show ErrImageNeverPull until `make cluster-load`)",
    )
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            up(args)
        elif args.action == "load":
            workerimage.load(args.state, args.base)
        elif args.action == "down":
            controlplane.down(args.state)
        else:
            state = controlplane.running_cluster(args.state)
            if state is None:
                print(f"cluster: none running in {args.state.resolve()}")
                return 3
            print(
                f"cluster: running, API server {state.server}, nodes {', '.join(state.nodes)}; "
                f"export KUBECONFIG={state.kubeconfig}"
            )
        return 0
    except ClusterError as err:
        print(f"make cluster: {err}", file=sys.stderr)
        return err.exit_code
    except kueue.KueueError as err:
        print(f"make cluster: the cluster runs, but Kueue is not installed: {err}", file=sys.stderr)
        return 4
    except (flux.FluxError, registry.RegistryError) as err:
        print(f"make cluster: the cluster runs, but Flux is not started: {err}", file=sys.stderr)
        return 4
    except (ApiError, PkiError, NodeError, KubeBuildError, OSError) as err:
        # Whatever `up` had started was stopped and removed before this reached here.
        print(f"make cluster: {' '.join(str(err).split())}", file=sys.stderr)
        return 4
    except KeyboardInterrupt:
        print("make cluster: interrupted (everything started was stopped)", file=sys.stderr)
        return 130
