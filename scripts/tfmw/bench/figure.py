"""What every figure's entry is handed, and the path most figures take through it.

Each figure module has `TITLE` (its name in the log and in a "not measured" section) and
`run_figure(bench: BenchRun) -> str`: it measures, shows its table on the console, draws its plot
into `bench.plots` and returns its section of docs/benchmarks.md, written from what it measured.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tfmw.table import console_table

from .machine import load_average


def log(line: str) -> None:
    print(line, flush=True)


def show(title: str, headers, rows, log=log) -> None:
    """A figure's table on the console, as it is measured."""
    log(f"\n{title}\n{console_table(headers, rows)}\n")


@dataclass(frozen=True)
class BenchRun:
    """One `make bench`, as each figure sees it: the command's options (`args`: quick, workers,
    gpus), the folder of the plots, the machine line every plot carries, and the log."""

    args: argparse.Namespace
    machine_line: str
    plots: Path
    log: Callable[[str], None] = log

    @property
    def quick(self) -> bool:
        return self.args.quick

    @property
    def workers(self) -> int:
        return self.args.workers

    @property
    def gpus(self) -> int:
        return self.args.gpus

    def show(self, title: str, headers, rows) -> None:
        show(title, headers, rows, self.log)


def one_measurement(module, title: str, png: str, write, args, machine_line: str, plots: Path, log=log) -> str:
    """A figure from one `module.measure(quick)`: its table shown, its plot drawn, its section
    written by `write(result, table_rows, headers, load)`."""
    load = load_average()
    result = module.measure(args.quick, log=log)
    table_rows = module.table_rows(result)
    show(title, module.HEADERS, table_rows, log)
    module.plot(result, plots / png, machine_line)
    return write(result, table_rows, module.HEADERS, load)


def measured(run: BenchRun, module, title: str, png: str, write) -> str:
    """`one_measurement` of `module` within `run`."""
    return one_measurement(module, title, png, write, run.args, run.machine_line, run.plots, run.log)
