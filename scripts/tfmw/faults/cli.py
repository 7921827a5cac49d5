"""Fault injection: kill, hang, cut off or delete a worker mid-training and measure what it
costs. Used by tests/tfmw/faults and tests/e2e/cluster (assertions) and `make bench` (figures).

    python -m tfmw.faults [--scenario NAME ...] [--steps 120] [--set k=v ...]
    python -m tfmw.faults --cluster [--kubeconfig PATH] [--namespace NS] [--scenario NAME ...]

prints a table: time from fault to training resumed, steps lost, total steps, identical
weights. Every scenario is a real 2-worker MWMS run of the chart with values/local.yaml.

On `make local`'s runner (the default), in network namespaces (root) or on loopback ports.
What a fault means there (each is what a cluster does to a pod or a node):
  kill-worker / kill-chief   SIGKILL every process of pod 1 / pod 0 (OOM kill, node loss);
                             the local kubelet restarts the pod, as restartPolicy Always does.
  hang-worker                SIGSTOP pod 1's training process (a hung driver or collective);
                             the launcher's watchdog must notice and restart it.
  partition-worker           pod 1's network link down for `partition_seconds`, then up
                             (network namespaces only).
  kill-during-checkpoint     SIGKILL pod 0 (the chief, which writes the shared checkpoint)
                             while it is writing a checkpoint.

On a Kubernetes cluster (`--cluster`: `make cluster`'s, or any a kubeconfig reaches), the
chart is installed with helm (storage.type=createClaim: a ReadWriteMany claim from the
default StorageClass, so checkpoints are shared) in a namespace of its own, and:
  delete-worker / delete-chief   pod 1 / pod 0 deleted through the API once a checkpoint is
                             published and training passed step 50: the pod gets SIGTERM and
                             its grace period, the StatefulSet controller recreates it under
                             the same name, and the group resumes from the checkpoint.
  node-partition / node-loss     only on `make cluster`'s own nodes (scripts/tfmw/faults/nodes.py):
                             worker 1's node cut off (healed after the run; the old pod must
                             write nothing), or lost for good (not run unless named). The
                             workers are spread one per node.
Logs are followed through the API for every pod incarnation (kept after a finished run scales
its StatefulSet to 0); the chief's COMPLETED marker is read from the claim's volume when that
is a hostPath on this machine, and its weights digest must match every worker's.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tfmw.chart.helmkit import ToolError
from tfmw.faults.cluster import DEFAULT_KUBECONFIG, run_cluster_scenario
from tfmw.faults.inject import CLUSTER_SCENARIOS
from tfmw.faults.kube import FaultError, check_cluster
from tfmw.faults.local import DEFAULT_FAULT_AFTER_STEP, SCENARIOS, run_scenario
from tfmw.faults.nodes import NODE_SCENARIOS, NodeFaultError, cluster_dir
from tfmw.faults.tables import cluster_table, parts_table, table
from tfmw.localrun.podspec import LocalRunError


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m tfmw.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario",
        action="append",
        help=f"run only these (repeatable); default: all. Local: {', '.join(SCENARIOS)}; "
        f"--cluster: {', '.join(CLUSTER_SCENARIOS)}",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="run on a Kubernetes cluster (helm install, a pod deleted through the API) instead of make local's runner",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG),
        help="--cluster: the cluster's kubeconfig (default: $KUBECONFIG, else make cluster's)",
    )
    parser.add_argument("--namespace", help="--cluster: install here (default: a new namespace, deleted afterwards)")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument(
        "--hang-timeout",
        type=int,
        default=None,
        help="training.hangTimeoutSeconds for the run (the watchdog's static bound); default: "
        "the chart's (600 s, with training.hangDetection=adaptive)",
    )
    parser.add_argument("--verbose", action="store_true", help="stream every pod's log")
    args = parser.parse_args(argv)
    known = CLUSTER_SCENARIOS if args.cluster else SCENARIOS
    for scenario in args.scenario or []:
        if scenario not in known:
            parser.exit(
                2,
                f"faults: --scenario {scenario}: not a {'cluster' if args.cluster else 'local'} "
                f"scenario; use one of {', '.join(known)}"
                + ("" if args.cluster else f" (or --cluster for {', '.join(CLUSTER_SCENARIOS)})")
                + "\n",
            )
    args.scenarios = args.scenario or list(known)
    if args.cluster:
        try:
            cluster_dir(args.kubeconfig)
            own_nodes = True
        except NodeFaultError as err:
            own_nodes, why = False, err
        if not args.scenario:
            # By default: the node faults on make cluster's own nodes only, and never node-loss
            # (its node stays lost until the cluster is made again): name it to run it.
            args.scenarios = [s for s in known if s != "node-loss" and (own_nodes or s not in NODE_SCENARIOS)]
        elif not own_nodes and set(args.scenarios) & set(NODE_SCENARIOS):
            parser.exit(2, f"faults: {why}\n")
    if args.steps < DEFAULT_FAULT_AFTER_STEP + 10:
        parser.exit(
            2,
            f"faults: --steps {args.steps}: the fault lands after step {DEFAULT_FAULT_AFTER_STEP}, "
            f"so at least {DEFAULT_FAULT_AFTER_STEP + 10}\n",
        )
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = print if args.verbose else (lambda line: None)
    results = []
    if args.cluster:
        try:
            kube = check_cluster(args.kubeconfig)
        except FaultError as err:
            print(f"faults: {err}", file=sys.stderr)
            return err.exit_code
        for scenario in args.scenarios:
            print(f"running {scenario} on the cluster of {args.kubeconfig} ...", flush=True)
            try:
                results.append(
                    run_cluster_scenario(
                        scenario,
                        args.kubeconfig,
                        namespace=args.namespace,
                        steps=args.steps,
                        extra_sets=tuple(args.sets),
                        hang_timeout_seconds=args.hang_timeout,
                        kube=kube,
                        out=out,
                    )
                )
            except FaultError as err:  # it cannot be done on this cluster at all
                print(f"faults: {err}", file=sys.stderr)
                return err.exit_code
    else:
        for scenario in args.scenarios:
            print(f"running {scenario} ...", flush=True)
            try:
                results.append(
                    run_scenario(
                        scenario,
                        steps=args.steps,
                        extra_sets=tuple(args.sets),
                        hang_timeout_seconds=args.hang_timeout,
                        out=out,
                    )
                )
            except (ToolError, LocalRunError) as err:  # the chart cannot run here at all
                print(f"faults: {err}", file=sys.stderr)
                return getattr(err, "exit_code", 2)
    print("\n".join(table(results)))
    if any(r.parts for r in results):
        print("\n" + "\n".join(parts_table(results)))
    if args.cluster:
        print("\n" + "\n".join(cluster_table(results)))
    return 0 if all(r.completed for r in results) else 1
