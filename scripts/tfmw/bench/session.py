"""One `make bench`: the asked figures measured one after another, each into its section of
docs/benchmarks.md (a figure that fails into a "not measured" section, the others still
measured), then the document and its plots written: whole, or, for a partial run, merged into
the existing document."""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from tfmw.chart.helmkit import ToolError, find_helm

from . import report
from .figure import BenchRun, log
from .machine import Machine, probe
from .procs import BenchError


def machine_line(machine: Machine, started_wall: str, quick: bool) -> str:
    """The line every plot carries (pure)."""
    return (
        f"{machine.nproc} CPUs {machine.cpu_model}, {machine.memory_gib:.0f} GiB; "
        f"TF {machine.tensorflow}, Python {machine.python}; {started_wall}" + (" (quick)" if quick else "")
    )


def measure(figures: dict, bench: BenchRun) -> tuple[dict[int, str], int]:
    """({figure number: its section}, how many failed) of `figures` ({number: its module}), in order."""
    sections, failures = {}, 0
    for number, figure in figures.items():
        title = figure.TITLE
        bench.log(f"bench: {title}")
        figure_started = time.monotonic()
        try:
            sections[number] = (
                figure.run_figure(bench) + f"\n*Measured in {(time.monotonic() - figure_started) / 60:.1f} min.*\n"
            )
            bench.log(f"bench: {title} took {(time.monotonic() - figure_started) / 60:.1f} min")
        except BenchError as err:
            failures += 1
            bench.log(f"bench: {title} failed: {err}")
            sections[number] = report.failed(title, str(err))
        except Exception as err:  # a bug in one figure's code must not lose the others' results
            failures += 1
            traceback.print_exc()
            bench.log(f"bench: {title} failed: {type(err).__name__}: {err}")
            sections[number] = report.failed(title, f"{type(err).__name__}: {err} (a bug in the bench; see its output)")
    return sections, failures


def run(args, figures: dict, command: str, partial: bool) -> int:
    """Measure `figures` ({number: its module}) with the command's `args` into `args.out`; the
    exit code: 1 when a figure failed. `command` is what the document says made it; a `partial`
    run keeps an existing document's other figures."""
    try:
        helm = find_helm()
    except ToolError as err:
        print(f"bench: {err}", file=sys.stderr)
        return err.exit_code
    started_wall = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    started = time.monotonic()
    machine = probe(helm)
    log(f"bench: {machine.describe()}")
    out = Path(args.out)
    plots = out.parent / "bench"
    plots.mkdir(parents=True, exist_ok=True)
    sections, failures = measure(figures, BenchRun(args, machine_line(machine, started_wall, args.quick), plots))
    seconds = time.monotonic() - started
    if partial and out.is_file() and "## Figure " in out.read_text():
        note = report.partial_note(command, started_wall, seconds, args.quick, machine)
        document = report.merge(out.read_text(), sections, note, args.quick)
    else:
        document = report.whole(machine, command, started_wall, seconds, args.quick, sections)
    out.write_text(document)
    log(
        f"bench: wrote {out} and {plots}/*.png in {seconds / 60:.1f} min"
        + (f"; {failures} figure(s) failed" if failures else "")
    )
    return 1 if failures else 0
