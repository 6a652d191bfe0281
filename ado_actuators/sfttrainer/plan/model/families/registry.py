"""The decoder families the planner counts by hand, by config.json's model_type. Adding one is
its module in plan/model/families/ declaring its `FAMILIES`, named in `_MODULES` below, and its
models in the catalogue. Any other model_type is counted from a trace of its own code
(plan/memory/traced.py) or transformers' meta-device model (plan/model/meta_shape.py)."""

from __future__ import annotations

from ado_actuators.sfttrainer.plan.model.families import (
    gpt_bigcode,
    granitemoe,
    llama_like,
    mixtral,
)
from ado_actuators.sfttrainer.plan.model.families.spec import Family

_MODULES = (llama_like, mixtral, granitemoe, gpt_bigcode)
FAMILIES: dict[str, Family] = {
    family.model_type: family for module in _MODULES for family in module.FAMILIES
}
COUNTED = frozenset(FAMILIES)
"""The model types counted by hand (plan/model/architecture.py, plan/memory/activations.py); any
other is traced (plan/memory/traced.py)."""


def family_of(model_type: str) -> Family | None:
    """The family `model_type` belongs to; None for one counted otherwise."""
    return FAMILIES.get(model_type)
