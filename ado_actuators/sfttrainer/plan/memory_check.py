"""The certain-OOM check of one measurement: the memory lower bound vs the device's memory.

Runs in the actuator's process after the entity is resolved and before any Ray resource is
requested. It reads only the model's config.json, so a model directory holding nothing else
(no tokenizer, no weights) is answered here; the node's checks for weights and tokenizer
files come later, and only for measurements that are launched.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition, catalog_data
from ado_actuators.sfttrainer.catalog.validity import ModelConfigUnavailable, read_model_config
from ado_actuators.sfttrainer.contract.outcomes import Invalid, Measured, Outcome
from ado_actuators.sfttrainer.metrics.gpu_memory import GIB, device_memory_bytes
from ado_actuators.sfttrainer.plan.architecture import (
    UnsupportedArchitecture,
    count_parameters,
    quantized_bits,
)
from ado_actuators.sfttrainer.plan.memory_bound import (
    GPTQ_MIN_BITS,
    MemoryBound,
    Training,
    memory_bound,
)

PROPERTY = "gpu_memory_lower_bound_gib"
METADATA = "gpu_memory_bound"


@dataclasses.dataclass(frozen=True)
class MemoryAssessment:
    bound: MemoryBound | None = None
    device_bytes: int | None = None
    gpu_model: str | None = None
    skipped: str | None = None
    """Why no verdict was given (the measurement then runs as it would without the check)."""

    @property
    def certain_oom(self) -> bool:
        return (
            self.skipped is None
            and self.bound is not None
            and self.device_bytes is not None
            and self.bound.total > self.device_bytes
        )

    def metadata(self) -> dict[str, Any]:
        data: dict[str, Any] = self.bound.as_metadata() if self.bound else {}
        if self.device_bytes is not None:
            data["device_memory_gib"] = round(self.device_bytes / GIB, 3)
        data["checked"] = self.skipped is None
        if self.skipped:
            data["skipped"] = self.skipped
        return data

    def invalid(self) -> Invalid:
        assert self.bound is not None and self.device_bytes is not None
        reason = (
            f"certain GPU out of memory: each device needs at least {self.bound.gib:.2f} GiB "
            f"({self.bound.describe()}; activations not counted), but {self.gpu_model} has "
            f"{self.device_bytes / GIB:g} GiB. Not launched: use more GPUs, LoRA or a smaller "
            f"model, or set the actuator parameter memory_bound_check: false to measure anyway"
        )
        return Invalid(
            reason=reason,
            gpu_oom=True,
            metadata={METADATA: self.metadata()},
            properties={PROPERTY: round(self.bound.gib, 3)},
        )

    def annotate(self, outcome: Outcome) -> Outcome:
        """The bound on a measured (or measured-invalid) row, and the check's record."""
        if isinstance(outcome, (Measured, Invalid)):
            outcome.metadata[METADATA] = self.metadata()
            if self.bound is not None:
                outcome.properties[PROPERTY] = round(self.bound.gib, 3)
        return outcome


def assess(
    values: Any, definition: ExperimentDefinition, location: str, *, hf_home: str, enabled: bool
) -> MemoryAssessment:
    """The bound of `values` (an EntityValues) under `definition`, and whether it can fit."""
    if values.number_gpus < 1:
        return MemoryAssessment(skipped="number_gpus 0 trains on CPUs: no GPU memory to bound")
    try:
        config = read_model_config(location, hf_home)
        counts = count_parameters(config)
        bits = quantized_bits(config)
    except (ModelConfigUnavailable, UnsupportedArchitecture) as error:
        return MemoryAssessment(skipped=f"no bound from the model's config.json: {error}")
    if bits is None and definition.weights_format == "GPTQ-Quantized":
        bits = GPTQ_MIN_BITS
    targets = catalog_data().target_modules(values.model_name)
    training = Training.of(values, definition.peft_method, targets, bits)
    bound = memory_bound(counts, training)
    device = device_memory_bytes(values.gpu_model)
    found = MemoryAssessment(bound=bound, device_bytes=device, gpu_model=values.gpu_model)
    if device is None:
        return dataclasses.replace(found, skipped=(
            f"gpu_model {values.gpu_model!r} has no memory figure in metrics/gpu_memory.yaml"
        ))  # fmt: skip
    if not enabled:
        return dataclasses.replace(found, skipped="turned off (memory_bound_check: false)")
    return found
