"""Helpers several layers need are declared once, in the layer the map (docs/architecture.md)
gives them, and imported from there: a second copy drifts (two CUDA contexts of 256 and 400 MiB
under one name, "full-stab" beside "full stability", a temporary file named two ways)."""

from __future__ import annotations

import ast
import functools
import operator
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.catalog.experiments import catalog_data, short_name
from ado_actuators.sfttrainer.contract.memory_trace import PHASES
from ado_actuators.sfttrainer.contract.units import GIB, MIB
from ado_actuators.sfttrainer.metrics.gpu_memory import CUDA_CONTEXT_ESTIMATE_BYTES
from ado_actuators.sfttrainer.plan.memory.bound import CUDA_CONTEXT_FLOOR_BYTES

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "ado_actuators" / "sfttrainer"
SOURCES = sorted([*PACKAGE.rglob("*.py"), *(REPO / "benchmarks").glob("*.py")])


@functools.cache
def _trees() -> dict[str, ast.Module]:
    return {str(p.relative_to(REPO)): ast.parse(p.read_text()) for p in SOURCES}


def _places(match) -> list[str]:
    return sorted(
        f"{name}:{node.lineno}"
        for name, tree in _trees().items()
        for node in ast.walk(tree)
        if match(node)
    )


def _assigns(name: str):
    def match(node: ast.AST) -> bool:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        return isinstance(node, ast.Assign | ast.AnnAssign) and any(
            isinstance(t, ast.Name) and t.id == name for t in targets
        )

    return match


_OPERATIONS = {ast.Pow: operator.pow, ast.Mult: operator.mul}


def _constant(node: ast.AST) -> int | None:
    """The value of an integer expression of literals (2**30, 1024 * 1024), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if not isinstance(node, ast.BinOp) or type(node.op) not in _OPERATIONS:
        return None
    left, right = _constant(node.left), _constant(node.right)
    return None if left is None or right is None else _OPERATIONS[type(node.op)](left, right)


def _spelled_unit(node: ast.AST) -> bool:
    """A GiB or MiB written out as arithmetic (`1 << 20` stays free: a count, not bytes)."""
    return isinstance(node, ast.BinOp) and _constant(node) in (2**30, 2**20)


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("GIB", "ado_actuators/sfttrainer/contract/units.py"),
        ("MIB", "ado_actuators/sfttrainer/contract/units.py"),
        ("CUDA_CONTEXT_FLOOR_BYTES", "ado_actuators/sfttrainer/plan/memory/bound.py"),
        ("CUDA_CONTEXT_ESTIMATE_BYTES", "ado_actuators/sfttrainer/metrics/gpu_memory.py"),
    ],
)
def test_each_constant_is_declared_once_in_its_home(name, home):
    assert [place.split(":")[0] for place in _places(_assigns(name))] == [home]


def test_no_old_name_of_the_cuda_context_is_left():
    assert _places(_assigns("CUDA_CONTEXT_BYTES")) == []


def test_the_byte_units_are_written_out_nowhere_but_their_module():
    spelled = _places(_spelled_unit)
    assert [
        p for p in spelled if not p.startswith("ado_actuators/sfttrainer/contract/units.py")
    ] == []
    assert (GIB, MIB) == (2**30, 2**20)


def test_the_cuda_context_is_a_floor_in_the_bound_and_an_estimate_in_what_can_be_allocated():
    """The certain bound must stay below every real run, so it adds the least the context was
    seen to take; what a process can allocate takes off what the context typically takes."""
    assert CUDA_CONTEXT_FLOOR_BYTES == 256 * MIB < CUDA_CONTEXT_ESTIMATE_BYTES == 400 * MIB


def test_the_phases_of_a_step_are_declared_once():
    phases = _places(
        lambda node: (
            isinstance(node, ast.Tuple)
            and [getattr(e, "value", None) for e in node.elts] == list(PHASES)
        )
    )
    assert [p.split(":")[0] for p in phases] == [
        "ado_actuators/sfttrainer/contract/memory_trace.py"
    ]


def test_one_atomic_write_makes_every_temporary_file():
    """tempfile's mkstemp and os.replace only in host/atomic.py; execute/environment.py renames
    a whole built environment (a directory, not a file) into place."""
    calls = _places(
        lambda node: (
            isinstance(node, ast.Attribute)
            and (node.attr, getattr(node.value, "id", None))
            in {("mkstemp", "tempfile"), ("replace", "os")}
        )
    )
    assert {p.split(":")[0] for p in calls} == {
        "ado_actuators/sfttrainer/host/atomic.py",
        "ado_actuators/sfttrainer/execute/environment.py",
    }


def test_count_parameters_is_the_architectures_alone():
    """plan/model/architecture.count_parameters reads a config.json; the trainer's count of a
    loaded model is parameters_of_model, so one name never takes two kinds of input."""
    defined = _places(
        lambda node: isinstance(node, ast.FunctionDef) and node.name == "count_parameters"
    )
    assert [p.split(":")[0] for p in defined] == [
        "ado_actuators/sfttrainer/plan/model/architecture.py"
    ]


@pytest.mark.parametrize(
    ("identifier", "name"),
    [
        ("finetune_full_benchmark-v1.0.0", "full"),
        ("finetune_lora_benchmark-v1.0.0", "lora"),
        ("SFTTrainer.finetune_pt_benchmark-v1.0.0", "pt"),
        ("finetune_gtpq-lora_benchmark-v1.0.0", "gtpq-lora"),
        ("finetune_full_stability-v1.0.0", "stability"),
        ("SFTTrainer.finetune_lora_benchmark-v1.0.0-r16", "lora"),  # a parameterised variant
        ("SFTTrainer.something_else", "SFTTrainer.something_else"),
    ],
)
def test_an_experiments_short_name(identifier, name):
    assert short_name(identifier) == name


def test_the_catalogs_experiments_have_distinct_short_names_that_fit_the_preview_column():
    names = [short_name(identifier) for identifier in catalog_data().experiments]
    assert len(set(names)) == len(names)
    assert max(map(len, names)) <= 9  # the preview table's "exp." column


def test_the_preview_and_the_report_name_experiments_alike():
    from ado_actuators.sfttrainer.report.table import _experiment_labels

    identifiers = {f"SFTTrainer.{i}" for i in catalog_data().experiments}
    assert sorted(_experiment_labels(identifiers).values()) == sorted(
        short_name(i) for i in identifiers
    )
