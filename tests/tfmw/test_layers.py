"""The host side's parts and who may use whom (import-linter's layers, read from the code):
every import counts, also one inside a function, so none can hide a cycle or a crossing."""

from __future__ import annotations

import ast
from pathlib import Path

from repo import REPO

PACKAGE = REPO / "scripts" / "tfmw"
PARTS = (
    "bench",
    "peers",
    "faults",
    "cli",
    "imports",
    "deploy",
    "lint",
    "localrun",
    "devcluster",
    "tools",
    "image",
    "chart",
    "k8s",
)
# Each part and the parts it may import. `make bench` measures everything; nothing imports it.
ALLOWED = {
    "bench": set(PARTS) | {"table", "iproute"},
    # figures 10-11's peers: their builds and installs on make cluster, their runs through the harness
    "peers": {"faults", "devcluster", "chart", "k8s"},
    "faults": {"chart", "deploy", "k8s", "localrun", "devcluster", "table"},
    "cli": {"chart", "deploy", "imports"},  # it parses (chart's defaults) and hands each verb to deploy or imports
    "imports": {"chart"},  # an overlay converted from another platform's manifest, checked by rendering it
    "deploy": {"chart", "k8s"},
    "lint": {"chart"},
    "localrun": {"chart", "image", "iproute"},  # the pods see the image's ENV (image.dockerfile)
    "devcluster": {"chart", "image", "k8s", "iproute"},  # the nodes run the project's image
    "tools": {"chart"},
    "image": set(),
    "chart": set(),
    "k8s": set(),
    "table": set(),
    "iproute": set(),
    "__main__": {"cli"},
}
# Imports inside a function, each with its reason; any other would be dodging a cycle.
LOCAL_IMPORTS = {("tfmw.lint.pipeline", "tfmw.lint.checkov_scan")}  # a broken checkov is a FAIL line, never a crash


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported tfmw module, inside a function?) for every import of the file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        found += [(name, id(node) not in top) for name in names if name in MODULES]
    return found


def graph() -> dict[str, set[str]]:
    return {
        module_name(p): {m for m, _ in imports(p) if m != module_name(p) and m != "tfmw"} for p in PACKAGE.rglob("*.py")
    }


def part_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "tfmw"


def test_scripts_is_no_package_and_the_host_side_is_tfmw():
    assert not (REPO / "scripts" / "__init__.py").exists()
    assert {part_of(m) for m in graph()} - {"tfmw"} <= set(ALLOWED)


def test_each_part_imports_only_the_parts_below_it():
    crossings = sorted(
        f"{module} imports {target}"
        for module, targets in graph().items()
        for target in targets
        if part_of(target) != part_of(module) and part_of(target) not in ALLOWED.get(part_of(module), set())
    )
    assert crossings == []


def test_no_import_cycle():
    edges = graph()
    done: set[str] = set()
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        for target in sorted(edges.get(module, ())):
            if target in path:
                cycles.append(path[path.index(target) :] + [target])
            elif target not in done:
                visit(target, path + [target])
        done.add(module)

    for module in sorted(edges):
        visit(module, [module])
    assert cycles == []


def test_no_function_local_import_but_the_listed_ones():
    local = {
        (module_name(p), target)
        for p in PACKAGE.rglob("*.py")
        for target, inside in imports(p)
        if inside and target != "tfmw.lint"
    }
    assert local == LOCAL_IMPORTS


def test_the_command_line_is_imported_by_the_tfmw_command_alone():
    """cli only parses and dispatches: the verbs' workflows (deploy) never climb back into it,
    and nothing but `python -m tfmw` starts from it."""
    importers = sorted(module for module, targets in graph().items() if "tfmw.cli" in targets)
    assert importers == ["tfmw.__main__"]
    assert "cli" not in ALLOWED["deploy"]


def test_the_image_side_never_imports_the_host_side():
    tfmw_imports = [
        f"{p.relative_to(REPO)}: {node.module if isinstance(node, ast.ImportFrom) else node.names[0].name}"
        for p in (REPO / "entrypoint").rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tfmw")
        or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tfmw" for a in node.names))
    ]
    assert tfmw_imports == []


def test_a_crossing_is_found():
    """The checks read real imports: a module that imports across is named."""
    bad = PACKAGE / "chart" / "_layer_probe.py"
    bad.write_text("from tfmw.devcluster import controlplane\n")
    try:
        assert "tfmw.chart._layer_probe imports tfmw.devcluster.controlplane" in {
            f"{m} imports {t}" for m, ts in graph().items() for t in ts
        }
        assert "devcluster" not in ALLOWED["chart"]
    finally:
        bad.unlink()
