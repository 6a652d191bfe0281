"""Memory of one device per gpu_model: the datasheet capacity the certain-OOM check compares a
bound with, and what a training process can allocate, which the predicted peak is compared with.

The figures and their sources are data (gpu_memory.yaml); the actuator parameter gpu_memory_gib
states a device's memory where the table has none (or replaces the table's). A gpu_model with
neither has no figure: only a bound above the largest device of the table answers it (certain
OOM); otherwise the checks are skipped (the measurement runs as it would without them).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import pydantic

from ado_actuators.sfttrainer.contract.units import GIB, MIB
from ado_actuators.sfttrainer.metrics import device_tables

CUDA_CONTEXT_ESTIMATE_BYTES = 400 * MIB
"""What the CUDA context of a training process takes of the device, outside torch's allocator:
an estimate, taken from the device's total to give what a process can allocate (the certain
bound adds a smaller floor instead, plan/memory/bound.CUDA_CONTEXT_FLOOR_BYTES). "around
400MB if CUDA >= 11.7 is used and lazy module loading enabled (default in PyTorch)"
(pytorch/pytorch issue 109888, ptrblck); 287 MB measured for a bare tensor with lazy loading
(pytorch/pytorch pull request 86509). Not visible to a CPU trace, not fitted: taken from those
readings; the allocator headroom (plan/memory/peak.ALLOCATOR_HEADROOM) is fitted beside it."""


class DeviceMemory(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    gib: float = pydantic.Field(gt=0)
    source: str
    aliases: tuple[str, ...] = ()
    total_mib: float | None = pydantic.Field(default=None, gt=0)
    total_source: str | None = None

    @pydantic.model_validator(mode="after")
    def _total_has_a_source(self) -> DeviceMemory:
        if (self.total_mib is None) != (self.total_source is None):
            raise ValueError("total_mib and total_source go together")
        return self


STATED_SOURCE = "stated by the actuator parameter gpu_memory_gib"
Stated = Mapping[str, float] | None
"""gpu_model -> GiB, as the actuator parameter gpu_memory_gib states them: replaces the table's
figure of a gpu_model (both the bound's and, less the CUDA context, the predicted peak's)."""


@functools.cache
def memory_table() -> dict[str, DeviceMemory]:
    return device_tables.load("gpu_memory.yaml", DeviceMemory)


@functools.cache
def _folded() -> dict[str, DeviceMemory]:
    return {name.casefold(): device for name, device in memory_table().items()}


def device_entry(gpu_model: str | None) -> DeviceMemory | None:
    """The table's entry of `gpu_model`: by its name or an alias, as written, in torch's spelling
    ("NVIDIA GeForce RTX 4090" for the label NVIDIA-GeForce-RTX-4090) or in other case."""
    if not gpu_model:
        return None
    label = "-".join(gpu_model.split())
    return memory_table().get(gpu_model) or _folded().get(label.casefold())


def _stated(gpu_model: str | None, stated: Stated) -> float | None:
    if not gpu_model or not stated:
        return None
    return stated.get(gpu_model)


def device_memory_bytes(gpu_model: str | None, stated: Stated = None) -> int | None:
    """The datasheet capacity read as GiB: the certain bound's upper bound."""
    if (gib := _stated(gpu_model, stated)) is not None:
        return int(gib * GIB)
    device = device_entry(gpu_model)
    return int(device.gib * GIB) if device else None


def largest_device() -> tuple[str, int]:
    """The table's device of the most memory and its bytes: more than any device could give,
    a bound above it is a certain OOM on a gpu_model the table does not list."""
    name, device = max(memory_table().items(), key=lambda item: item[1].gib)
    return name, int(device.gib * GIB)


def allocatable_bytes(gpu_model: str | None, stated: Stated = None) -> int | None:
    """What a training process can allocate: nvidia-smi's total less the CUDA context (the
    datasheet capacity read as GiB where no nvidia-smi total is on record)."""
    if (gib := _stated(gpu_model, stated)) is not None:
        return int(gib * GIB - CUDA_CONTEXT_ESTIMATE_BYTES)
    device = device_entry(gpu_model)
    if device is None:
        return None
    total = device.total_mib * MIB if device.total_mib else device.gib * GIB
    return int(total - CUDA_CONTEXT_ESTIMATE_BYTES)


def allocatable_source(gpu_model: str | None, stated: Stated = None) -> str | None:
    """Where `allocatable_bytes`' total comes from."""
    if (gib := _stated(gpu_model, stated)) is not None:
        return f"{gib:g} GiB {STATED_SOURCE}"
    device = device_entry(gpu_model)
    if device is None:
        return None
    return (
        device.total_source
        or f"no nvidia-smi total on record: the datasheet's {device.gib:g} GB read as GiB ({device.source})"
    )
