"""LoRA's target modules against the model's own linear layers, before anything launches.

PEFT adapts every module whose name ends with one of `target_modules`, and refuses a model in
which none does ("Target modules ... not found in the base model", `BaseTuner.inject_adapter`):
such a job fails at `get_peft_model` after its environment, its placement and the model's
weights were paid for. Names are compared by their last part, as PEFT's suffix match does for
the plain module names the catalogue gives.
"""

from __future__ import annotations

from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.memory_trace import ALL_LINEAR
from ado_actuators.sfttrainer.plan.model.architecture import (
    UnsupportedArchitecture,
    count_parameters,
)
from ado_actuators.sfttrainer.plan.model.meta_shape import MetaCountUnavailable, meta_counts
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration


def _counted_names(configuration: TrainingConfiguration) -> frozenset[str]:
    """The linear layers plan/model/architecture.py counts (its families' own names); empty for
    an architecture it does not count."""
    if configuration.shape is None:
        return frozenset()
    try:
        return frozenset(s.name for s in count_parameters(configuration.shape).linears)
    except UnsupportedArchitecture:
        return frozenset()


def _built_names(configuration: TrainingConfiguration) -> frozenset[str]:
    """Every nn.Linear of transformers' own model of the config, built on the meta device;
    empty where it cannot be built (no torch or transformers, or a config it rejects)."""
    if configuration.config is None:
        return frozenset()
    try:
        return meta_counts(configuration.config).linear_names
    except (MetaCountUnavailable, KeyError, TypeError, ValueError):
        return frozenset()


def _matches(targets: tuple[str, ...], names: frozenset[str]) -> bool:
    return any(t == ALL_LINEAR or t.rsplit(".", 1)[-1] in names for t in targets)


def lora_target_problem(configuration: TrainingConfiguration) -> str | None:
    """Why LoRA's targets cannot train this model (none of them names one of its linear
    layers), or None: they can, it is no LoRA run, or the model's layers cannot be listed."""
    targets = configuration.tuning.adapted_modules
    if not targets or configuration.config is None or "vision_config" in configuration.config:
        return None  # a vision tower's layers are not built here: they could be the targets
    counted = _counted_names(configuration)
    if _matches(targets, counted):
        return None
    names = _built_names(configuration) or counted
    if not names or _matches(targets, names):
        return None
    data, model_name = catalog_data(), configuration.model_name
    listed = model_name in data.lora_target_modules
    where = (
        f"the catalogue's targets for {model_name}"
        if listed
        else "the targets the catalogue gives models it does not list"
    )
    return (
        f"LoRA's target_modules {', '.join(targets)} ({where}; default "
        f"{', '.join(data.lora_default_target_modules)}) name no linear layer of {model_name} "
        f"(model_type {configuration.shape.model_type if configuration.shape else '?'}), so "
        f"PEFT would refuse it before training; its linear layers: {', '.join(sorted(names))}. "
        "Choose a model with these layers, or the full or prompt-tuning experiment"
    )
