"""plan/'s sub-packages keep their concerns apart: the memory and speed models meet only through
the model's description and the configuration's parts (plan/model/, the device geometry
included); no two sub-packages import each other, and plan/model/ imports none of the others; the
trace of a model's own code (plan/memory/trace/) runs in a process of its own, so nothing else in
the package imports it; and no module of plan/ imports itself back through another."""

from __future__ import annotations

import ast
from pathlib import Path

from ado_actuators.sfttrainer.plan.memory import traced

PLAN = Path(__file__).resolve().parents[2] / "ado_actuators" / "sfttrainer" / "plan"
PACKAGE = "ado_actuators.sfttrainer."
SUB_PACKAGES = {"launch", "model", "memory", "speed"}


def _module(path: Path) -> str:
    parts = path.relative_to(PLAN.parent).with_suffix("").parts
    return "plan." + ".".join(parts[1:]).removesuffix(".__init__").removesuffix("__init__")


def plan_imports() -> dict[str, set[str]]:
    """Each plan module's imports of other plan modules (module level and lazy alike)."""
    found: dict[str, set[str]] = {}
    for path in PLAN.rglob("*.py"):
        names = found.setdefault(_module(path).rstrip("."), set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module + "." == PACKAGE + "plan.":
                    names |= {f"plan.{alias.name}" for alias in node.names}
                elif node.module.startswith(PACKAGE + "plan."):
                    module = node.module.removeprefix(PACKAGE)
                    names |= {module}
                    names |= {f"{module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                names |= {
                    a.name.removeprefix(PACKAGE) for a in node.names if a.name.startswith(PACKAGE)
                }
    modules = set(found)
    return {name: {i for i in imports if i in modules} for name, imports in found.items()}


def test_plan_holds_only_its_sub_packages():
    loose = sorted(p.name for p in PLAN.glob("*.py") if p.name != "__init__.py")
    assert loose == []
    packages = {p.name for p in PLAN.iterdir() if (p / "__init__.py").is_file()}
    assert packages == SUB_PACKAGES


def test_memory_and_speed_meet_only_through_the_model():
    for module, imports in plan_imports().items():
        if module.startswith("plan.memory"):
            assert not {i for i in imports if i.startswith("plan.speed")}, module
        if module.startswith("plan.speed"):
            assert not {i for i in imports if i.startswith("plan.memory")}, module


def _sub_package_ties() -> set[tuple[str, str]]:
    return {
        (module.split(".")[1], i.split(".")[1])
        for module, imports in plan_imports().items()
        for i in imports
        if module.count(".") and i.count(".") and module.split(".")[1] != i.split(".")[1]
    }


def test_no_two_sub_packages_import_each_other_and_the_model_imports_none():
    ties = _sub_package_ties()
    assert ("launch", "model") in ties and ("memory", "model") in ties  # the rule reads real ties
    assert not {(a, b) for a, b in ties if (b, a) in ties}
    assert not {b for a, b in ties if a == "model"}


def _in_trace(module: str) -> bool:
    return module == "plan.memory.trace" or module.startswith("plan.memory.trace.")


def test_nothing_outside_the_trace_imports_it():
    """The verdict asks for a trace through plan/memory/traced.py, which runs the trace package
    as a subprocess (torch, transformers and peft are imported there, never in the engine)."""
    for module, imports in plan_imports().items():
        if not _in_trace(module):
            assert not {i for i in imports if _in_trace(i)}, module
    trace = PACKAGE + "plan.memory.trace"
    for path in PLAN.parent.rglob("*.py"):
        if PLAN / "memory" / "trace" in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not [n for n in names if n == trace or n.startswith(trace + ".")], path


def test_no_plan_module_imports_itself_back():
    graph = plan_imports()

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for name in graph.get(start, ()):
            if name == target or (name not in seen and reaches(name, target, seen | {name})):
                return True
        return False

    circles = [module for module in graph if reaches(module, module, {module})]
    assert circles == []


def test_the_trace_key_covers_every_file_of_the_trace_package():
    trace = PLAN / "memory" / "trace"
    files = set(traced.tracing_files())
    assert set(trace.rglob("*.py")) <= files
    assert any(p.name == "memory_trace.py" for p in files)  # the request and result types
