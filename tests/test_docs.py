"""The docs say what the chart renders: each overlay's object names, the pod environment; and
every code block in the markdown closes (an unclosed one turns the rest of a page into code)."""

from __future__ import annotations

import re
from pathlib import Path

import chartkit
import pytest
import yaml
from repo import REPO

from tfmw.chart.target import target_of

DOCS = REPO / "docs"
OBJECTS_START, OBJECTS_END = "<!-- overlay-objects:start -->", "<!-- overlay-objects:end -->"
# A fence line: up to any indentation (fences sit inside list items too), then 3+ backticks or
# tildes, then the rest of the line (an opening fence's info string).
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")


# ---------------------------------------------------------------- markdown fences


def markdown_files() -> list[Path]:
    """Every markdown file a reader opens: the README, the changelog, the docs, each chart's
    README (`helm show readme`), the examples."""
    files = [
        REPO / "README.md",
        REPO / "CHANGELOG.md",
        *DOCS.rglob("*.md"),
        *(REPO / "charts").glob("*/README.md"),
        *(REPO / "examples").rglob("*.md"),
    ]
    return sorted(set(files))


def fence_problems(text: str) -> list[str]:
    """Code fences that do not close as CommonMark closes them: a closing fence is the opening
    one's character, at least as many, and nothing after it; a fence line with text after it
    inside a block is content, so the block goes on (to the end of the page if nothing closes it)."""
    problems, fence, opened = [], "", 0
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if not fence:
            # a backtick fence's info string holds no backtick (else it is inline code)
            if match and not (match[1][0] == "`" and "`" in match[2]):
                fence, opened = match[1], number
            continue
        if match and match[1][0] == fence[0] and len(match[1]) >= len(fence):
            if match[2].strip():
                problems.append(f"line {number}: text after a closing fence (the block from line {opened} goes on)")
            else:
                fence = ""
    if fence:
        problems.append(f"line {opened}: a code block that never closes")
    return problems


def test_the_fence_checker_finds_text_after_a_closing_fence_and_a_block_never_closed():
    good = "a\n\n```sh\nmake x\n```\n\n- item\n\n  ````md\n  ```\n  ````\n\n~~~\nx\n~~~\n"
    assert fence_problems(good) == []
    assert fence_problems("```\nerror: x\n``` `SET` is split\n\n## Tests\n") == [
        "line 3: text after a closing fence (the block from line 1 goes on)",
        "line 1: a code block that never closes",
    ]
    assert fence_problems("```yaml\na: 1\n") == ["line 1: a code block that never closes"]
    assert fence_problems("inline ```code``` is no fence\n") == []


def test_every_code_block_in_the_markdown_closes():
    files = markdown_files()
    assert REPO / "docs" / "chart.md" in files and REPO / "charts" / "tf-multiworker" / "README.md" in files
    problems = {str(p.relative_to(REPO)): found for p in files if (found := fence_problems(p.read_text()))}
    assert problems == {}


# ---------------------------------------------------------------- what the chart renders


@pytest.fixture(scope="module")
def renders() -> dict[str, list[dict]]:
    """The chart rendered once each (real Helm 4): with its defaults, with each overlay for the
    overlay's own release and namespace (its `target` block, as `make deploy ENV=<env>` does),
    with every optional feature on, and without API access (the variant with TFMW_REPLICAS)."""
    helm = chartkit.helm4()
    out = {
        "default": chartkit.template(helm),
        "all-on": chartkit.template(helm, [chartkit.ALL_ON]),
        "no API access": chartkit.template(helm, sets=["completion.onFailure=idle"]),
    }
    for env in chartkit.OVERLAYS:
        path = chartkit.overlay_path(env)
        target = target_of(yaml.safe_load(path.read_text()), f"values/{env}.yaml")
        out[env] = chartkit.template(helm, [path], release=target.release, namespace=target.namespace)
    return out


def worker_container(objects: list[dict]) -> dict:
    sts = chartkit.one(objects, "StatefulSet")
    return next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "worker")


def table_rows(text: str) -> list[list[str]]:
    """The cells of a markdown table's body rows (header and rule skipped)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip().startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def objects_row(env: str, objects: list[dict]) -> list[str]:
    """What docs/operations.md's names table must say of an overlay, from its render."""
    sts = chartkit.one(objects, "StatefulSet")
    name, replicas = sts["metadata"]["name"], sts["spec"]["replicas"]
    service = chartkit.one(objects, "Service", sts["spec"]["serviceName"])["metadata"]["name"]
    status = chartkit.env_of(worker_container(objects))["TFMW_STATUS_CONFIGMAP"]["value"]
    chartkit.one(objects, "ConfigMap", status)
    claim = chartkit.one(objects, "PersistentVolumeClaim")
    kept = (claim["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") == "keep"
    return [
        f"`{env}`",
        f"`{sts['metadata']['namespace']}`",
        f"`{name}`" if service == name else f"`{name}`, `{service}`",
        f"`{name}-0` .. `{name}-{replicas - 1}`",
        f"`{status}`",
        f"`{claim['metadata']['name']}`" + (", kept on uninstall" if kept else ", deleted on uninstall"),
    ]


def test_the_names_table_in_operations_md_is_what_each_overlay_renders(renders):
    """The names an operator types (`kubectl delete pvc`, `kubectl cp`, the status ConfigMap):
    every overlay's release contains the chart's name, so the objects carry the release's name."""
    text = (DOCS / "operations.md").read_text()
    table = text.split(OBJECTS_START, 1)[1].split(OBJECTS_END, 1)[0]
    documented = {row[0]: row for row in table_rows(table)}
    assert sorted(documented) == sorted(f"`{env}`" for env in chartkit.OVERLAYS)
    for env in chartkit.OVERLAYS:
        assert documented[f"`{env}`"] == objects_row(env, renders[env]), env


def test_no_doc_builds_an_object_name_from_the_release_and_the_chart_name():
    """`<release>-tf-multiworker-0` names nothing for an overlay (its release already contains
    the chart's name): the docs say `<fullname>-...` and define `<fullname>` once per page."""
    pattern = re.compile(r"<release>-tf-multiworker-")
    offenders = {
        str(p.relative_to(REPO)): [n for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
        for p in markdown_files()
    }
    assert {path: lines for path, lines in offenders.items() if lines} == {}


def env_table_names(text: str, heading: str) -> set[str]:
    """The `TFMW_*` names in the first column of the first table under `heading`."""
    section = ("\n" + text).split(f"\n{heading}\n", 1)[1]
    table = section[section.index("\n|") :].split("\n\n", 1)[0]
    return {name for row in table_rows(table) for name in re.findall(r"`(TFMW_[A-Z0-9_]+)`", row[0])}


def test_the_env_table_parser_reads_every_name_of_a_row():
    text = "## Env\n\nintro\n\n| variable | from |\n|---|---|\n| `TFMW_A`, `TFMW_B` | x `TFMW_C` |\n\nafter\n"
    assert env_table_names(text, "## Env") == {"TFMW_A", "TFMW_B"}


def chart_worker_env() -> set[str]:
    """Every `TFMW_*` variable the StatefulSet template can give the worker container, under any
    condition (read from the template: a render shows only its own values' variables)."""
    text = (chartkit.CHART / "templates" / "statefulset.yaml").read_text()
    return set(re.findall(r"^\s*- name: (TFMW_[A-Z0-9_]+)\s*$", text, re.M))


def test_the_template_reader_finds_every_variable_a_render_sets(renders):
    rendered = {name for objects in renders.values() for name in chartkit.env_of(worker_container(objects))}
    chart_set = chart_worker_env()
    assert {"TFMW_POD_NAME", "TFMW_REPLICAS", "TFMW_STATUS_CONFIGMAP"} <= chart_set
    assert {name for name in rendered if name.startswith("TFMW_")} - chart_set == set()


@pytest.mark.parametrize(
    ("doc", "heading"),
    [
        ("chart.md", "## From values to TF_CONFIG"),
        ("contracts.md", "## Pod environment (set by the chart's StatefulSet, read by `python -m entrypoint`)"),
    ],
)
def test_the_pod_environment_tables_list_exactly_what_the_chart_sets(doc, heading):
    chart_set = chart_worker_env()
    documented = env_table_names((DOCS / doc).read_text(), heading)
    assert {"missing": sorted(chart_set - documented), "not set by the chart": sorted(documented - chart_set)} == {
        "missing": [],
        "not set by the chart": [],
    }
