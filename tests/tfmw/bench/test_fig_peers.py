"""Figures 10 and 11 (the chart beside its peers): the table, the ratios and figure 11's
cluster layout, from made-up runs (pure; nothing here measures)."""

from __future__ import annotations

import math

from tfmw.bench import fig_node_peers, fig_peers
from tfmw.faults.analysis import FaultResult
from tfmw.peers import install, run

NAN = float("nan")


def _run(system, fault, resumed, phase, digest="d1", first=6.0, step_at_fault=55, resume_step=40, reason=""):
    result = FaultResult(fault, phase == "Succeeded", reason or phase, 120, 20)
    result.seconds_to_resume, result.seconds_to_first_step = resumed, first
    result.step_at_fault, result.resume_step = (step_at_fault, resume_step) if not math.isnan(resumed) else (-1, -1)
    result.digests = {digest} if phase == "Succeeded" else set()
    return run.PeerRun(system, fault, result, phase)


def test_figure_11s_table_has_its_one_fault_with_the_ratio_to_the_charts_time():
    runs = (
        _run("chart", "node-loss", 60.0, "Succeeded"),
        _run("jobset", "node-loss", 390.0, "Succeeded"),
        _run("tfjob-onfailure", "node-loss", NAN, ""),
        _run("tfjob-exitcode", "node-loss", NAN, "Failed"),
    )
    summary = fig_peers.Summary(runs, 1, ("a", "b"), (run.NODE_LOSS,))
    rows = fig_node_peers.table_rows(summary)
    assert [r[:2] for r in rows] == [["node-loss", s] for s in run.SYSTEMS]
    by_system = {r[1]: r for r in rows}
    assert by_system["chart"][3] == "60.0" and by_system["chart"][4] == ""
    assert by_system["jobset"][4] == "6.50x" and by_system["jobset"][6] == "1 of 1"
    assert by_system["tfjob-onfailure"][4] == "never resumed" and by_system["tfjob-onfailure"][6] == "0 of 1"
    assert by_system["jobset"][7] == "1 of 1" and by_system["tfjob-exitcode"][7] == "0 of 1"
    assert by_system["jobset"][5] == "15"  # steps trained twice: 55 reached, resumed from 40


def test_figure_10s_table_keeps_its_three_faults():
    runs = tuple(_run(s, f, 5.0, "Succeeded") for f in run.FAULTS for s in run.SYSTEMS)
    rows = fig_peers.table_rows(fig_peers.Summary(runs, 1, ()))
    assert [r[0] for r in rows] == [f for f in run.FAULTS for _ in run.SYSTEMS]


def test_figure_11s_section_says_how_each_run_ended_and_where_the_charts_time_went():
    chart = _run("chart", "node-loss", 58.0, "Succeeded", reason="status phase Succeeded")
    chart.result.node_parts = {"detection": 36.0, "eviction": 10.0}
    stranded = _run("jobset", "node-loss", NAN, "", reason="jobset neither; pods: w-1 Terminating")
    failed = _run("tfjob-onfailure", "node-loss", NAN, "Failed", reason="tfjob-onfailure Failed")
    failed.seconds_to_end = 351.2
    summary = fig_peers.Summary((chart, stranded, failed), 1, ("x",), (run.NODE_LOSS,))
    text = fig_node_peers.section(summary, fig_node_peers.table_rows(summary), fig_node_peers.HEADERS, "0.5")
    assert text.startswith("## Figure 11: a node lost")
    assert "- `chart`: status phase Succeeded; fault -> resumed in parts: detection 36 s, eviction 10 s" in text
    assert "- `jobset`: jobset neither; pods: w-1 Terminating" in text
    assert "- `tfjob-onfailure` (351 s after the fault): tfjob-onfailure Failed" in text
    assert f"{fig_node_peers.NODE_LOSS_TIMEOUT:.0f} s after the fault" in text


def test_each_system_gets_its_own_controller_and_the_workers_avoid_its_node():
    assert fig_node_peers.peer_of("chart") is None
    assert fig_node_peers.peer_of("jobset") is install.JOBSET
    assert fig_node_peers.peer_of("tfjob-exitcode") is fig_node_peers.peer_of("tfjob-onfailure") is install.TFJOB
    pods = [{"spec": {"nodeName": "node-2"}}, {"spec": {"nodeName": "node-2"}}, {"spec": {}}]
    assert fig_node_peers.controller_nodes(pods) == ("node-2",)
    assert sorted(fig_node_peers.ORDER) == sorted(run.SYSTEMS) and fig_node_peers.ORDER[0] == "chart"


def test_a_node_loss_run_that_cannot_start_is_reported_and_its_cluster_still_goes(monkeypatch):
    from types import SimpleNamespace

    from tfmw.faults.kube import FaultError

    downs, lines = [], []
    monkeypatch.setattr(fig_node_peers, "cluster_up", lambda *a, **k: (SimpleNamespace(kubeconfig="/x"), None))
    monkeypatch.setattr(fig_node_peers, "cluster_down", lambda *a, **k: downs.append(a[1]))

    def refused(kubeconfig):
        raise FaultError("the cluster of /x does not answer")

    monkeypatch.setattr(fig_node_peers, "Kube", refused)
    parts = fig_peers.Parts({}, None, "img", {}, {})
    done = fig_node_peers.one(parts, "jobset", 0, lines.append)
    assert (done.system, done.fault, done.phase) == ("jobset", run.NODE_LOSS, "")
    assert done.result.reason == "the cluster of /x does not answer" and not done.result.completed
    assert len(downs) == 1
    assert any("node-loss under jobset: first step nan s" in line and "not ended" in line for line in lines)


def test_each_system_goes_first_in_turn_over_the_rounds():
    order = ("chart", "jobset", "tfjob")
    assert [fig_peers.rotated(order, i)[0] for i in range(4)] == ["chart", "jobset", "tfjob", "chart"]
    assert sorted(fig_peers.rotated(order, 2)) == sorted(order)  # every system, each once
