"""Memory of one device per gpu_model: the capacity the certain-OOM check compares a bound with.

The figures and their sources are data (gpu_memory.yaml); a gpu_model not listed has no figure
and the check is skipped (the measurement runs as it would without it).
"""

from __future__ import annotations

import functools
from importlib import resources

import pydantic
import yaml

GIB = 2**30


class DeviceMemory(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    gib: float = pydantic.Field(gt=0)
    source: str
    aliases: tuple[str, ...] = ()


@functools.cache
def memory_table() -> dict[str, DeviceMemory]:
    raw = yaml.safe_load(
        resources.files("ado_actuators.sfttrainer.metrics").joinpath("gpu_memory.yaml").read_text()
    )
    table = {name: DeviceMemory(**entry) for name, entry in raw.items()}
    for device in list(table.values()):
        for alias in device.aliases:
            table[alias] = device
    return table


def device_memory_bytes(gpu_model: str | None) -> int | None:
    device = memory_table().get(gpu_model or "")
    return int(device.gib * GIB) if device else None
