"""Every figure's entry as `make bench` calls it (cli's table -> run_figure -> its section), from a
small made-up result per figure: nothing is measured and no plot is drawn. Then the pieces the
command and the document are made of."""

from __future__ import annotations

import types

import pytest

from entrypoint import loglines
from tfmw.bench import (
    cli,
    cluster_kit,
    fig_checkpoint,
    fig_cluster,
    fig_control,
    fig_goodput,
    fig_kueue,
    fig_launcher,
    fig_peers,
    fig_pipeline,
    fig_recovery,
    fig_release_scale,
    fig_restart,
    fig_scale,
    fig_threads,
    report,
    session,
)
from tfmw.bench.figure import BenchRun
from tfmw.bench.machine import Machine
from tfmw.bench.procs import BenchError
from tfmw.chart import helmkit
from tfmw.faults import analysis as fault_analysis
from tfmw.faults.elastic import ElasticRun
from tfmw.k8s.api import ApiError
from tfmw.peers import run as peers_run

NAN = float("nan")
MACHINE = Machine(2, "Fake CPU", 8.0, "3.12.0", "2.19.0", "2.19.0", "v3.17.0", "6.1")


def _fault(scenario: str, seconds: float, at: int = 50, resume_step: int = 40) -> fault_analysis.FaultResult:
    result = fault_analysis.FaultResult(
        scenario, True, "", 120, 20, step_at_fault=at, resume_step=resume_step, seconds_to_resume=seconds
    )
    result.seconds_cold_start = 4.2
    result.parts = {"detection": 0.1, "restart": 0.1, "process start": 0.2, "group re-form": 2.0, "first step": 1.0}
    return result


def _peer_run(system: str, fault: str, resumed: float) -> peers_run.PeerRun:
    result = fault_analysis.FaultResult(fault, True, "status phase Succeeded", 120, 20)
    result.seconds_to_resume, result.seconds_to_first_step = resumed, 6.0
    result.step_at_fault, result.resume_step, result.digests = 55, 40, {"d1"}
    return peers_run.PeerRun(system, fault, result, "Succeeded")


def _overhead(cases, workers, rounds, gpus=0, log=print, quick=False):
    return {
        c.id: {
            "t1": [0.01 * (i + 1)] * rounds,
            "tn": [0.015 * (i + 1)] * rounds,
            "c1": [0.01] * rounds,
            "cn": [0.012] * rounds,
            "floor": [0.002] * rounds,
            "params": 1000 * (i + 1),
            "exchanged_bytes": 4000 * (i + 1),
        }
        for i, c in enumerate(cases)
    }


def _launcher(repeats, log=print):
    T = fig_launcher.Timing
    return {
        "by hand": [T(3.0, 4.0), T(3.0, 5.0)],
        "launcher": [T(3.1, 4.2), T(3.1, 5.0)],
        "import tensorflow": [3.0, 3.2],
        "launcher tf-config": [0.1, 0.3],
    }


def _helm(helm, sizes, repeats, log=print):
    return [
        {
            "n": n,
            "seconds": 0.05 + n * 1e-4,
            "bytes": 9000 + 80 * n,
            "manifest": "",
            "by_source": {"statefulset.yaml": 5000, "tests/test-peers.yaml": 4000 + 80 * n},
        }
        for n in sizes
    ]


def _peer_wait(counts, delays, late, log=print):
    rows = [{"n": n, "delay_ms": d * 1e3, "ready_after_s": 0.0, "seconds": 0.01} for n in counts for d in delays]
    return rows + [{"n": counts[-1], "delay_ms": 0.0, "ready_after_s": late, "seconds": late + 0.2}]


def _cluster(quick, log=print):
    pair = fig_cluster.fault_pair(_fault("delete-worker", 30.0), _fault("kill-worker", 12.0))
    return fig_cluster.summarize(
        [cluster_kit.Up(14.0, 14.4, "cached")], 3.0, [fig_cluster.ClusterRound(0.5, 1.2, 24.0, 12.0)], [pair]
    )


def _scale(quick, log=print):
    P = fig_scale.Point
    points = [P("now", 16, 58, 58, 0.66, 4.1, 2.2, 1.2), P("base", 16, 256, 256, 3.2, 8.9, 2.2, 2.2)]
    return fig_scale.Result(points, 30.0, 40.0, "2f32168")


def _threads(quick, log=print):
    sized, default = fig_threads.SIZED, fig_threads.DEFAULT
    envs = {sized: fig_threads.variant_env(sized, 1.0, 2), default: {}}
    samples = [fig_threads.Sample(sized, 0.040, 100, 20), fig_threads.Sample(default, 0.050, 100, 90)]
    return fig_threads.Result(1.0, 2, envs, samples)


def _peers(quick, log=print):
    runs = tuple(_peer_run(s, f, 5.0) for f in peers_run.FAULTS for s in peers_run.SYSTEMS)
    return fig_peers.Summary(runs, 1, ("tfjob", "jobset"))


def _node_peers(quick, log=print):
    runs = tuple(_peer_run(s, peers_run.NODE_LOSS, 60.0) for s in peers_run.SYSTEMS)
    return fig_peers.Summary(runs, 1, ("x",), (peers_run.NODE_LOSS,))


def _restart(late: float) -> dict:
    """Figure 12's result: two rounds; the trainer's input at the last step `late` x step 0."""
    seconds = {}
    for source in ("synthetic (in memory)", "tfrecord files"):
        for variant, growth in (("after", late), ("before", 500.0)):
            seconds[f"{source}|{variant}|0"] = [0.1, 0.2]
            seconds[f"{source}|{variant}|10000"] = [0.1, 0.2]
            seconds[f"{source}|{variant}|100000"] = [0.1 * growth, 0.2 * growth * 1.1]
    return {
        "batch": 8,
        "examples": 4096,
        "shape": [8, 8, 1],
        "steps": [0, 10000, 100000],
        "rounds": 2,
        "repeats": 5,
        "seconds": seconds,
    }


def test_the_restart_figure_judges_its_target_from_the_rounds():
    met = fig_restart.section(_restart(1.02), fig_restart.table_rows(_restart(1.02)), fig_restart.HEADERS, "0 0 0")
    assert "**Target met:** a restart at step 100,000 takes 1.07x of step 0 on synthetic (in memory)" in met
    assert "where the old pipeline took 525x on synthetic (in memory), 525x on tfrecord files." in met
    assert "Single rounds of the trainer's input past step 0 range from 1.00x to 1.12x of step 0" in met
    assert "At step 0 the trainer's input is the slower one to start: 0.150 s against 0.150 s on synthetic" in met
    missed = fig_restart.section(_restart(1.5), [], fig_restart.HEADERS, "0 0 0")
    assert "**Target missed:** a restart at step 100,000 takes 1.58x of step 0 on synthetic" in missed
    rows = fig_restart.table_rows(_restart(1.02))
    assert rows[2][:3] == ["synthetic (in memory)", fig_restart.VARIANTS["after"], "100,000"]
    assert rows[2][4] == pytest.approx((1.02 + 1.122) / 2) and rows[2][5] == "1.02-1.12"
    line = fig_restart.result_line(_restart(1.0))
    assert fig_restart.parse("noise\n" + line + "\n") == _restart(1.0)
    with pytest.raises(BenchError, match="figure 12: the restart worker printed no result line"):
        fig_restart.parse("tfmw bench case={}\n")


def _source(pipeline, fed_step, ratio, low, high) -> dict:
    return {"pipeline": pipeline, "fed_step": fed_step, "fed_ratio": ratio, "fed_ratio_min": low, "fed_ratio_max": high}


def _pipeline(tfrecord_ratio: float, tfrecord_pipeline: float = 20000.0) -> dict:
    return {
        "step_alone": 1000.0,
        "examples": 4096,
        "model": "cnn",
        "batch": 64,
        "rounds": 5,
        "sources": {
            "npz files": _source(150000.0, 1000.0, 1.0, 0.94, 1.03),
            "tfrecord files": _source(tfrecord_pipeline, 900.0, tfrecord_ratio, 0.85, 0.97),
        },
    }


def test_the_pipeline_figure_says_whether_the_input_keeps_up():
    result = _pipeline(0.96)
    rows = fig_pipeline.table_rows(result)
    assert len(rows[0]) == len(fig_pipeline.HEADERS)
    assert rows[1][5:] == [0.96, "0.85-0.97", "yes"]
    met = fig_pipeline.section(result, rows, fig_pipeline.HEADERS, "0 0 0")
    assert "**Target met:** the input keeps up with the training step on every source" in met
    assert "Median of 5 paired rounds (min-max): npz files 1.00 (0.94-1.03), tfrecord files 0.96 (0.85-0.97)." in met
    assert "Single rounds of npz files, tfrecord files fell below 0.95" in met
    missed = fig_pipeline.section(_pipeline(0.90), [], fig_pipeline.HEADERS, "0 0 0")
    assert "**Target missed** (fed / alone >= 0.95 on every source) on tfrecord files; met on npz files." in missed
    assert "tfrecord files alone delivers 20x what the step consumes, so it is not too slow" in missed
    slow = fig_pipeline.section(_pipeline(0.5, 1500.0), [], fig_pipeline.HEADERS, "0 0 0")
    assert "tfrecord files alone delivers 1.5x what the step consumes: too slow to feed it." in slow
    assert fig_pipeline.table_rows(_pipeline(0.90))[1][7] == "NO"


# Each figure's measuring, faked: (the module of cli's table, {name: stand-in}).
FAKES = {
    1: {"measure": _overhead},
    2: {"measure": _launcher},
    3: {
        "run": lambda config, log=print: fig_recovery.Run(config, [_fault(s, 4.0) for s in config.scenarios or ("x",)]),
        "checkpoint_saves": lambda log=print: [["cnn", 12.9, 0.082, 0.001, 0.084, "82x"]],
    },
    4: {"measure_helm": _helm, "measure_peer_wait": _peer_wait},
    5: {
        "measure": lambda quick, log=print: {
            "step_alone": 2000.0,
            "examples": 4096,
            "model": "cnn",
            "batch": 32,
            "sources": {"npz shards": _source(90000.0, 1900.0, 0.95, 0.93, 0.99)},
        }
    },
    6: {"measure": _cluster},
    7: {
        "measure": lambda quick, log=print: fig_kueue.Summary(
            (fig_kueue.QueuedRound(20.0, 3.0, 22.0),), fig_kueue.Preemption(5.0, 25.0, 2.0, 18.0, 150, 150), "v0.13"
        )
    },
    8: {"measure": _scale},
    9: {"measure": _threads},
    10: {"measure": _peers},
    11: {"measure": _node_peers},
    12: {"measure": lambda quick, log=print: _restart(1.02)},
    13: {"measure": lambda quick, log=print: _checkpoint_cost()},
    14: {"measure": lambda quick, log=print: _elastic_runs()},
    15: {"measure": lambda quick, log=print: _release_scale()},
}


def _release_scale() -> fig_release_scale.Result:
    points = []
    for n, p99 in ((16, 0.05), (1024, 0.4)):
        point = fig_release_scale.Point(n, 0.8, 3.0 + n / 100, {("POST", "pods"): 3.0 * n}, {"mutating": p99})
        point.list_bytes, point.list_seconds, point.cached_list_seconds = 6000 * n, n / 5000, n / 20000
        point.status_seconds, point.status_lines, point.upgrade_seconds = 1.0, 4, 0.9
        points.append(point)
    return fig_release_scale.Result(points, 128, "v0.8.0")


def _elastic_runs() -> list[ElasticRun]:
    off = ElasticRun(False, ok=True, idle_worker_seconds=107.0, final_loss=0.0002, outage_seconds=30.0)
    on = ElasticRun(True, ok=True, idle_worker_seconds=96.0, final_loss=0.0002, outage_seconds=30.0)
    off.shrink_seconds, off.grow_seconds, on.shrink_seconds, on.grow_seconds = 36.3, 5.7, 20.9, 16.0
    on.step_at_hold, on.step_at_release = 30, 340
    return [off, on]


def _checkpoint_cost() -> dict:
    runs = [
        fig_checkpoint.RunResult(label, 1, goodput=g, wall=120.0, faults=3, checkpoints=30, badput={"lostWork": 4.0})
        for label, g in (("fixed-50", 0.70), ("auto", 0.72))
    ]
    return {"stall": fig_checkpoint.Stall(340.6, [1.2, 1.1], [0.004, 0.005], [0.3, 0.25]), "runs": runs}


@pytest.fixture
def faked(monkeypatch):
    """Every figure's measuring and plotting replaced; the plots each figure asked for."""
    # a figure left out would measure for real inside the fast tests (figure 14's runs took 21 min)
    assert sorted(FAKES) == sorted(cli.FIGURE_MODULES), "a figure's measuring is not faked in FAKES"
    drawn = []
    for number, stand_ins in FAKES.items():
        module = cli.FIGURE_MODULES[number]
        for name, fake in stand_ins.items():
            monkeypatch.setattr(module, name, fake)
        monkeypatch.setattr(module, "plot", lambda *a, number=number, **k: drawn.append((number, a[-2].name)))
    monkeypatch.setattr(fig_recovery, "plot", lambda *a: drawn.append((3, a[-2].name)) or True)
    monkeypatch.setattr(fig_goodput, "measure", lambda quick, runs_dir, log=print: [_goodput()])
    monkeypatch.setattr(fig_goodput, "plot", lambda *a: drawn.append((3, a[-2].name)))
    monkeypatch.setattr(fig_control, "pod_env", lambda manifest: ENV)
    monkeypatch.setattr(fig_control.helmkit, "find_helm", lambda helm=None: "helm")
    return drawn


def _goodput() -> fig_goodput.GoodputRun:
    return fig_goodput.GoodputRun("with faults", 3520, 3, True, "", 0.915, 660.0, {"restart": 20.1}, end_seconds=0.7)


ENV = {
    "TFMW_STATEFULSET": "tf-multiworker",
    "TFMW_SERVICE": "tf-multiworker",
    "TFMW_PORT": "2222",
    "TFMW_CLUSTER_DOMAIN": "cluster.local",
}


@pytest.mark.parametrize("quick", [True, False])
@pytest.mark.parametrize("number", sorted(cli.FIGURE_MODULES))
def test_every_figure_measures_shows_plots_and_writes_its_own_section(faked, tmp_path, number, quick):
    args = cli.parse_args(["--only", str(number), "--workers", "2"] + (["--quick"] if quick else []))
    lines = []
    module = cli.FIGURE_MODULES[number]
    text = module.run_figure(BenchRun(args, "machine", tmp_path, log=lines.append))
    assert text.startswith(f"## Figure {number}:") and text.endswith("\n")
    assert module.TITLE.startswith(f"Figure {number}: ")
    assert any(line.startswith(f"\nFigure {number}") for line in lines)  # its table, shown as measured
    png = {name for n, name in faked if n == number}
    assert png and all(name.startswith(f"fig{number}") and name.endswith(".png") for name in png)
    assert all(f"(bench/{name})" in text for name in png)  # each plot drawn is the one the section shows


def test_the_command_writes_every_figure_and_says_which_failed(faked, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(session, "find_helm", lambda: "helm")
    monkeypatch.setattr(session, "probe", lambda helm: MACHINE)
    out = tmp_path / "docs" / "benchmarks.md"
    assert cli.main(["--peers", "--quick", "--out", str(out)]) == 0
    document = out.read_text()
    assert document.startswith("# Benchmarks") and "`make bench QUICK=1 PEERS=1`" in document
    figures = sorted(cli.FIGURE_MODULES)
    assert [n for n in figures if f"\n## Figure {n}:" in document] == figures == list(range(1, len(figures) + 1))
    assert document.count("*Measured in ") == len(figures) and document.endswith(report.footer(quick=True))

    def broken(quick, log=print):
        raise BenchError("figure 5: the pipeline worker printed no result line")

    monkeypatch.setattr(fig_pipeline, "measure", broken)
    monkeypatch.setattr(fig_threads, "measure", lambda quick, log=print: {}["a bug"])
    assert cli.main(["--only", "5,9", "--out", str(out)]) == 1
    merged = out.read_text()
    assert "## Figure 5: input pipeline\n\n**Not measured in this run:** figure 5: the pipeline worker" in merged
    assert "**Not measured in this run:** KeyError: 'a bug' (a bug in the bench; see its output)" in merged
    assert (
        "\n## Figure 6:" in merged
        and "**Later partial run:** figure(s) 5,9: `python -m tfmw.bench --only 5,9" in merged
    )
    assert "2 figure(s) failed" in capsys.readouterr().out


def test_without_helm_the_bench_says_so_in_one_line(monkeypatch, tmp_path, capsys):
    def missing():
        raise helmkit.ToolError("helm not found", exit_code=127)

    monkeypatch.setattr(session, "find_helm", missing)
    assert cli.main(["--only", "2", "--out", str(tmp_path / "b.md")]) == 127
    assert capsys.readouterr().err == "bench: helm not found\n" and not (tmp_path / "b.md").exists()


# ---------------------------------------------------------------- the command and the document


def test_the_document_names_the_command_of_a_full_or_a_partial_run():
    assert cli.invocation([], cli.parse_args([])) == ("make bench", False)
    assert cli.invocation(["--quick", "--peers"], cli.parse_args(["--quick", "--peers"])) == (
        "make bench QUICK=1 PEERS=1",
        False,
    )
    assert cli.invocation(["--only", "2,4"], cli.parse_args(["--only", "2,4"])) == (
        "python -m tfmw.bench --only 2,4",
        True,
    )
    assert cli.invocation(["--only", "10"], cli.parse_args(["--only", "10"]))[1]
    assert sorted(cli.FIGURE_MODULES) == sorted(cli.FIGURES + cli.OPT_IN) == sorted(FAKES)


def test_the_machine_line_and_a_partial_runs_note():
    assert (
        session.machine_line(MACHINE, "T", quick=True) == "2 CPUs Fake CPU, 8 GiB; TF 2.19.0, Python 3.12.0; T (quick)"
    )
    note = report.partial_note("`x`", "T", 90.0, True, MACHINE)
    assert note.startswith("``x``, started T, took 1.5 min (quick mode), on 2 CPUs (Fake CPU)")
    assert note.endswith("; the other figures are from the run above.")


def test_a_whole_document_is_its_header_its_sections_in_order_and_its_footer():
    text = report.whole(MACHINE, "make bench", "T", 60.0, False, {2: "## Figure 2: b\n", 1: "## Figure 1: a\n"})
    assert text.startswith(report.header(MACHINE, "make bench", "T", 60.0, False))
    assert text.index("## Figure 1: a") < text.index("## Figure 2: b") < text.index("## How to reproduce")
    assert report.split_document(text)[1] == {1: "## Figure 1: a\n", 2: "## Figure 2: b\n"}


def test_a_section_is_its_blocks_each_followed_by_a_blank_line():
    assert report.paragraphs("## Figure 1: x", "a\nb", "c") == "## Figure 1: x\n\na\nb\n\nc\n"
    assert report.parts_cell([("detection", 40.2), ("eviction", 9.6)]) == "detection 40 s, eviction 10 s"
    assert report.judged(1.1, 1.3, 1.2).startswith("slower in every round")
    assert report.judged(0.9, 1.2, 1.0).startswith("the rounds disagree")


def test_the_checkpoint_saves_line_is_one_tfmw_bench_line():
    result = {"model": "cnn", "bytes": 12, "sync_s": 0.08, "async_return_s": 0.001, "async_written_s": 0.084}
    line = fig_recovery.checkpoint_line(result)
    assert line.startswith("tfmw bench checkpoint={") and "\n" not in line
    assert loglines.payloads(["noise", line], loglines.BENCH, fig_recovery.CHECKPOINT_RESULT) == [result]


# ---------------------------------------------------------------- a figure's own cluster


class _Api:
    """The calls a fresh namespace makes, answered from memory."""

    def __init__(self, refuse: bool = False):
        self.refuse, self.calls = refuse, []

    def create(self, path, obj):
        if self.refuse:
            raise ApiError(409, "already exists")
        self.calls.append(("create", obj["metadata"]["name"]))

    def get_or_none(self, path):
        return {"metadata": {"name": "default"}}

    def delete(self, path, body=None):
        self.calls.append(("delete", path))

    def items(self, path):
        return []


def test_a_measurements_namespace_is_ready_with_its_service_account_and_always_deleted(monkeypatch):
    api = _Api()
    state = types.SimpleNamespace(api=lambda user: api)
    with cluster_kit.fresh_namespace(state, "bench-0", figure="figure 7") as given:
        assert given is api and api.calls == [("create", "bench-0")]
    assert api.calls[-1] == ("delete", "/api/v1/namespaces/bench-0")
    with pytest.raises(BenchError, match=r"^figure 7: namespace bench-0 cannot be made: HTTP 409"):
        with cluster_kit.fresh_namespace(
            types.SimpleNamespace(api=lambda user: _Api(refuse=True)), "bench-0", figure="figure 7"
        ):
            pass
    monkeypatch.setattr(cluster_kit.namespaces, "SERVICE_ACCOUNT_SECONDS", 0.0)
    late = _Api()
    monkeypatch.setattr(cluster_kit.namespaces, "wait_service_account", lambda api, name, timeout=0: False)
    with pytest.raises(BenchError, match="figure 6: the default ServiceAccount of namespace x not within 0s"):
        with cluster_kit.fresh_namespace(types.SimpleNamespace(api=lambda user: late), "x"):
            pass
    assert late.calls[-1] == ("delete", "/api/v1/namespaces/x")


def test_helm_against_a_figures_cluster_fails_in_one_line_naming_the_figure(monkeypatch):
    def failed(kubeconfig, *args, timeout):
        raise helmkit.HelmFailed(args, 1, "cannot re-use a name that is still in use")

    monkeypatch.setattr(cluster_kit.helmkit, "run_helm", failed)
    state = types.SimpleNamespace(kubeconfig="/k")
    with pytest.raises(BenchError) as err:
        cluster_kit.helm_run(state, "install", "bench", figure="figure 7")
    assert str(err.value) == "figure 7: helm install exited 1: cannot re-use a name that is still in use"
