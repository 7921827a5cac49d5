"""`tfmw import tfjob FILE [-o OUT] [--command CMD]`: the workflow around tfjob.convert.

Reads the file, converts it, lists every field it could not map on stderr (one line each), writes
the overlay (stdout or OUT), then renders the chart with it offline and runs the checks `make
template` runs (values schema, strict manifests, Pod Security), so an overlay that exits 0 renders.
Exit 0: written (fields may be unmapped: read the list); 2: refused (nothing written) or the chart
refuses the written overlay (its reason said: edit the overlay).
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path

from tfmw.chart import render
from tfmw.chart.helmkit import ToolError
from tfmw.imports import tfjob

PREFIX = "tfmw import tfjob"


def import_tfjob(
    file: str,
    output: str | None = None,
    command: str | None = None,
    check: bool = True,
    helm: str | None = None,
) -> int:
    source = Path(file)
    try:
        text = source.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ToolError(f"{file}: cannot be read ({getattr(err, 'strerror', None) or err})") from None
    words = shlex.split(command) if command else None
    if command is not None and not words:
        raise ToolError("--command is empty: give what the image runs, e.g. --command 'python /app/train.py'")
    conversion = tfjob.convert_text(text, words)
    if conversion.refusal:
        raise ToolError(f"{file}: {conversion.refusal}")
    for line in conversion.unmapped:
        print(f"{PREFIX}: not mapped: {line}", file=sys.stderr)
    overlay = tfjob.overlay_yaml(conversion, source.name)
    if output:
        Path(output).write_text(overlay)
    else:
        sys.stdout.write(overlay)
        sys.stdout.flush()
    if check:
        for warning in check_overlay(overlay, helm).warnings:
            print(f"{PREFIX}: {warning}", file=sys.stderr)
    return 0


def check_overlay(overlay: str, helm: str | None = None) -> render.Rendered:
    """Render the chart with the overlay (over the chart's defaults, no environment) and run
    `make template`'s checks: the rendered objects and warnings, or a ToolError naming the
    chart's reason when it refuses."""
    with tempfile.TemporaryDirectory(prefix="tfmw-import-") as tmp:
        (Path(tmp) / "imported.yaml").write_text(overlay)
        try:
            rendered = render.prepare("imported", helm=helm, values_dir=Path(tmp))
        except ToolError as err:
            reason = str(err).replace(tmp + "/", "")
            if err.exit_code != 2:  # no helm, helm failing: nothing was said about the overlay
                raise ToolError(
                    f"the overlay was written, but could not be checked: {reason} (--no-check skips the check)",
                    err.exit_code,
                ) from None
            raise ToolError(
                f"the overlay was written, but the chart refuses it: {reason}; "
                "edit the overlay (or the TFJob) and check it again"
            ) from None
    return rendered
