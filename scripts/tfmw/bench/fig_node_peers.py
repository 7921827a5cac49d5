"""Figure 11 (opt-in, `make bench PEERS=1`): a node lost, under the chart and under its peers.

Figure 10's run and systems (tfmw.bench.fig_peers), with the one fault figure 10 cannot
repeat on one cluster: worker 1's node lost as a machine is (every process on it SIGKILLed,
its link cut: tfmw.faults.nodes), once the chief has a checkpoint and passed step 50. A lost
node stays lost, so each system gets a cluster of its own: three nodes (figure 6's otherwise),
the peer's controller installed from its own manifests (the chart needs none), the two
workers spread one per node and off the controller's node, so the controller survives the
loss as it would on a cluster whose controllers run on nodes of their own. Nobody steps in:
a run that has not ended NODE_LOSS_TIMEOUT after the fault is reported as it was left (its
pods, their restarts). Kubernetes' defaults apply to the peers' pods (a NoExecute toleration
of 300 s for an unreachable node); the chart's are its own (`workers.nodeLossTolerationSeconds`).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile

from tfmw.devcluster import controlplane
from tfmw.faults.analysis import FaultResult
from tfmw.faults.kube import FaultError, Kube
from tfmw.k8s.api import ns_path
from tfmw.peers import install, run

from . import fig_peers
from .cluster_kit import cluster_down, cluster_up
from .fig_peers import CHECKPOINT_EVERY, FAULT_AFTER_STEP, STEPS, Summary
from .figure import BenchRun, measured
from .report import image, paragraphs, parts_cell, settings_line, table

# figure 10's table and plot, over this figure's one fault
HEADERS, table_rows, plot = fig_peers.HEADERS, fig_peers.table_rows, fig_peers.plot

FIGURE = "figure 11"
NODES = 3  # two for the workers (one is lost), one for the peer's controller
# The fault -> the run's end: past Kubernetes' 40 s to declare the node unreachable here and
# its default 300 s toleration, with room for a replacement's start and the remaining steps.
NODE_LOSS_TIMEOUT = 600.0
# The first round's order (the chart's quick run first); later rounds rotate it.
ORDER = ("chart", "jobset", "tfjob-onfailure", "tfjob-exitcode")


def peer_of(system: str) -> install.Peer | None:
    """The controller `system` needs (None: the chart needs none) (pure)."""
    if system == "chart":
        return None
    return install.PEERS["jobset" if system == "jobset" else "tfjob"]


def controller_nodes(pods: list[dict]) -> tuple[str, ...]:
    """The nodes a controller's pods run on (pure)."""
    return tuple(sorted({n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))}))


def measure(quick: bool, log=print) -> Summary:
    parts = fig_peers.prepare(FIGURE, log)
    rounds = 1 if quick else 3
    runs = []
    for index in range(rounds):
        for system in fig_peers.rotated(ORDER, index):
            runs.append(one(parts, system, index, log))
    return Summary(tuple(runs), rounds, tuple(install.settings(p) for p in install.PEERS.values()), (run.NODE_LOSS,))


def one(parts: fig_peers.Parts, system: str, index: int, log) -> run.PeerRun:
    """One run of `system` with worker 1's node lost, on a fresh cluster (down after)."""
    say = lambda line: log(f"  {FIGURE}: {line}")  # noqa: E731
    log(f"  {FIGURE}: round {index + 1}: {run.NODE_LOSS} under {system}")
    work = tempfile.mkdtemp(prefix="tfmw-bench-node-peers-")
    state_dir = os.path.join(work, "state")
    try:
        state, _ = cluster_up(controlplane, state_dir, parts.bins, parts.archive, log, FIGURE, nodes=NODES)
        try:
            kube = Kube(state.kubeconfig)
            peer = peer_of(system)
            if peer is None:
                done = run.run_chart(
                    kube, state.kubeconfig, run.NODE_LOSS, STEPS, CHECKPOINT_EVERY, FAULT_AFTER_STEP, NODE_LOSS_TIMEOUT
                )
            else:
                try:
                    install.install(state, peer, say=say)
                except install.PeerError as err:  # this run's cluster only: the others' results stay
                    raise FaultError(f"{peer.key} could not be installed: {err}") from None
                avoid = controller_nodes(kube.items(ns_path(peer.namespace, "pods"), ""))
                say(f"{peer.key}'s controller on {', '.join(avoid) or 'no node'}: the workers run elsewhere")
                done = fig_peers.peer_run(kube, system, run.NODE_LOSS, parts, NODE_LOSS_TIMEOUT, avoid_nodes=avoid)
        except FaultError as err:
            done = run.PeerRun(
                system, run.NODE_LOSS, FaultResult(run.NODE_LOSS, False, str(err), STEPS, CHECKPOINT_EVERY)
            )
        finally:
            cluster_down(controlplane, state_dir, log, FIGURE)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return fig_peers.said(done, index, FIGURE, log)


# ---------------------------------------------------------------- the figure

TITLE = "Figure 11: a node lost under the chart, a TFJob and a JobSet"


def run_figure(bench: BenchRun) -> str:
    return measured(bench, sys.modules[__name__], TITLE, "fig11_node_peers.png", section)


def section(s, table_rows, headers, load: str) -> str:
    """Figure 11: worker 1's node lost under the chart, a TFJob and a JobSet."""
    settings = (
        f"figure 10's run and systems (the peers' settings there), with worker 1's node lost once the chief has "
        f"a checkpoint and passed step {FAULT_AFTER_STEP}: every process of the node SIGKILLed and its link "
        f"cut, as a machine is lost. A lost node stays lost, so each run has a cluster of its own: {NODES} "
        "nodes (figure 6's otherwise), the peer's controller installed from its own manifests on one of them (the "
        "chart needs none), the 2 workers spread one per node (a topology spread constraint) and off the "
        "controller's node, so the controller outlives the loss as on a cluster whose controllers run on nodes of "
        "their own (a replacement pod: the chart's on the third node, free; a peer's on the survivor's node, the "
        "third holding the controller; every node's CPUs are this machine's). Kubernetes' defaults apply to the "
        "peers' pods (an unreachable node tolerated for 300 s); the "
        "chart's own `workers.nodeLossTolerationSeconds` to its workers. The cluster declares a node unreachable "
        f"after 40 s (its `--node-monitor-grace-period`). A run not ended {NODE_LOSS_TIMEOUT:.0f} s after the "
        f"fault is reported as it was left: nobody steps in. {s.rounds} round(s); medians (min-max)."
    )
    ended = []
    for r in s.runs:
        parts = parts_cell(r.result.node_parts.items()) if r.result.node_parts else ""
        when = "" if math.isnan(r.seconds_to_end) else f" ({r.seconds_to_end:.0f} s after the fault)"
        ended.append(
            f"- `{r.system}`{when}: {r.result.reason}" + (f"; fault -> resumed in parts: {parts}" if parts else "")
        )
    return paragraphs(
        "## Figure 11: a node lost under the chart, a TFJob and a JobSet",
        settings_line(settings, load),
        image("fig11_node_peers.png", "a lost node: fault to resumed under the chart, a TFJob and a JobSet"),
        table(headers, table_rows),
        "How each run ended, in the controller's own words where it has any, and where its pods were left:",
        "\n".join(ended),
        "The columns are figure 10's.",
    )
