"""`make bench` — measure the performance figures into docs/benchmarks.md and docs/bench/*.png.

    python -m tfmw.bench [--quick] [--peers] [--only 1,2,3,4,5,6,7,8,9,10,11] [--workers N] [--gpus G]
                            [--out docs/benchmarks.md]

Figures 10 and 11 (the chart beside Kubeflow's TFJob and a JobSet; 11: a node lost) are opt-in:
--peers, or --only 10,11.

Prints each figure's table as it is measured, then writes the document and the plots.
A figure that fails is reported in the document as not measured (with the reason) and
the exit code is 1; the other figures are still written. With --only, an existing document
keeps its other figures: only the measured figures' sections are replaced, and its header
says which run they came from.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from tfmw.chart.helmkit import ToolError, find_helm
from tfmw.table import console_table

from . import (
    fig_cluster,
    fig_control,
    fig_goodput,
    fig_kueue,
    fig_launcher,
    fig_node_peers,
    fig_overhead,
    fig_peers,
    fig_pipeline,
    fig_recovery,
    fig_scale,
    fig_threads,
    report,
)
from .machine import load_average, probe
from .procs import REPO, BenchError

FIGURES = (1, 2, 3, 4, 5, 6, 7, 8, 9)
# Opt-in: measured only when asked (--peers, or --only): it builds and runs other projects' controllers.
OPT_IN = (10, 11)


def parse_figures(text: str) -> list[int]:
    """ "1,4" -> [1, 4]; refuses anything but figure numbers (one-line message)."""
    figures = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) not in FIGURES + OPT_IN:
            raise ValueError(
                f"--only {text!r}: {part!r} is not a figure number; use numbers from 1 to {OPT_IN[-1]}, e.g. --only 1,4"
            )
        figures.append(int(part))
    return sorted(set(figures))


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m tfmw.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and cases (under 3 minutes)")
    parser.add_argument("--only", default=",".join(map(str, FIGURES)), help="figures to measure, e.g. 1,4")
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also figures 10 and 11: the chart beside a TFJob and a JobSet (opt-in)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=max(os.cpu_count() or 2, 2),
        help="N for figure 1 (default: the number of CPUs, at least 2)",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        default=0,
        help="figure 1 on GPUs: G GPUs per worker, NCCL, no thread limits (needs N*G GPUs)",
    )
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"), help="markdown file to write")
    args = parser.parse_args(argv)
    try:
        figures = parse_figures(args.only)
        args.figures = sorted(set(figures) | (set(OPT_IN) if args.peers else set()))
    except ValueError as err:
        parser.exit(2, f"bench: {err}\n")
    if args.workers < 2:
        parser.exit(2, f"bench: --workers {args.workers}: figure 1 compares N >= 2 workers with one; use 2 or more\n")
    if args.gpus < 0:
        parser.exit(2, f"bench: --gpus {args.gpus}: must be 0 (CPU) or more\n")
    return args


def log(line: str) -> None:
    print(line, flush=True)


def show(title: str, headers, rows) -> None:
    log(f"\n{title}\n{console_table(headers, rows)}\n")


def run_figure1(args, machine_line: str, plots: Path) -> str:
    cases = fig_overhead.plan(args.quick)
    rounds = 1 if args.quick else 3
    load = load_average()
    raw = fig_overhead.measure(cases, args.workers, rounds, gpus=args.gpus, log=log, quick=args.quick)
    rows = fig_overhead.summarize(cases, raw)
    table_rows = fig_overhead.table_rows(rows)
    show("Figure 1: distribution overhead", fig_overhead.HEADERS, table_rows)
    fig_overhead.plot(rows, args.workers, plots / "fig1_overhead.png", machine_line)
    return report.fig_overhead(
        rows, table_rows, fig_overhead.HEADERS, args.workers, rounds, load, fig_overhead.MAIN_MODEL, args.gpus
    )


def run_figure2(args, machine_line: str, plots: Path) -> str:
    load = load_average()
    results = fig_launcher.measure(2 if args.quick else 9, log=log)
    summary = fig_launcher.summarize(results)
    table_rows = fig_launcher.table_rows(summary)
    show("Figure 2: launcher overhead", fig_launcher.HEADERS, table_rows)
    fig_launcher.plot(results, summary, plots / "fig2_launcher.png", machine_line)
    return report.fig_launcher(summary, table_rows, fig_launcher.HEADERS, load)


def run_figure3(args, machine_line: str, plots: Path) -> str:
    runs = [fig_recovery.run(fig_recovery.defaults(args.quick), log=log)]
    repeats = []
    if not args.quick:
        repeats = [fig_recovery.run(fig_recovery.KILL_REPEAT, log=log) for _ in range(fig_recovery.KILL_ROUNDS - 1)]
        runs += [fig_recovery.run(config, log=log) for config in fig_recovery.VARIANTS]
    summary = fig_recovery.summary(runs)
    spread = fig_recovery.kill_worker_spread([runs[0], *repeats])
    plotted = fig_recovery.plot(*summary, plots / "fig3_recovery.png", machine_line)
    saves = fig_recovery.checkpoint_saves(log=log)
    show("Figure 3: checkpoint saves", fig_recovery.CHECKPOINT_HEADERS, saves)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tfmw-goodput-") as runs_dir:
        goodput = fig_goodput.measure(args.quick, Path(runs_dir), log=log)
    show("Figure 3b: goodput", fig_goodput.HEADERS, fig_goodput.rows(goodput))
    fig_goodput.plot(goodput, plots / "fig3b_goodput.png", machine_line)
    return report.fig_recovery(runs[0], plotted, runs[1:], summary, args.quick, saves, goodput, spread)


def run_figure4(args, machine_line: str, plots: Path) -> str:

    load = load_average()
    sizes = [1, 100, 1000] if args.quick else [1, 10, 100, 300, 1000]
    helm_rows = fig_control.measure_helm(find_helm(), sizes, 2 if args.quick else 5, log=log)
    peers = fig_control.measure_peer_wait(
        [10, 1000] if args.quick else [10, 100, 1000],
        [0.0, 0.001] if args.quick else [0.0, 0.001, 0.005],
        1.0 if args.quick else 2.0,
        log=log,
    )
    env = fig_control.pod_env(helm_rows[-1]["manifest"])
    tf_config = fig_control.measure_tf_config(env, [1, 10, 100, 300, 1000])
    result = fig_control.Result(helm_rows, peers, tf_config)
    growth = fig_control.growth(helm_rows)
    show("Figure 4: helm template", ["N", "ms", "bytes"], [[r["n"], r["seconds"] * 1e3, r["bytes"]] for r in helm_rows])
    show(
        "Figure 4: peer wait",
        ["names", "ms per lookup", "ready after s", "seconds"],
        [[p["n"], p["delay_ms"], p["ready_after_s"], p["seconds"]] for p in peers],
    )
    show(
        "Figure 4: TF_CONFIG bytes",
        ["workers", "default names", "longest names"],
        [[n, tf_config["default"][n], tf_config["longest"][n]] for n in sorted(tf_config["default"])],
    )
    fig_control.plot(result, plots / "fig4_control.png", machine_line)
    return report.fig_control(result, helm_rows, growth, load)


def one_measurement(module, title: str, png: str, write, args, machine_line: str, plots: Path) -> str:
    """A figure from one `module.measure(quick)`: its table shown, its plot drawn, its section
    written by `write(result, table_rows, headers, load)`."""
    load = load_average()
    result = module.measure(args.quick, log=log)
    table_rows = module.table_rows(result)
    show(title, module.HEADERS, table_rows)
    module.plot(result, plots / png, machine_line)
    return write(result, table_rows, module.HEADERS, load)


def run_figure5(args, machine_line: str, plots: Path) -> str:
    return one_measurement(
        fig_pipeline, "Figure 5: input pipeline", "fig5_pipeline.png", report.fig_pipeline, args, machine_line, plots
    )


def run_figure6(args, machine_line: str, plots: Path) -> str:
    return one_measurement(
        fig_cluster, "Figure 6: the local cluster", "fig6_cluster.png", report.fig_cluster, args, machine_line, plots
    )


def run_figure7(args, machine_line: str, plots: Path) -> str:
    return one_measurement(
        fig_kueue, "Figure 7: under Kueue", "fig7_kueue.png", report.fig_kueue, args, machine_line, plots
    )


def run_figure8(args, machine_line: str, plots: Path) -> str:
    return one_measurement(
        fig_scale, "Figure 8: the control path at scale", "fig8_scale.png", report.fig_scale, args, machine_line, plots
    )


def run_figure9(args, machine_line: str, plots: Path) -> str:
    return one_measurement(
        fig_threads,
        "Figure 9: threads under a CPU limit",
        "fig9_threads.png",
        report.fig_threads,
        args,
        machine_line,
        plots,
    )


def run_figure10(args, machine_line: str, plots: Path) -> str:
    return one_measurement(
        fig_peers,
        "Figure 10: the chart, a TFJob and a JobSet",
        "fig10_peers.png",
        report.fig_peers,
        args,
        machine_line,
        plots,
    )


def run_figure11(args, machine_line: str, plots: Path) -> str:
    return one_measurement(
        fig_node_peers,
        "Figure 11: a node lost under the chart, a TFJob and a JobSet",
        "fig11_node_peers.png",
        report.fig_node_peers,
        args,
        machine_line,
        plots,
    )


RUNNERS = {
    1: ("Figure 1: distribution overhead", run_figure1),
    2: ("Figure 2: launcher overhead", run_figure2),
    3: ("Figure 3: recovery after a fault", run_figure3),
    4: ("Figure 4: scale of the control path", run_figure4),
    5: ("Figure 5: input pipeline", run_figure5),
    6: ("Figure 6: the local Kubernetes cluster", run_figure6),
    7: ("Figure 7: the chart under a real Kueue", run_figure7),
    8: ("Figure 8: the control path at 16 to 1,024 workers", run_figure8),
    9: ("Figure 9: TensorFlow's threads under a CPU limit", run_figure9),
    10: ("Figure 10: the same run under the chart, a TFJob and a JobSet", run_figure10),
    11: ("Figure 11: a node lost under the chart, a TFJob and a JobSet", run_figure11),
}


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    try:
        helm = find_helm()
    except ToolError as err:
        print(f"bench: {err}", file=sys.stderr)
        return err.exit_code
    started_wall = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    started = time.monotonic()
    machine = probe(helm)
    machine_line = (
        f"{machine.nproc} CPUs {machine.cpu_model}, {machine.memory_gib:.0f} GiB; "
        f"TF {machine.tensorflow}, Python {machine.python}; {started_wall}" + (" (quick)" if args.quick else "")
    )
    log(f"bench: {machine.describe()}")
    out = Path(args.out)
    plots = out.parent / "bench"
    plots.mkdir(parents=True, exist_ok=True)
    sections, failures = {}, 0
    for number in args.figures:
        title, runner = RUNNERS[number]
        log(f"bench: {title}")
        figure_started = time.monotonic()
        try:
            sections[number] = (
                runner(args, machine_line, plots)
                + f"\n*Measured in {(time.monotonic() - figure_started) / 60:.1f} min.*\n"
            )
            log(f"bench: {title} took {(time.monotonic() - figure_started) / 60:.1f} min")
        except BenchError as err:
            failures += 1
            log(f"bench: {title} failed: {err}")
            sections[number] = report.failed(title, str(err))
        except Exception as err:  # a bug in one figure's code must not lose the others' results
            failures += 1
            traceback.print_exc()
            log(f"bench: {title} failed: {type(err).__name__}: {err}")
            sections[number] = report.failed(title, f"{type(err).__name__}: {err} (a bug in the bench; see its output)")
    seconds = time.monotonic() - started
    partial = not set(FIGURES) <= set(args.figures)
    command = (
        ("python -m tfmw.bench " + " ".join(sys.argv[1:] if argv is None else argv))
        if partial
        else "make bench" + (" QUICK=1" if args.quick else "") + (" PEERS=1" if set(OPT_IN) & set(args.figures) else "")
    )
    if partial and out.is_file() and "## Figure " in out.read_text():
        note = (
            f"`{command}`, started {started_wall}, took {seconds / 60:.1f} min"
            + (" (quick mode)" if args.quick else "")
            + f", on {machine.describe()}; "
            "the other figures are from the run above."
        )
        document = report.merge(out.read_text(), sections, note, args.quick)
    else:
        document = (
            report.header(machine, command, started_wall, seconds, args.quick)
            + "\n"
            + "\n".join(sections[n] for n in sorted(sections))
            + "\n"
            + report.footer(args.quick)
        )
    out.write_text(document)
    log(
        f"bench: wrote {out} and {plots}/*.png in {seconds / 60:.1f} min"
        + (f"; {failures} figure(s) failed" if failures else "")
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
