"""The chart's helpers stay readable: small defines in files named for what they hold
(node-exporter's helpers have no define over about 25 lines; Bitnami's validate pattern)."""

import re

import chartkit

TEMPLATES = chartkit.CHART / "templates"
LONGEST_DEFINE = 30
OPENERS = re.compile(r"\{\{-?\s*(?:if|range|with|define|block)\b")
CLOSERS = re.compile(r"\{\{-?\s*end\b")


def define_lengths(text: str) -> dict[str, int]:
    """Each define's name and its line count, from `define` to its matching `end`."""
    lines = text.splitlines()
    lengths = {}
    for start, line in enumerate(lines):
        named = re.match(r'\{\{-?\s*define "([^"]+)"', line)
        if not named:
            continue
        depth = 0
        for end in range(start, len(lines)):
            depth += len(OPENERS.findall(lines[end])) - len(CLOSERS.findall(lines[end]))
            if depth == 0:
                break
        lengths[named.group(1)] = end - start + 1
    return lengths


def test_define_lengths_are_measured_to_the_matching_end():
    text = (
        '{{- define "a" -}}\n{{- if x }}\n{{- range y }}{{ end }}\n{{- end }}\n{{- end }}\n'
        '{{- define "b" -}}\nb\n{{- end }}\n'
    )
    assert define_lengths(text) == {"a": 5, "b": 3}


def test_no_define_is_longer_than_about_thirty_lines():
    lengths = {
        f"{path.name}: {name}": n
        for path in sorted(TEMPLATES.glob("*.tpl"))
        for name, n in define_lengths(path.read_text()).items()
    }
    assert len(lengths) > 50, lengths  # every helper file was read
    assert {k: n for k, n in lengths.items() if n > LONGEST_DEFINE} == {}


def test_helpers_live_in_files_named_for_what_they_hold():
    names = sorted(path.name for path in TEMPLATES.glob("_*.tpl"))
    helpers = [
        "_labels.tpl",
        "_monitoring.tpl",
        "_names.tpl",
        "_network.tpl",
        "_pod.tpl",
        "_replicas.tpl",
        "_validate.tpl",
    ]
    assert names[: len(helpers)] == helpers, names
    assert all(re.fullmatch(r"_validate_[a-z]+\.tpl", n) for n in names[len(helpers) :]), names
