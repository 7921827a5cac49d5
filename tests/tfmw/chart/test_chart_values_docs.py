"""Every value in values.yaml is documented where it is defined, the schema knows every key,
and README's values table is the one generated from values.yaml."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import chartkit
import yaml

from tfmw.chart import render, values_table

VALUES = chartkit.CHART / "values.yaml"
SCHEMA = chartkit.CHART / "values.schema.json"
README = chartkit.REPO / "README.md"


def test_every_value_is_documented():
    text = VALUES.read_text()
    rows = values_table.values_of(text)
    assert len(rows) > 40
    assert values_table.undocumented(text) == []


def test_the_doc_checker_notices_a_missing_comment():
    text = "a:\n  # -- documented\n  b: 1\n  c: 2\n# -- a whole map\nd:\n  e: 1\n"
    assert values_table.comments_by_key(text) == {
        "a": "",
        "a.b": "documented",
        "a.c": "",
        "d": "a whole map",
        "d.e": "",
    }
    assert values_table.undocumented(text) == ["a.c"]
    assert [v.key for v in values_table.values_of(text)] == ["a.b", "a.c", "d"]


def test_multi_line_descriptions_are_joined():
    text = "# -- first line\n# second line\nx: 1\n"
    assert values_table.values_of(text)[0].description == "first line second line"


def test_the_chart_readme_table_matches_values_yaml():
    readme = values_table.CHART_README.read_text()
    assert values_table.START in readme and values_table.END in readme, (
        "the chart README lacks the values-table markers: run python -m tfmw.chart.values_table --write"
    )
    expected = values_table.with_table(readme, values_table.readme_section(VALUES.read_text()))
    assert readme == expected, "the chart README's values table is stale: python -m tfmw.chart.values_table --write"


def test_the_root_readme_points_to_the_chart_readme_and_holds_no_second_copy():
    root = README.read_text()
    assert values_table.START not in root and "charts/tf-multiworker/README.md" in root


def test_helm_show_readme_prints_the_chart_readme(helm):
    shown = subprocess.run([helm, "show", "readme", str(VALUES.parent)], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == values_table.CHART_README.read_text().strip()


def test_with_table_replaces_only_between_markers():
    readme = f"intro\n{values_table.START}\nold\n{values_table.END}\noutro\n"
    assert values_table.with_table(readme, "new") == f"intro\n{values_table.START}\nnew\n{values_table.END}\noutro\n"
    assert values_table.with_table("intro\n", "t") == f"intro\n\n{values_table.START}\nt\n{values_table.END}\n"


def test_check_mode_reports_a_stale_table(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n{values_table.START}\nstale\n{values_table.END}\n")
    assert values_table.main(["--check", str(readme)]) == 1
    assert "stale" in capsys.readouterr().err
    assert values_table.main(["--write", str(readme)]) == 0
    assert values_table.main(["--check", str(readme)]) == 0


def test_undocumented_values_fail_the_script(tmp_path, capsys):
    values = tmp_path / "values.yaml"
    values.write_text("# -- ok\na: 1\nb: 2\n")
    assert values_table.main(["--values", str(values)]) == 1
    assert "b" in capsys.readouterr().err


def schema_paths(schema: dict, prefix: str = "") -> list[str]:
    """Keys the schema spells out inline (not the $ref'd Kubernetes pass-through types)."""
    paths = []
    for key, sub in schema.get("properties", {}).items():
        paths.append(prefix + key)
        if "properties" in sub:
            paths += schema_paths(sub, prefix + key + ".")
    return paths


def all_paths(values: dict, prefix: str = "") -> set[str]:
    paths = set()
    for key, value in values.items():
        paths.add(prefix + key)
        if isinstance(value, dict):
            paths |= all_paths(value, prefix + key + ".")
    return paths


def test_schema_keys_all_have_a_documented_default():
    """A key the schema accepts but values.yaml lacks would be an undocumented knob."""
    schema = json.loads(SCHEMA.read_text())
    values = all_paths(yaml.safe_load(VALUES.read_text()))
    missing = [p for p in schema_paths(schema) if p not in values]
    assert not missing, f"schema keys without a default in values.yaml: {missing}"


def test_schema_is_strict_at_every_level():
    schema = json.loads(SCHEMA.read_text())

    def walk(node, where):
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{where} accepts unknown keys"
            for key, sub in node["properties"].items():
                walk(sub, f"{where}.{key}")

    walk(schema, "(root)")


# -- docs never suggest a workers.extraEnv name the chart refuses (issue 10, problem 3) -----

TEMPLATES = chartkit.CHART / "templates"
# The list the templates refuse in workers.extraEnv: `$chartEnv := list "A" "B" ...`.
_REFUSED_LIST = re.compile(r"\$chartEnv\s*:=\s*list((?:\s+\"[A-Za-z0-9_]+\")+)")
_REFUSAL_WORD = re.compile(r"refus", re.IGNORECASE)
# A statement: a sentence, a Markdown table row, or a paragraph, whichever ends first.
_STATEMENT_END = re.compile(r"(?<=[.;!?])\s+|\n(?=\s*\|)|\n\s*\n")
_FENCED_YAML = re.compile(r"```ya?ml\n(.*?)```", re.DOTALL)


def refused_extra_env_names() -> set[str]:
    """The names the chart refuses in workers.extraEnv, read from the templates themselves."""
    found = set()
    for path in TEMPLATES.rglob("*"):
        if path.is_file():
            for match in _REFUSED_LIST.finditer(path.read_text()):
                found |= set(re.findall(r'"([A-Za-z0-9_]+)"', match[1]))
    return found


def extra_env_suggestions(text: str, refused: set[str]) -> list[str]:
    """Refused names a text offers for extraEnv: named in a statement about extraEnv before
    any word of refusal ("extraEnv, e.g. TFMW_X" is a suggestion, "extraEnv refuses
    TFMW_X" is not), or set under extraEnv in a fenced YAML example."""
    found = []
    # Abbreviations end no sentence.
    prose = text.replace("e.g.", "e_g_").replace("i.e.", "i_e_")
    for statement in _STATEMENT_END.split(prose):
        if not re.search(r"extraEnv\b", statement):  # not workers.extraEnvFrom, another key
            continue
        refusal = _REFUSAL_WORD.search(statement)
        offered = statement[: refusal.start()] if refusal else statement
        found += [name for name in sorted(refused) if re.search(rf"\b{name}\b", offered)]
    for block in _FENCED_YAML.findall(text):
        try:
            docs = list(yaml.safe_load_all(block))
        except yaml.YAMLError:
            continue
        for doc in docs:
            found += [name for name in _extra_env_names(doc) if name in refused]
    return sorted(set(found))


def _extra_env_names(node) -> list[str]:
    names = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "extraEnv" and isinstance(value, list):
                names += [item.get("name") for item in value if isinstance(item, dict)]
            else:
                names += _extra_env_names(value)
    elif isinstance(node, list):
        for item in node:
            names += _extra_env_names(item)
    return names


def documents() -> list[Path]:
    return sorted(
        [
            README,
            VALUES,
            TEMPLATES / "NOTES.txt",
            *chartkit.VALUES_DIR.glob("*.yaml"),
            *(chartkit.REPO / "docs").rglob("*.md"),
        ]
    )


def doc_text(text: str, values_file: bool) -> str:
    """What a reader takes from a file: for a values file each key with the comment that
    documents it (the comment sits above the key, so "extraEnv" is in the key), and the
    file itself as YAML (for the values set in it)."""
    if not values_file:
        return text
    described = "\n\n".join(f"{key}: {doc}" for key, doc in values_table.comments_by_key(text).items())
    return described + "\n\n```yaml\n" + text + "```\n"


def test_the_refused_list_is_read_from_the_templates_and_covers_every_chart_variable(render):
    refused = refused_extra_env_names()
    assert {"TF_CONFIG", "TFMW_MAX_RESTARTS", "TFMW_HANG_TIMEOUT_SECONDS"} <= refused
    # Every TFMW_* variable the chart sets on the workers is protected by the list.
    sts = next(o for o in render(chartkit.helm4(), chartkit.ALL_ON) if o["kind"] == "StatefulSet")
    worker = sts["spec"]["template"]["spec"]["containers"][0]
    chart_set = {e["name"] for e in worker["env"] if e["name"].startswith("TFMW_")}
    assert chart_set and chart_set <= refused, sorted(chart_set - refused)


def test_the_suggestion_checker_notices_the_old_wording():
    refused = {"TFMW_MAX_RESTARTS", "TF_CONFIG"}
    old_values_comment = (
        "# -- Extra environment variables of the worker container (Kubernetes "
        "EnvVar list), e.g. the\n# supervisor's TFMW_MAX_RESTARTS; the variables "
        "the chart derives from values are refused.\n"
    )
    assert extra_env_suggestions(doc_text(old_values_comment + "extraEnv: []\n", True), refused) == [
        "TFMW_MAX_RESTARTS"
    ]
    old_doc = (
        "`workers.extraEnv` adds variables (e.g. the supervisor's `TFMW_MAX_RESTARTS`), "
        "but refuses the ones above and `TF_CONFIG`: they are derived from values."
    )
    assert extra_env_suggestions(old_doc, refused) == ["TFMW_MAX_RESTARTS"]
    example = "```yaml\nworkers:\n  extraEnv:\n    - name: TF_CONFIG\n      value: x\n```\n"
    assert extra_env_suggestions(example, refused) == ["TF_CONFIG"]
    fine = "`workers.extraEnv` refuses `TF_CONFIG` and `TFMW_MAX_RESTARTS`: set the values."
    assert extra_env_suggestions(fine, refused) == []


def test_no_doc_suggests_an_extra_env_name_the_chart_refuses():
    refused = refused_extra_env_names()
    offenders = {
        str(path.relative_to(chartkit.REPO)): names
        for path in documents()
        if (names := extra_env_suggestions(doc_text(path.read_text(), path.suffix == ".yaml"), refused))
    }
    assert not offenders, f"docs suggest workers.extraEnv names the chart refuses: {offenders}"


def _overlay_row(env: str) -> list[str]:
    """What docs/chart.md's overlays table must say of values/<env>.yaml, from its render."""
    requires_digest = ((yaml.safe_load(chartkit.overlay_path(env).read_text()) or {}).get("image") or {}).get(
        "requireDigest"
    )
    # values/prod.yaml renders only with a digest: the release pipeline's stands in
    rendered = render.prepare(env, [f"image.digest={chartkit.STAND_IN_DIGEST}"] if requires_digest else [])
    target = rendered.target
    sts = rendered.find("StatefulSet")[0]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env_vars = {e["name"]: e.get("value") for e in container["env"]}
    gpus = (container.get("resources", {}).get("limits") or {}).get("nvidia.com/gpu")
    claims = rendered.find("PersistentVolumeClaim")
    storage = (
        f"createClaim {claims[0]['spec']['resources']['requests']['storage']}"
        if claims
        else rendered.values["storage"]["type"]
    )
    context = f"`{target.kube_context}`" if target.kube_context else "any"
    return [
        f"`{env}.yaml`",
        f"`{target.release}`",
        f"`{target.namespace}`",
        context,
        f"{sts['spec']['replicas']} × {f'{gpus} GPU' if gpus else 'CPU'}",
        storage,
        "a digest (required)" if requires_digest else f"`{container['image'].rpartition(':')[2]}`",
        env_vars["TFMW_ON_SUCCESS"],
    ]


def test_the_overlays_table_in_chart_md_is_what_the_overlays_render():
    text = (chartkit.REPO / "docs" / "chart.md").read_text()
    table = text.split("<!-- overlays-table:start -->", 1)[1].split("<!-- overlays-table:end -->", 1)[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    documented = {row[0]: row for row in rows}
    assert sorted(documented) == sorted(f"`{env}.yaml`" for env in chartkit.OVERLAYS)
    for env in chartkit.OVERLAYS:
        row = documented[f"`{env}.yaml`"]
        expected = _overlay_row(env)
        # the kube context cell may say more than "any" (e.g. what no ENV means for local)
        assert row[3].startswith(expected[3]), (env, row[3])
        assert row[:3] + row[4:] == expected[:3] + expected[4:], env
