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
from ado_actuators.sfttrainer.contract.properties import THROUGHPUT_PER_GPU, THROUGHPUT_PREDICTED
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.space import stored
from ado_actuators.sfttrainer.space.calibration import (
    REFERENCE_DEVICE,
    Calibration,
    Row,
    calibrate,
)
from ado_actuators.sfttrainer.space.groups import device_of, group_of, speed_fields, subgroup_of
from ado_actuators.sfttrainer.space.preview import PreviewRow, preview_entity
from ado_actuators.sfttrainer.stats.interval import COVERAGE, Interval

__all__ = ["CalibratedRow", "Calibration", "calibrated", "groups_of", "measured_rows"]


@dataclasses.dataclass(frozen=True)
class CalibratedRow:
    """A previewed configuration with its calibrated prediction (None: nothing to calibrate:
    the speed model predicts nothing for it)."""

    row: PreviewRow
    device: str
    interval: Interval | None
    rows_behind: int


def _number(value: Any) -> float | None:
    """A stored figure where it is a positive number (a speed, a verdict of 1)."""
    found = stored.number(value)
    return found if found is not None and found > 0 else None


def experiment_of(identifier: str) -> str | None:
    """The catalog's experiment an ado row names ("SFTTrainer.finetune_full_benchmark-v1.0.0")."""
    name = identifier.removeprefix("SFTTrainer.")
    known = list(catalog_data().experiments)
    return next((k for k in known if name == k or name.startswith(k)), None)


def groups_of(experiment: str, values: Mapping[str, Any]) -> tuple[str, str]:
    """The group and subgroup (space/groups.py) a device's calibration files a configuration's
    entity values under, grouped by every field they give (groups.speed_fields). Rows from
    another space, with other fields, fall in groups of their own: calibrated as rows of no
    group would be."""
    group = group_of(experiment, values, speed_fields(values))
    return group, subgroup_of(group, values)


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
    the attention's share of the step and its split into compute and collectives (previewed
    from the row's `fields`: not stored)."""
    found = []
    for values in given:
        measured = _number(values.get(THROUGHPUT_PER_GPU))
        experiment = experiment_of(str(values.get("experiment_id") or ""))
        if (_number(values.get("is_valid")) or 0) < 1 or measured is None or experiment is None:
            continue
        entity = {k: values[k] for k in fields if values.get(k) not in (None, "")}
        previewed = preview_entity(entity, experiment, settings)
        predicted = _number(values.get(THROUGHPUT_PREDICTED)) or _prior(previewed, settings)
        if predicted is not None:
            mine = {k: values[k] for k in fields if k in values}
            group, subgroup = groups_of(experiment, mine)
            device, share = device_of(values), previewed.attention_share or 0.0
            found.append(
                Row(
                    device,
                    predicted,
                    measured,
                    experiment,
                    group,
                    subgroup,
                    share,
                    previewed.step_parts,
                )
            )
    return found


def calibrated(
    rows: Sequence[PreviewRow],
    measured: Sequence[Row],
    settings: MeasurementSettings,
    coverage: float = COVERAGE,
) -> tuple[list[CalibratedRow], dict[str, Calibration]]:
    """Every previewed row re-predicted on its device's calibration, and the calibrations."""
    devices = {device_of(r.effective or r.entity) for r in rows} | {r.device for r in measured}
    calibrations = {d: calibrate(d, [r for r in measured if r.device == d]) for d in devices}
    found = []
    for row in rows:
        device = device_of(row.effective or row.entity)
        prior = _prior(row, settings) if row.verdict in ("fits", "unknown") else None
        group, subgroup = groups_of(row.experiment, row.entity)
        interval = (
            None
            if prior is None
            else calibrations[device].interval(
                prior,
                coverage,
                row.experiment,
                group,
                subgroup,
                row.attention_share or 0.0,
                row.step_parts,
            )
        )
        found.append(CalibratedRow(row, device, interval, calibrations[device].rows))
    return found, calibrations
