"""README's Layout and the code agree, and the tests mirror the code."""

from __future__ import annotations

import re

from repo import REPO


def layout_block() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("## Layout\n\n```\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


def named_paths(lines: list[str]) -> set[str]:
    """Every path the Layout names: a line's first column; an indented line is relative to the
    last unindented folder above it."""
    paths, parent = set(), ""
    for line in lines:
        head = re.match(r"^( {0,2})(\S+(?: \S+)*?)(?:\s{2,}|$)", line)
        if not head or line.startswith("   "):
            continue  # a description's continuation
        indent, name = head.groups()
        if indent:
            paths.add(parent + name)
        else:
            paths.add(name)
            parent = name if name.endswith("/") else parent
    return paths


def test_the_layout_parser_reads_indented_names_under_their_folder():
    lines = ["a/       the a", "  b.py   of a", "         more", "c.sh     a script"]
    assert named_paths(lines) == {"a/", "a/b.py", "c.sh"}


def test_every_path_the_layout_names_exists():
    missing = sorted(p for p in named_paths(layout_block()) if not (REPO / p).exists())
    assert missing == []


def test_the_layout_names_every_part_of_the_host_side():
    package = REPO / "scripts" / "tfmw"
    parts = {
        f"scripts/tfmw/{p.name}/" if p.is_dir() else f"scripts/tfmw/{p.name}"
        for p in package.iterdir()
        if p.name not in ("__init__.py", "__main__.py", "__pycache__")
    }
    assert parts - named_paths(layout_block()) == set()
    assert sorted(p.name for p in (REPO / "scripts").iterdir() if p.is_file()) == ["host_packages.sh", "image_lock.sh"]


def test_tests_mirror_the_code():
    """tests/entrypoint/ mirrors entrypoint/, tests/tfmw/<part>/ a part of scripts/tfmw/."""
    tests = REPO / "tests"
    assert sorted(p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "e2e",
        "entrypoint",
        "support",
        "tfmw",
    ]
    for folder in (tests / "entrypoint").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__":
            assert (REPO / folder.relative_to(tests)).is_dir(), folder
    for folder in (tests / "tfmw").iterdir():
        if folder.is_dir() and folder.name != "__pycache__":
            part = REPO / "scripts" / "tfmw" / folder.name
            assert part.is_dir() or part.with_suffix(".py").is_file(), folder
    assert sorted(p.name for p in (tests / "e2e").iterdir() if p.name != "__pycache__") == ["cluster", "local"]
