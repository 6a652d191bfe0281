"""Answer groups, declared once: the configurations whose fastest the answers name, the guided
walk races and the calibration fits a factor for. A group is an experiment and every field
that sets it apart but the three axes that vary inside it (sfttrainer_plot draws them as the
x axis, its lines and its rows of panels) and the fields that say how long a run lasts; a
subgroup is a group at one GPU count and sequence length, its configurations differing by
their batch size alone. The device a row ran on is read here too. report/table.py draws its
panels on the same axes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ado_actuators.sfttrainer.contract.guided import AXES as AXES  # what varies in a group

DEVICE = "gpu_model"
DURATION = ("max_steps", "num_train_epochs", "stop_after_seconds", "auto_stop_")
"""Prefixes of the fields that say how long a run lasts, not how fast it trains."""
CPU = "CPU"
"""The device of rows trained on CPUs (number_gpus 0)."""


def text(value: Any) -> str:
    """A field's value as a group names it: 8, 8.0 and "8" alike, as an entity, ado and a CSV
    give them."""
    if isinstance(value, bool) or value is None:
        return str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if number != number or number in (float("inf"), float("-inf")):
        return str(value)
    return str(int(number)) if number.is_integer() else str(number)


def varying(points: Iterable[Mapping[str, Any]]) -> list[str]:
    """The fields that make a space's groups: every field but the axes that takes more than one
    value among `points` (the device and how long a run lasts included: the answers name a
    fastest per device, and per stop method where the space varies it)."""
    taken: dict[str, set[str]] = {}
    for point in points:
        for name, value in point.items():
            taken.setdefault(name, set()).add(text(value))
    return sorted(n for n, values in taken.items() if n not in AXES and len(values) > 1)


def speed_fields(values: Mapping[str, Any]) -> list[str]:
    """The fields a device's calibration groups its rows by: every field given but the axes,
    the device (calibrated apart) and how long a run lasts, so rows measured in another space
    or under another stop method still share a group with the configurations they match."""
    return sorted(
        n
        for n in values
        if n not in AXES
        and n != DEVICE
        and not n.startswith(DURATION)
        and values[n] not in (None, "")
    )


def group_of(experiment: str, values: Mapping[str, Any], names: Iterable[str]) -> str:
    """The answer group of a configuration: its experiment (without its version), then each of
    `names` it gives."""
    given = [n for n in names if values.get(n) not in (None, "")]
    return ", ".join([experiment.split("-v")[0]] + [f"{n} {text(values[n])}" for n in given])


def subgroup_of(group: str, values: Mapping[str, Any]) -> str:
    """The configurations of a group that differ by their batch size alone."""
    gpus, length = text(values.get("number_gpus")), text(values.get("model_max_length"))
    return f"{group}, {gpus} GPUs, {length} tokens"


def device_of(values: Mapping[str, Any]) -> str:
    """The device a configuration trains on: its GPU model, or CPU without a GPU."""
    try:
        gpus = float(values.get("number_gpus") or 0)
    except (TypeError, ValueError):
        gpus = 0.0
    return str(values.get(DEVICE) or "") if gpus > 0 else CPU
