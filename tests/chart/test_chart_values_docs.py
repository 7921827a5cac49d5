"""Every value in values.yaml is documented where it is defined, and the schema knows every key."""
from __future__ import annotations

import json
import re

import yaml

import chartkit

VALUES = chartkit.CHART / "values.yaml"
SCHEMA = chartkit.CHART / "values.schema.json"
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-/]+):(?:\s|$)")


def documented_keys(text: str) -> dict[str, bool]:
    """Dotted key path -> whether a helm-docs `# --` comment block sits right above it."""
    result: dict[str, bool] = {}
    stack: list[tuple[int, str]] = []
    comment_block: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment_block.append(stripped)
            continue
        match = KEY_LINE.match(line)
        if not match or line.lstrip().startswith("-"):
            comment_block = [] if not stripped else comment_block
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [match["key"]])
        result[path] = any(c.startswith("# -- ") for c in comment_block)
        stack.append((indent, match["key"]))
        comment_block = []
    return result


def leaf_paths(values: dict, prefix: str = "") -> list[str]:
    """Paths of values that are not non-empty maps (what an operator sets)."""
    paths = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not _is_free_form(path):
            paths += leaf_paths(value, path + ".")
        else:
            paths.append(path)
    return paths


def _is_free_form(path: str) -> bool:
    """Maps that are Kubernetes objects passed through (documented as a whole)."""
    return path.endswith(".resources") or path.endswith("SecurityContext") \
        or path.endswith("securityContext")


def test_every_value_is_documented():
    values = yaml.safe_load(VALUES.read_text())
    docs = documented_keys(VALUES.read_text())
    leaves = leaf_paths(values)
    assert len(leaves) > 20
    undocumented = [p for p in leaves if not docs.get(p)]
    assert not undocumented, f"values without a '# -- ' comment above them: {undocumented}"


def test_the_doc_checker_notices_a_missing_comment():
    text = "a:\n  # -- documented\n  b: 1\n  c: 2\n"
    assert documented_keys(text) == {"a": False, "a.b": True, "a.c": False}


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
