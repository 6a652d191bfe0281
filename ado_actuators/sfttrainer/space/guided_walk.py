"""The guided walk without ado: a space's configurations as the preview predicts them, turned into
space/guided_rule.py's candidates; stored measurements turned into its results; each decision
turned into the record sfttrainer_plot prints (contract/guided.py). The sampler ado loads
(actuator/guided_sampler.py) and the simulation (benchmarks/guided_search.py) drive it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ado_actuators.sfttrainer.contract import loss
from ado_actuators.sfttrainer.contract.guided import GuidedRecord, Unmeasured
from ado_actuators.sfttrainer.contract.properties import THROUGHPUT, THROUGHPUT_CI95
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.space import stored
from ado_actuators.sfttrainer.space.calibration import REFERENCE_DEVICE
from ado_actuators.sfttrainer.space.groups import device_of, group_of, subgroup_of, varying
from ado_actuators.sfttrainer.space.guided_rule import Candidate, Decision, Result, Settings, decide
from ado_actuators.sfttrainer.space.preview import PreviewRow, preview_entity

FITS = ("fits", "unknown")
__all__ = ["Candidate", "Decision", "Point", "Result", "Settings", "Walk", "candidates"]


def canonical(value: Any) -> Any:  # an entity value as ado or YAML gives it
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def point_key(experiment: str, point: Mapping[str, Any]) -> str:
    """One configuration's key: its experiment and its entity values, whatever their types."""
    values = {k: canonical(v) for k, v in sorted(point.items())}
    return f"{experiment} {json.dumps(values, sort_keys=True, default=str)}"


def _predicted(row: PreviewRow, settings: MeasurementSettings) -> float | None:
    """The whole run's predicted tokens/s. On CPUs, the reference GPU's prediction of one
    device: it says which configuration is faster; the CPU's first row sets the scale."""
    if row.tokens_per_second_per_gpu is not None:
        return row.tokens_per_second_per_gpu * max(row.gpus, 1)
    if row.gpus != 0 or row.verdict not in FITS:
        return None
    proxy = {**row.entity, "number_gpus": 1, "gpu_model": REFERENCE_DEVICE}
    return preview_entity(proxy, row.experiment, settings).tokens_per_second_per_gpu


def _skip(row: PreviewRow) -> str:
    if row.verdict in FITS:
        return ""
    return f"{row.verdict}: {row.why_in_brief or row.why}".strip().rstrip(":")


Point = tuple[str, dict[str, Any], dict[str, Any]]
"""A configuration of a space: its experiment, its point of the entity space, and the
experiment's parameterization."""


def candidates(points: Sequence[Point], settings: MeasurementSettings) -> list[Candidate]:
    """The space's configurations as the walk sees them before measuring."""
    names = varying([p for _, p, _ in points])
    found = []
    for experiment, point, fixed in points:
        row = preview_entity({**point, **fixed}, experiment, settings)
        group = group_of(experiment, point, names)
        found.append(
            Candidate(
                key=point_key(experiment, point),
                group=group,
                device=device_of(row.effective or row.entity),
                predicted=_predicted(row, settings),
                gpu_hours=row.gpu_hours or 0.0,
                skip=_skip(row),
                method=experiment,
                subgroup=subgroup_of(group, point),
                attention_share=row.attention_share or 0.0,
            )
        )
    return found


def result_of(key: str, properties: Mapping[str, Any], gpus: int) -> Result:
    """A stored measurement (its target properties by name) as the walk reads it."""

    def number(name: str) -> float | None:
        return stored.number(properties.get(name))

    valid = (number("is_valid") or 0.0) >= 1
    seconds = number("measurement_seconds")
    return Result(
        key=key,
        valid=valid,
        speed=number(THROUGHPUT) if valid else None,
        ci95_percent=number(THROUGHPUT_CI95),
        gpu_hours=None if seconds is None else seconds * gpus / 3600,
        trained=number(loss.FINITE) != 0 and number(loss.ROSE) != 1,  # as report/loss.py reads
    )


@dataclasses.dataclass
class Walk:
    """A guided walk over one space: its candidates, and the points to measure them by."""

    space: str
    points: dict[str, Point]
    candidates: list[Candidate]
    settings: Settings = dataclasses.field(default_factory=Settings)

    @classmethod
    def of(
        cls,
        space: str,
        points: Sequence[Point],
        measurement: MeasurementSettings,
        settings: Settings,
    ) -> Walk:
        keyed = {point_key(e, p): (e, p, f) for e, p, f in points}
        return cls(space, keyed, candidates(points, measurement), settings)

    def decide(self, results: Mapping[str, Result], pending: set[str]) -> Decision:
        return decide(self.candidates, results, pending, self.settings)

    def record(self, decision: Decision, results: Mapping[str, Result]) -> GuidedRecord:
        by_key = {c.key: c for c in self.candidates}
        unmeasured = tuple(
            Unmeasured(
                experiment=self.points[key][0],
                entity=self.points[key][1],
                group=by_key[key].group,
                reason=reason,
                predicted_gpu_hours=0.0 if by_key[key].skip else by_key[key].gpu_hours,
                skipped=bool(by_key[key].skip),
            )
            for key, reason in decision.unmeasured.items()
        )
        spent = sum(r.gpu_hours or by_key[k].gpu_hours for k, r in results.items() if k in by_key)
        return GuidedRecord(
            space=self.space,
            coverage=self.settings.coverage,
            budget_gpu_hours=self.settings.budget_gpu_hours,
            measure_ties=self.settings.measure_ties,
            measured=sum(k in by_key for k in results),
            spent_gpu_hours=spent,
            unmeasured=unmeasured,
            finished=decision.next is None,
        )
