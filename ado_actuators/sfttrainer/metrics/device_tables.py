"""The per-gpu_model tables shipped as data beside this module (gpu_peaks.yaml,
gpu_memory.yaml): one entry per device, with the other spellings its node labels use."""

from __future__ import annotations

from importlib import resources
from typing import TypeVar

import pydantic
import yaml

Entry = TypeVar("Entry", bound=pydantic.BaseModel)


def load(filename: str, entry: type[Entry]) -> dict[str, Entry]:
    """gpu_model (and each of its `aliases`) -> its entry, validated by `entry`."""
    raw = yaml.safe_load(
        resources.files("ado_actuators.sfttrainer.metrics").joinpath(filename).read_text()
    )
    table = {name: entry(**fields) for name, fields in raw.items()}
    for device in list(table.values()):
        for alias in getattr(device, "aliases", ()):
            table[alias] = device
    return table
