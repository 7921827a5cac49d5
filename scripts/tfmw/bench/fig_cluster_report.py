"""Figure 6's section of docs/benchmarks.md, from its Summary (fig_cluster): what the cluster's
start, the chart on it beside `make local`, its faults, resizes and disruptions cost (pure)."""

from __future__ import annotations

import math

from .fig_cluster import (
    CLUSTER_FAULT,
    FAULT_AFTER_STEP,
    FAULT_CHECKPOINT_EVERY,
    FAULT_STEPS,
    LOCAL_FAULT,
    NODE_FAULT,
    NODE_LOSS_TARGET_S,
    RESIZE_EVERY,
)
from .report import image, judged, paragraphs, parts_cell, settings_line, table


def section(s, table_rows, headers, load: str) -> str:

    if s.fault_rounds:
        faults = (
            f"A deleted worker pod costs {s.fault_cluster_resumed:.1f} s from its deletion through the API "
            f"to the group's first step after it resumed, against {s.fault_local_resumed:.1f} s for `make local`'s "
            f"`{LOCAL_FAULT}`: a median ratio of {s.fault_ratio:.2f}x "
            f"({judged(s.fault_ratio_min, s.fault_ratio_max, s.fault_ratio)}). The two faults are not the "
            "same event: the deleted pod gets SIGTERM and its grace period, so the group stops "
            "at the next checkpoint boundary and saves (steps lost: "
            f"{s.fault_steps_lost[0]} on the cluster, {s.fault_steps_lost[1]} for the SIGKILLed worker of "
            "`make local`, which resumes from the last checkpoint); then the pod's processes exit, the "
            "StatefulSet controller creates it again under the same name, the scheduler binds it and a "
            f"kubelet starts it: the recreated pod was Running {s.fault_pod_running:.1f} s after the delete. "
            "`make local`'s kubelet restarts the killed pod's processes in place at once. The rest, on both, "
            "is the re-formed group's start (the launcher, the peer wait, TensorFlow, the checkpoint "
            "restore)."
        )
    else:
        faults = (
            ("The fault pair was not measured in this run: " + "; ".join(s.fault_problems) + ".")
            if s.fault_problems
            else "The fault pair was not measured in this run."
        )
    if s.fault_rounds and s.fault_problems:
        faults += " Not counted: " + "; ".join(s.fault_problems) + "."
    if s.node_problem:
        faults += f" The node partition was not measured: {s.node_problem}."
    elif not math.isnan(s.node_resumed):
        faults += (
            f" A worker's node cut off (`{NODE_FAULT}`, the chart's defaults, no admin) costs "
            f"{s.node_resumed:.1f} s to the group's first step after it resumed (target ≤ "
            f"{NODE_LOSS_TARGET_S:g} s), the replacement pod Running after {s.node_pod_running:.1f} s: "
            "the node lifecycle controller's grace (40 s here) and the toleration (10 s) come first, then "
            "a survivor force-deletes the pod (docs/failure-model.md)"
            + (f"; measured in parts: {parts_cell(s.node_parts)}" if s.node_parts else "")
            + f". Once the link healed, the cut-off pod wrote: {s.node_fenced}."
        )
    faults += resize_text(s.resizes)
    faults += disruption_text(s.disruptions)
    return paragraphs(
        "## Figure 6: the local Kubernetes cluster, and the chart on it beside `make local`",
        image(
            "fig6_cluster.png",
            "cluster ready (image imported or cached) and down times, helm install to pods "
            "Running and to first step, pod delete to resumed, vs make local",
        ),
        settings_line(
            "a cluster of the figure's own (`scripts/tfmw/devcluster/controlplane.py`: etcd, kube-apiserver, "
            "kube-controller-manager, kube-scheduler v1.35.4, CoreDNS, and two real nodes, each a kubelet + "
            "containerd (runc, CNI bridge) + kube-proxy in a network and mount namespace of its own; binaries "
            "built once beforehand and not timed). The pods run the project's worker image (`make image "
            "BASE=debian`, the CPU variant, built beforehand and not timed), which `make cluster` imports into "
            "each node's containerd unless that node's cache already holds it. The chart with "
            "`values/local.yaml` (2 CPU workers, on the cluster each limited to 1 CPU and 2 GiB, which "
            "`make local` does not enforce; the `cnn` model, synthetic data; shared storage: a claim from the "
            "cluster's StorageClass, a folder for `make local`) and `--set training.config.steps=10 "
            "training.config.logEverySteps=1 training.config.checkpoint.everySteps=10 training.runId=<fresh>`, "
            "the same for `make local` (`python -m tfmw.localrun --fresh`, network namespaces). Per round: "
            "one `helm install` (no --wait) in a fresh namespace, pods and the chief's log polled through the "
            "API server every 0.1 s, then the namespace deleted and its pods gone; one `make local` run from "
            "process start to its first `tfmw progress step=1/..` line; then a fault pair from the fault "
            f"harness (`scripts/tfmw/faults/`: {FAULT_STEPS} steps, a checkpoint every "
            f"{FAULT_CHECKPOINT_EVERY}, "
            f"the fault once the chief is past step {FAULT_AFTER_STEP}): `{CLUSTER_FAULT}` on the cluster "
            "(pod 1 deleted through the API server, in a fresh namespace) and `" + LOCAL_FAULT + "` on `make "
            "local` (SIGKILL of pod 1), fault → resumed being the fault to the chief's first progress line "
            "after the restart (on the cluster followed through the API, the pod list polled every 0.5 s). "
            f"{s.rounds} round(s), alternating which goes first; medians, the ratios paired per round. The "
            "first step includes importing TensorFlow, the peer wait and building the model in both.",
            load,
        ),
        table(headers, table_rows),
        f"**Reading it.** {ready_text(s)} The cluster is gone in {s.down_seconds:.1f} s. "
        f"`helm install` returns in {s.install_seconds:.2f} s and both worker pods are Running "
        f"{s.return_to_running:.2f} s later (max {s.return_to_running_max:.2f} s; target 5 s, the image "
        "present): the StatefulSet controller creates them (`Parallel` pod management), the scheduler binds "
        "them to the two nodes, and each node's kubelet has containerd start the pod's sandbox and its "
        "container with runc, the image already there (`IfNotPresent`). From `helm install` to the first "
        f"training step takes {s.install_to_first_step:.1f} s on the cluster against {s.local_first_step:.1f} s "
        f"for `make local`: a median ratio of {s.ratio:.2f}x ({judged(s.ratio_min, s.ratio_max, s.ratio)}). Of "
        f"the cluster's time, {s.install_seconds:.1f} s is `helm install` and {s.return_to_running:.1f} s getting "
        f"the pods Running; the remaining {s.running_to_first_step:.1f} s is the pods' own start (the launcher, "
        "the peer wait until each name resolves through CoreDNS, importing TensorFlow, building the model), "
        f"against {s.local_first_step:.1f} s for the whole of `make local`, which renders with `helm template` "
        f"and starts the same processes itself, without containers. {faults}",
    )


def ready_text(s) -> str:
    """What the `up`s of figure 6 say about the ready target and the image (pure)."""

    def within(seconds: float) -> str:
        return f"{'within' if seconds <= 20 else 'over'} the 20 s target"

    imported, cached = s.import_up, s.cached_up
    if imported and cached:
        return (
            f"The first `make cluster` imported the worker image into both nodes' containerd "
            f"({imported.import_seconds:.1f} s, the nodes in parallel; that `up` was ready in "
            f"{imported.ready_seconds:.1f} s, {within(imported.ready_seconds)}); after a `make cluster-down` "
            f"the second found it in the nodes' cache (`.tools/containerd`) and was ready in "
            f"{cached.ready_seconds:.1f} s ({within(cached.ready_seconds)}), as every `make cluster` is "
            "until the image changes."
        )
    if cached:
        return (
            f"The worker image was already in both nodes' containerd cache (`.tools/containerd`, kept from an "
            f"earlier cluster): `make cluster` was ready in {cached.ready_seconds:.1f} s "
            f"({within(cached.ready_seconds)}), as every `make cluster` is until the image changes."
        )
    if imported:
        ups = [u for u in s.ups if u.image == "imported"]
        each = ", ".join(f"{u.import_seconds:.1f} s of {u.ready_seconds:.1f} s" for u in ups)
        rest = ", ".join(f"{u.ready_seconds - u.import_seconds:.1f} s" for u in ups)
        again = (
            (
                " The second `up`, right after a `make cluster-down` on the same nodes' cache, imported it "
                "again: up() skips the import only when a node's containerd lists the image under its image id, "
                "and here it did not."
            )
            if len(ups) > 1
            else ""
        )
        return (
            f"{'Every' if len(ups) > 1 else 'The'} `up` imported the worker image into both nodes "
            f"({each} ready, {within(max(u.ready_seconds for u in ups))}).{again} Without the import "
            f"(ready minus import, derived) the `up`{'s' if len(ups) > 1 else ''} took {rest}."
        )
    return (
        f"Once built, the cluster is ready in {s.ready_seconds:.1f} s ({within(s.ready_seconds)}; "
        "`up` said nothing about the worker image)."
    )


def resize_text(resizes) -> str:
    """Figure 6's sentences on its resizes ("" when none ran) (pure)."""
    if not resizes:
        return ""
    parts = []
    for r in resizes:
        before, after = r.workers
        if r.problem:
            parts.append(f"{before} → {after} workers was not measured: {r.problem}")
            continue
        exact = "the step the group stopped at" if r.exact else f"not the step the group stopped at ({r.stopped_at})"
        parts.append(
            f"{before} → {after} workers resumed {r.resumed:.1f} s after `helm upgrade` started (the chief re-formed "
            f"the group after {r.reformed:.1f} s), from step {r.resumed_from}, {exact}"
        )
    return (
        " A resize by `helm upgrade --set workers.replicas=N` of a running 2-worker release (the `mlp` model, "
        f"a checkpoint every {RESIZE_EVERY} steps) is one group restart: "
        + "; ".join(parts)
        + ". Re-forming waits for the launchers' look at the StatefulSet's size "
        "(every 5 s) and the group's stop at its next checkpoint boundary; the rest is a new pod's start (when "
        "growing) and the group's start and restore."
    )


def disruption_text(disruptions) -> str:
    """Figure 6's sentence on the voluntary disruptions ("" when none ran) (pure)."""
    measured = [d for d in disruptions if d.rounds]
    if not measured:
        return (" The voluntary disruptions were not measured: " + "; ".join(p for d in disruptions for p in d.problems)
                + ".") if disruptions else ""  # fmt: skip
    named = {"drain-worker": "a drain of worker 1's node", "preempt-worker": "a priority preemption of worker 1",
             "suspend": "a suspend and resume"}  # fmt: skip
    parts = []
    for d in measured:
        after = (
            f" ({d.after_return:.1f} s of it after the "
            + ("room returned" if d.scenario == "preempt-worker" else "`suspend: false`")
            + ")"
            if not math.isnan(d.after_return)
            else ""
        )
        parts.append(
            f"{named.get(d.scenario, d.scenario)} {d.resumed:.1f} s{after}, {d.ratio:.2f}x the same round's pod "
            f"delete, {d.steps_lost} step(s) re-trained"
        )
    return (
        " The cluster's own disruptions, each through the API server as the cluster does it (the Eviction API "
        "with the PodDisruptionBudget, the scheduler's preemption, `helm upgrade` of `suspend`), cost from the "
        "disruption to the group's first step after it: "
        + "; ".join(parts)
        + ". Each stops the group at the checkpoint it agrees on, so the group resumes from the step it stopped "
        "at; a preempted worker with nowhere to go waits (the run Waiting) until the room returns."
    )
