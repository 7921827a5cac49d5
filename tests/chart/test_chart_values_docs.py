"""Every value in values.yaml is documented where it is defined, the schema knows every key,
and README's values table is the one generated from values.yaml."""
from __future__ import annotations

import json

import yaml

import chartkit
from scripts import values_table

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
    assert values_table.comments_by_key(text) == {"a": "", "a.b": "documented", "a.c": "",
                                                  "d": "a whole map", "d.e": ""}
    assert values_table.undocumented(text) == ["a.c"]
    assert [v.key for v in values_table.values_of(text)] == ["a.b", "a.c", "d"]


def test_multi_line_descriptions_are_joined():
    text = "# -- first line\n# second line\nx: 1\n"
    assert values_table.values_of(text)[0].description == "first line second line"


def test_readme_table_matches_values_yaml():
    readme = README.read_text()
    assert values_table.START in readme and values_table.END in readme, \
        "README lacks the values-table markers: run python -m scripts.values_table --write README.md"
    expected = values_table.with_table(readme, values_table.readme_section(VALUES.read_text()))
    assert readme == expected, "README's values table is stale: python -m scripts.values_table --write README.md"


def test_with_table_replaces_only_between_markers():
    readme = f"intro\n{values_table.START}\nold\n{values_table.END}\noutro\n"
    assert values_table.with_table(readme, "new") == \
        f"intro\n{values_table.START}\nnew\n{values_table.END}\noutro\n"
    assert values_table.with_table("intro\n", "t") == \
        f"intro\n\n{values_table.START}\nt\n{values_table.END}\n"


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
