"""The spec's configuration rules (is_valid logic 1-7): which entities are invalid before launch."""

from __future__ import annotations

from typing import Any

from ado_actuators.sfttrainer.catalog.entity_values import EntityValues
from ado_actuators.sfttrainer.catalog.model_shapes import (
    ModelConfigUnavailable,
    find_model_config,
)
from ado_actuators.sfttrainer.catalog.models import VANILLA

__all__ = [
    "ModelConfigUnavailable",
    "configuration_problems",
    "read_model_config",
]


def configuration_problems(values: EntityValues, num_local_experts: int | None = None) -> list[str]:
    """Reasons the entity cannot be measured as configured; empty when it can.

    `num_local_experts` is the model's MoE expert count
    (None for dense models); only rule 7 needs it, and only when fast_moe is set.
    """
    problems = []
    gpus, nodes, batch = values.number_gpus, values.number_nodes, values.batch_size
    if gpus > 0 and batch % gpus != 0:
        problems.append(f"batch_size {batch} is not divisible by number_gpus {gpus}")
    if nodes > 0 and gpus % nodes != 0:
        problems.append(f"number_gpus {gpus} is not divisible by number_nodes {nodes}")
    if nodes < 1:
        problems.append(f"number_nodes must be at least 1, got {nodes}")
    if batch < 1:
        problems.append(f"batch_size must be at least 1, got {batch}")
    if gpus > 0 and not (values.gpu_model or "").strip():
        problems.append(f"gpu_model must be set when number_gpus is {gpus}")
    if values.fast_moe:
        if gpus % values.fast_moe != 0:
            problems.append(f"number_gpus {gpus} is not divisible by fast_moe {values.fast_moe}")
        if num_local_experts is None:
            problems.append(
                f"fast_moe {values.fast_moe} needs a Mixture of Experts model, but "
                f"{values.model_name} declares no num_local_experts"
            )
        elif num_local_experts % values.fast_moe != 0:
            problems.append(
                f"the model's num_local_experts {num_local_experts} is not divisible by "
                f"fast_moe {values.fast_moe}"
            )
    return problems


def read_model_config(
    location: str,
    hf_home: str | None,
    *,
    model_name: str | None = None,
    weights_format: str = VANILLA,
) -> dict[str, Any]:  # config.json as json.load reads it: any JSON
    """The model's config.json (catalog/model_shapes.py: its directory, hf_home's cache, then
    the shipped shapes); no weights, and no hub."""
    return find_model_config(
        location, hf_home, model_name=model_name, weights_format=weights_format
    ).config
