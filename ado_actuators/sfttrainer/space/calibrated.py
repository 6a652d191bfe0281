"""The preview calibrated on rows measured before: each device's factor learned from its own
measured rows (space/calibration.py), and every previewed configuration re-predicted with its
95 % interval. Rows come as sfttrainer_plot reads them (ado's CSV or its store); a row without
its stored prediction is predicted again here. Every figure is still a prediction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.plan.speed.prediction import PREDICTED_PROPERTY
from ado_actuators.sfttrainer.space.calibration import (
    CPU,
    REFERENCE_DEVICE,
    Calibration,
    Interval,
    Row,
    calibrate,
)
from ado_actuators.sfttrainer.space.preview import PreviewRow, preview_entity

__all__ = ["CalibratedRow", "Calibration", "calibrated", "group_of", "measured_rows"]
MEASURED = "dataset_tokens_per_second_per_gpu"
AXES = ("batch_size", "model_max_length", "number_gpus", "gpu_model")
"""What varies inside an answer group (and the device, calibrated apart)."""
STOPPING = ("max_steps", "num_train_epochs", "stop_after_seconds", "auto_stop_")
"""Fields that say how long a run lasts, not how fast it trains: no group of their own."""


@dataclasses.dataclass(frozen=True)
class CalibratedRow:
    """A previewed configuration with its calibrated prediction (None: nothing to calibrate:
    the speed model predicts nothing for it)."""

    row: PreviewRow
    device: str
    interval: Interval | None
    rows_behind: int


def _number(value: Any) -> float | None:  # a CSV cell or a stored value
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return found if found == found and found > 0 else None


def experiment_of(identifier: str) -> str | None:
    """The catalog's experiment an ado row names ("SFTTrainer.finetune_full_benchmark-v1.0.0")."""
    name = identifier.removeprefix("SFTTrainer.")
    known = list(catalog_data().experiments)
    return next((k for k in known if name == k or name.startswith(k)), None)


def _text(value: Any) -> str:  # "8", 8 and 8.0 alike, as a CSV and an entity give them
    number = _number(value)
    return str(value) if number is None else f"{number:g}"


def group_of(experiment: str, values: Mapping[str, Any]) -> tuple[str, str]:
    """The answer group (the experiment and every field given but the GPU count, the batch
    size, the sequence length and the device) and subgroup (the group at one GPU count and
    sequence length) of a configuration's entity values; how long it runs does not count.
    Rows from another space, with other fields, fall in groups of their own: calibrated as
    rows of no group would be."""
    kept = sorted(
        (k, _text(v))
        for k, v in values.items()
        if k not in AXES and not k.startswith(STOPPING) and v not in (None, "")
    )
    group = f"{experiment} " + ", ".join(f"{k} {v}" for k, v in kept)
    gpus, length = values.get("number_gpus"), values.get("model_max_length")
    return group, f"{group}; {_text(gpus)} GPUs, {_text(length)} tokens"


def device_of_values(values: Mapping[str, Any]) -> str:
    if _number(values.get("number_gpus")) is None:
        return CPU
    return str(values.get("gpu_model") or "")


def _prior(row: PreviewRow, settings: MeasurementSettings) -> float | None:
    """The speed model's tokens/s per GPU for a previewed row; on CPUs the reference GPU's,
    whose first CPU row sets the scale."""
    if row.tokens_per_second_per_gpu is not None:
        return row.tokens_per_second_per_gpu
    if row.gpus != 0:
        return None
    proxy = {**row.entity, "number_gpus": 1, "gpu_model": REFERENCE_DEVICE}
    return preview_entity(proxy, row.experiment, settings).tokens_per_second_per_gpu


def measured_rows(
    given: Iterable[Mapping[str, Any]], settings: MeasurementSettings, fields: Sequence[str]
) -> list[Row]:
    """The valid measured rows as the calibration reads them: device, the speed model's
    prediction (stored, or predicted again from the row's `fields`), the measured figure, and
    the attention's share of the step (previewed from the row's `fields`: not stored)."""
    found = []
    for values in given:
        measured = _number(values.get(MEASURED))
        experiment = experiment_of(str(values.get("experiment_id") or ""))
        if (_number(values.get("is_valid")) or 0) < 1 or measured is None or experiment is None:
            continue
        entity = {k: values[k] for k in fields if values.get(k) not in (None, "")}
        previewed = preview_entity(entity, experiment, settings)
        predicted = _number(values.get(PREDICTED_PROPERTY)) or _prior(previewed, settings)
        if predicted is not None:
            mine = {k: values[k] for k in fields if k in values}
            group, subgroup = group_of(experiment, mine)
            device, share = device_of_values(values), previewed.attention_share or 0.0
            found.append(Row(device, predicted, measured, experiment, group, subgroup, share))
    return found


def calibrated(
    rows: Sequence[PreviewRow],
    measured: Sequence[Row],
    settings: MeasurementSettings,
    coverage: float = 0.95,
) -> tuple[list[CalibratedRow], dict[str, Calibration]]:
    """Every previewed row re-predicted on its device's calibration, and the calibrations."""
    devices = {device_of_values(r.effective or r.entity) for r in rows} | {
        r.device for r in measured
    }
    calibrations = {d: calibrate(d, [r for r in measured if r.device == d]) for d in devices}
    found = []
    for row in rows:
        device = device_of_values(row.effective or row.entity)
        prior = _prior(row, settings) if row.verdict in ("fits", "unknown") else None
        group, subgroup = group_of(row.experiment, row.entity)
        interval = (
            None
            if prior is None
            else calibrations[device].interval(
                prior, coverage, row.experiment, group, subgroup, row.attention_share or 0.0
            )
        )
        found.append(CalibratedRow(row, device, interval, calibrations[device].rows))
    return found, calibrations
