"""`make chart-package` and `make chart-push`: the chart as users get it, a versioned package
pushed to an OCI registry (`helm push`), from which `helm install oci://<registry>/<path>/
tf-multiworker --version <version>` installs it.

    python -m tfmw.chart.package [--dest build/charts]
    python -m tfmw.chart.package --push oci://<registry>/<path> [--ca-file F] [--plain-http]

Before packaging, the chart's release notes are checked: CHANGELOG.md has a section for the
chart's version, the newest one, and Chart.yaml's `artifacthub.io/changes` says the same
(docs/chart.md, "Versions"). Log in first where the registry wants credentials (`helm registry
login <registry> --username <u> --password-stdin`). Every refusal is one line and exit 2.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tfmw import REPO
from tfmw.chart.helmkit import ToolError, find_helm, helm_error_line

CHART = REPO / "charts" / "tf-multiworker"
CHANGELOG = REPO / "CHANGELOG.md"
DEST = REPO / "build" / "charts"
_SECTION = re.compile(r"^## (\S+)\s*$", re.MULTILINE)
_ENTRY = re.compile(r"^- (added|changed|deprecated|removed|fixed|security): (.+)$")


def chart_meta(chart: Path = CHART) -> dict:
    return yaml.safe_load((chart / "Chart.yaml").read_text())


def changelog_sections(text: str) -> list[tuple[str, list[dict]]]:
    """(version, [{"kind", "description"}]) of each section, newest first (pure)."""
    found = []
    heads = list(_SECTION.finditer(text))
    for i, head in enumerate(heads):
        body = text[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        entries = []
        for line in body.strip().splitlines():
            m = _ENTRY.match(line.strip())
            if not m:
                raise ToolError(f"CHANGELOG.md section {head.group(1)}: {line.strip()!r} is not '- <kind>: <text>'")
            entries.append({"kind": m.group(1), "description": m.group(2)})
        found.append((head.group(1), entries))
    return found


def check_release_notes(meta: dict, changelog: str) -> None:
    """Refuse a chart whose version has no CHANGELOG section, or whose changes annotation differs."""
    version = str(meta.get("version"))
    sections = changelog_sections(changelog)
    if not sections or sections[0][0] != version:
        newest = sections[0][0] if sections else "none"
        raise ToolError(
            f"Chart.yaml version {version} has no CHANGELOG.md section on top (the newest is {newest}): "
            f"add '## {version}' with its changes (docs/chart.md, \"Versions\")"
        )
    annotated = yaml.safe_load(((meta.get("annotations") or {}).get("artifacthub.io/changes")) or "[]")
    if annotated != sections[0][1]:
        raise ToolError(
            f"Chart.yaml's artifacthub.io/changes differs from CHANGELOG.md's section {version}: copy the section's "
            "entries into the annotation (kind, description)"
        )


def package(dest: Path = DEST, chart: Path = CHART, helm: str | None = None) -> Path:
    meta = chart_meta(chart)
    check_release_notes(meta, CHANGELOG.read_text())
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [find_helm(helm), "package", str(chart), "--destination", str(dest)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise ToolError(f"helm package failed: {helm_error_line(proc.stderr)}")
    return dest / f"{meta['name']}-{meta['version']}.tgz"


def push_args(archive: Path, target: str, ca_file: str | None = None, plain_http: bool = False) -> list[str]:
    """`helm push` arguments (pure); refuses a target that is not an OCI reference."""
    if not re.fullmatch(r"oci://[^\s/]+(/[^\s/]+)*", target):
        raise ToolError(
            f"REGISTRY={target!r} must be an OCI reference oci://<registry>[/<path>], e.g. oci://ghcr.io/ml"
        )
    args = ["push", str(archive), target]
    if ca_file:
        args += ["--ca-file", ca_file]
    if plain_http:
        args.append("--plain-http")
    return args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfmw.chart.package", description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEST, help="where the .tgz goes (default build/charts)")
    parser.add_argument("--push", metavar="oci://REGISTRY/PATH", help="push the package there")
    parser.add_argument("--ca-file", help="the registry's CA certificate (a private CA)")
    parser.add_argument("--plain-http", action="store_true", help="a registry without TLS (never across a network)")
    args = parser.parse_args(argv)
    try:
        if args.push:
            push_args(Path("x.tgz"), args.push)  # refuse a bad target before packaging
        archive = package(args.dest)
        print(f"chart: packaged {archive.relative_to(REPO) if archive.is_relative_to(REPO) else archive}")
        if args.push:
            proc = subprocess.run(
                [find_helm(), *push_args(archive, args.push, args.ca_file, args.plain_http)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise ToolError(f"helm push to {args.push} failed: {helm_error_line(proc.stderr)}")
            print(f"chart: pushed to {args.push}/{chart_meta()['name']} ({(proc.stdout + proc.stderr).strip()})")
    except ToolError as err:
        print(f"chart: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
