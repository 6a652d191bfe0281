"""The per-gpu_model tables shipped as data beside this module (gpu_peaks.yaml,
gpu_memory.yaml): one entry per device, with the other spellings its node labels use.

The environment variable ADO_SFTTRAINER_DEVICES names a YAML file of gpu_peaks.yaml entries
(the device check's device-entry.yaml, benchmarks/gpu/rates.py) read over the shipped table:
an entry there replaces the shipped one of the same gpu_model."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import TypeVar

import pydantic
import yaml

Entry = TypeVar("Entry", bound=pydantic.BaseModel)
OVERRIDE = "ADO_SFTTRAINER_DEVICES"
OVERRIDDEN = ("gpu_peaks.yaml",)


def load(filename: str, entry: type[Entry]) -> dict[str, Entry]:
    """gpu_model (and each of its `aliases`) -> its entry, validated by `entry`."""
    raw = yaml.safe_load(
        resources.files("ado_actuators.sfttrainer.metrics").joinpath(filename).read_text()
    )
    measured = os.environ.get(OVERRIDE)
    if measured and filename in OVERRIDDEN:
        raw |= yaml.safe_load(Path(measured).read_text()) or {}
    table = {name: entry(**fields) for name, fields in raw.items()}
    for device in list(table.values()):
        for alias in getattr(device, "aliases", ()):
            table[alias] = device
    return table
