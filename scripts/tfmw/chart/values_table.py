"""The chart's values as a Markdown table, generated from values.yaml's `# --` comments.

values.yaml documents every value where it is defined (helm-docs style): a comment block
starting with `# -- ` right above the key. A map with its own `# --` comment (e.g.
`workers.resources`, `podSecurityContext`) is documented as one value; other maps are
walked into.

The table lives in the chart's own README (charts/tf-multiworker/README.md, what `helm show
readme` prints), between its markers; the rest of that README is written by hand.

Usage:
    python -m tfmw.chart.values_table            # print the table
    python -m tfmw.chart.values_table --write    # replace the table between the chart README's markers
    python -m tfmw.chart.values_table --check    # exit 1 if the chart README's table is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from tfmw import REPO

VALUES = REPO / "charts" / "tf-multiworker" / "values.yaml"
CHART_README = REPO / "charts" / "tf-multiworker" / "README.md"
START = "<!-- values-table:start -->"
END = "<!-- values-table:end -->"
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-/]+):(?:\s|$)")


@dataclass(frozen=True)
class Value:
    key: str  # dotted path
    type: str
    default: str  # compact JSON
    description: str  # "" when undocumented


def comments_by_key(text: str) -> dict[str, str]:
    """Dotted key path -> its `# -- ` description ("" if the key has none)."""
    result: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    block: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped)
            continue
        match = _KEY_LINE.match(line)
        if not match or stripped.startswith("-"):
            if not stripped:
                block = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [match["key"]])
        result[path] = _description(block)
        stack.append((indent, match["key"]))
        block = []
    return result


def _description(block: list[str]) -> str:
    """The text of the `# -- ` comment in a block, continuation lines joined."""
    for i, line in enumerate(block):
        if line.startswith("# -- "):
            parts = [line[len("# -- ") :]] + [c.lstrip("#").strip() for c in block[i + 1 :]]
            return " ".join(p for p in parts if p)
    return ""


def _type_of(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "null"


def values_of(text: str) -> list[Value]:
    """Every documented-or-not value of values.yaml, in file order."""
    docs = comments_by_key(text)
    rows: list[Value] = []

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            path = prefix + key
            if isinstance(value, dict) and value and not docs.get(path):
                walk(value, path + ".")
            else:
                rows.append(Value(path, _type_of(value), json.dumps(value, separators=(",", ":")), docs.get(path, "")))

    walk(yaml.safe_load(text) or {}, "")
    return rows


def undocumented(text: str) -> list[str]:
    return [v.key for v in values_of(text) if not v.description]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(text: str) -> str:
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for v in values_of(text):
        lines.append(f"| `{v.key}` | {v.type} | `{_cell(v.default)}` | {_cell(v.description)} |")
    return "\n".join(lines)


def readme_section(text: str) -> str:
    """The README block: where it comes from, the table."""
    return (
        "<!-- generated from values.yaml by `python -m tfmw.chart.values_table --write`; "
        "a test fails when it is stale -->\n" + markdown_table(text)
    )


def with_table(readme: str, table: str) -> str:
    """README text with the table between the markers (markers appended if absent)."""
    block = f"{START}\n{table}\n{END}"
    if START in readme and END in readme:
        head, _, rest = readme.partition(START)
        _, _, tail = rest.partition(END)
        return head + block + tail
    return readme.rstrip("\n") + "\n\n" + block + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfmw.chart.values_table")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--write", metavar="README", nargs="?", const=str(CHART_README), help="write the table between the markers"
    )
    group.add_argument(
        "--check", metavar="README", nargs="?", const=str(CHART_README), help="exit 1 if the table there is stale"
    )
    parser.add_argument("--values", default=str(VALUES), help="values.yaml to read")
    args = parser.parse_args(argv)
    text = Path(args.values).read_text()
    missing = undocumented(text)
    if missing:
        print(f"error: values without a '# -- ' comment in {args.values}: {', '.join(missing)}", file=sys.stderr)
        return 1
    table = readme_section(text)
    if args.write:
        path = Path(args.write)
        path.write_text(with_table(path.read_text(), table))
        return 0
    if args.check:
        path = Path(args.check)
        if with_table(path.read_text(), table) != path.read_text():
            print(
                f"error: the values table in {path} is stale: run `python -m tfmw.chart.values_table --write`",
                file=sys.stderr,
            )
            return 1
        return 0
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
