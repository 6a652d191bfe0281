"""The package's layout is the docs' map of layers, and the code keeps its import rules.

The map (docs/architecture.md, "The layers of the package") is the one declaration: which layers
exist, top to bottom, and what each imports. This test reads it and every import statement of the package
(module level and lazy alike) and checks that they agree, so neither can drift from the other.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "ado_actuators" / "sfttrainer"
PREFIX = ("ado_actuators", "sfttrainer")
EXTERNAL = {"ado": "ado-core", "ray": "Ray"}
"""Third-party packages whose importers the map names, by top-level module."""


def read_map() -> list[tuple[str, set[str], set[str]]]:
    """(layer, imports, imported by) per row of the docs' table, top to bottom."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## The layers of the package", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"`\w+/`", cells[0]):
            continue
        imports = set(re.findall(r"`(\w+)/`", cells[2]))
        imports |= {name for name in EXTERNAL.values() if name in cells[2]}
        rows.append((cells[0].strip("`/"), imports, set(re.findall(r"`(\w+)/`", cells[3]))))
    return rows


def code_imports() -> dict[str, set[str]]:
    """Each layer's imports of other layers and of the named third-party packages."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        layer = parts[0] if len(parts) > 1 else None
        found.setdefault(layer, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0 or layer, f"relative import at the root: {path}"
                names = [node.module or ""] if node.level == 0 else []
                if node.module and tuple(node.module.split(".")) == PREFIX:
                    names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                dotted = name.split(".")
                if tuple(dotted[:2]) == PREFIX and len(dotted) > 2 and dotted[2] != layer:
                    found[layer].add(dotted[2])
                elif dotted[0] in EXTERNAL:
                    found[layer].add(EXTERNAL[dotted[0]])
    return found


def test_the_package_root_holds_only_its_init_and_the_layers():
    loose = sorted(p.name for p in PACKAGE.iterdir() if p.is_file() and p.name != "__init__.py")
    assert loose == []
    layers = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert layers == {layer for layer, _, _ in read_map()}


def test_every_layer_imports_exactly_what_the_map_says():
    found = code_imports()
    assert found.pop(None) == set(), "the package's __init__ imports nothing"
    for layer, imports, _ in read_map():
        assert found[layer] == imports, f"{layer}/ imports {sorted(found[layer])}"


def test_no_layer_imports_a_layer_above_it_and_nothing_imports_the_front_end():
    rows = read_map()
    order = [layer for layer, _, _ in rows]
    for position, (layer, imports, _) in enumerate(rows):
        above = set(order[:position]) & imports
        assert not above, f"{layer}/ imports {sorted(above)}, listed above it"
    assert order[0] == "actuator"
    assert all("actuator" not in imports for _, imports, _ in rows)


def test_imported_by_is_the_imports_column_read_backwards():
    rows = read_map()
    for layer, _, importers in rows:
        assert importers == {other for other, imports, _ in rows if layer in imports}, layer


def test_only_the_front_ends_import_ado_core_and_only_execute_imports_ray():
    rows = {layer: imports for layer, imports, _ in read_map()}
    assert {layer for layer, imports in rows.items() if "ado-core" in imports} == {
        "actuator",
        "report",
    }
    assert {layer for layer, imports in rows.items() if "Ray" in imports} == {"execute"}


def test_the_map_is_read_from_the_docs():
    """A parser that found no rows, or no imports, would make the tests above pass vacuously."""
    rows = read_map()
    assert len(rows) >= 10
    assert sum(len(imports) for _, imports, _ in rows) >= 20
