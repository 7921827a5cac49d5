"""`make bench` — measure the performance figures into docs/benchmarks.md and docs/bench/*.png.

    python -m tfmw.bench [--quick] [--peers] [--only 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15] [--workers N] [--gpus G]
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

from . import (
    fig_checkpoint,
    fig_cluster_measure,
    fig_control,
    fig_elastic,
    fig_kueue,
    fig_launcher,
    fig_node_peers,
    fig_overhead,
    fig_peers,
    fig_pipeline,
    fig_recovery,
    fig_release_scale,
    fig_restart,
    fig_scale,
    fig_threads,
    session,
)
from .gpus import count as count_gpus
from .gpus import refusal as gpu_refusal
from .procs import REPO

# Each figure's module: its TITLE, and its run_figure that measures it and writes its section.
FIGURE_MODULES = {
    1: fig_overhead,
    2: fig_launcher,
    3: fig_recovery,
    4: fig_control,
    5: fig_pipeline,
    6: fig_cluster_measure,
    7: fig_kueue,
    8: fig_scale,
    9: fig_threads,
    10: fig_peers,
    11: fig_node_peers,
    12: fig_restart,
    13: fig_checkpoint,
    14: fig_elastic,
    15: fig_release_scale,
}
FIGURES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15)
# Opt-in: measured only when asked (--peers, or --only): it builds and runs other projects' controllers.
OPT_IN = (10, 11)


def parse_figures(text: str) -> list[int]:
    """ "1,4" -> [1, 4]; refuses anything but figure numbers (one-line message)."""
    figures = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) not in FIGURES + OPT_IN:
            raise ValueError(
                f"--only {text!r}: {part!r} is not a figure number; use numbers from 1 to {max(FIGURES + OPT_IN)}, "
                "e.g. --only 1,4"
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
    problem = gpu_refusal(args.gpus, args.workers, count_gpus()) if args.gpus else None
    if problem:
        parser.exit(2, f"bench: {problem}\n")
    return args


def invocation(words: list[str], args) -> tuple[str, bool]:
    """(the command the document names, whether the run is partial: not every default figure) (pure)."""
    partial = not set(FIGURES) <= set(args.figures)
    command = (
        ("python -m tfmw.bench " + " ".join(words))
        if partial
        else "make bench" + (" QUICK=1" if args.quick else "") + (" PEERS=1" if set(OPT_IN) & set(args.figures) else "")
    )
    return command, partial


def main(argv=None) -> int:
    words = sys.argv[1:] if argv is None else argv
    args = parse_args(words)
    command, partial = invocation(words, args)
    return session.run(args, {n: FIGURE_MODULES[n] for n in args.figures}, command, partial)
