"""`make lint`: every static check of the chart, the overlays and the image, one line each.

    python -m tfmw.lint [--root DIR] [--skip CHECK ...] [--only CHECK ...]

Only the command line: the checks, and what each one runs, are tfmw.lint.pipeline's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tfmw.chart.helmkit import ToolError
from tfmw.lint import pipeline


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tfmw.lint", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=pipeline.REPO_ROOT,
        help="repository root holding charts/, values/, Dockerfile (default: this repository)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="where rendered manifests are written (default: <root>/build/lint)"
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=pipeline.CHECKS,
        metavar="CHECK",
        help=f"leave a check out (repeatable): {', '.join(pipeline.CHECKS)}",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        choices=pipeline.CHECKS,
        metavar="CHECK",
        help="run only these checks (repeatable)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    selected = set(args.only or pipeline.CHECKS) - set(args.skip)
    try:
        layout = pipeline.make_layout(args.root, args.out)
        results = pipeline.run_checks(layout, selected, pipeline.print_result)
    except (pipeline.UsageError, ToolError) as error:
        print(f"lint: {error}", file=sys.stderr)
        return 2
    print(pipeline.summary_line(results), flush=True)
    return 1 if any(r.status == "FAIL" for r in results) else 0
