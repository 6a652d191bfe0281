"""Memory of one device per gpu_model: the capacity the certain-OOM check compares a bound with.

The figures and their sources are data (gpu_memory.yaml); a gpu_model not listed has no figure
and the check is skipped (the measurement runs as it would without it).
"""

from __future__ import annotations

import functools

import pydantic

from ado_actuators.sfttrainer.metrics import device_tables

GIB = 2**30


class DeviceMemory(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    gib: float = pydantic.Field(gt=0)
    source: str
    aliases: tuple[str, ...] = ()


@functools.cache
def memory_table() -> dict[str, DeviceMemory]:
    return device_tables.load("gpu_memory.yaml", DeviceMemory)


def device_memory_bytes(gpu_model: str | None) -> int | None:
    device = memory_table().get(gpu_model or "")
    return int(device.gib * GIB) if device else None
