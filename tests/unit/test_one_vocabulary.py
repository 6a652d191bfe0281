"""One vocabulary (issue 49): the training configuration's parts (plan/model/training.py) are the
only classes of plan/ that hold what is trained, how and where; the memory formula, the step time,
the trace and the launch read them, none copies their fields into a class of its own. The entity
the configuration is read from (catalog/) speaks the user's words, and the trace's request
(contract/memory_trace.StepSpec) crosses a process boundary: both live outside plan/.

LEFT lists the copies not yet gone, each with what it still copies, so that no new one appears
unseen and one that goes is struck off the list. None is left: the memory formula reads the
batch and the length from the configuration beside what the pinned releases do with it
(plan/memory/peak.ReleaseBehaviour), and a layer (plan/memory/activations.Block) holds the
configuration's Tuning and Kernels themselves beside its shapes."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from ado_actuators.sfttrainer.plan.model import training

PLAN = Path(training.__file__).resolve().parents[1]
PARTS = (
    training.Tuning,
    training.Parallelism,
    training.Batch,
    training.Precision,
    training.Kernels,
)
ALIASES = {"peft_method", "number_gpus", "number_nodes", "distributed_backend", "sequence_length"}
"""The parts' facts under the names copies gave them before."""
LEFT: dict[str, set[str]] = {}
"""Still copied: none."""


def _vocabulary() -> set[str]:
    return {f.name for part in PARTS for f in dataclasses.fields(part)} | ALIASES


def _classes_holding(words: set[str], least: int = 2) -> dict[str, set[str]]:
    """Every class of plan/ with `least` or more annotated fields named in `words`."""
    found = {}
    for path in PLAN.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            names = {
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
            if len(names & words) >= least:
                found[f"{path.relative_to(PLAN)}:{node.name}"] = names & words
    return found


def test_no_class_but_the_parts_copies_the_configurations_fields():
    parts = {f"model/training.py:{part.__name__}" for part in PARTS}
    copies = {k: v for k, v in _classes_holding(_vocabulary()).items() if k not in parts}
    assert copies == LEFT


def test_the_rule_sees_the_parts_themselves():
    """A reader that found no class would pass the rule above vacuously."""
    seen = set(_classes_holding(_vocabulary()))
    assert {f"model/training.py:{part.__name__}" for part in PARTS} <= seen
