"""The guided walk without ado: a space's configurations as the preview predicts them, turned into
space/guided_rule.py's candidates; stored measurements turned into its results; each decision
turned into the record sfttrainer_plot prints (contract/guided.py). The sampler ado loads
(actuator/guided_sampler.py) and the simulation (benchmarks/guided_search.py) drive it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.contract import loss
from ado_actuators.sfttrainer.contract.guided import GuidedRecord, Unmeasured, point_key
from ado_actuators.sfttrainer.contract.properties import RACED_BEHIND, THROUGHPUT, THROUGHPUT_CI95
from ado_actuators.sfttrainer.contract.trainer_io import RaceAgainst
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.ledger.lines import RecordUnavailable
from ado_actuators.sfttrainer.ledger.race_cards import RaceCards
from ado_actuators.sfttrainer.space import stored
from ado_actuators.sfttrainer.space.calibration import REFERENCE_DEVICE
from ado_actuators.sfttrainer.space.groups import AXES, device_of, group_of, subgroup_of, varying
from ado_actuators.sfttrainer.space.guided_rule import Candidate, Decision, Result, Settings, decide
from ado_actuators.sfttrainer.space.preview import PreviewRow, preview_entity

FITS = ("fits", "unknown")
__all__ = [
    "Candidate",
    "Decision",
    "Point",
    "Result",
    "Settings",
    "Walk",
    "candidates",
    "point_key",
]


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
                parts=row.step_parts,
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
        raced=number(RACED_BEHIND) is not None,
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

    def decide(
        self, results: Mapping[str, Result], pending: set[str], sent: Iterable[str] = ()
    ) -> Decision:
        return decide(self.candidates, results, pending, self.settings, sent)

    def deal(self, decision: Decision, cards: Path) -> str | None:
        """Deals `decision.next` its race card in the record at `cards` (ledger/race_cards.py):
        what its measurement races, or that it races nothing; returns why it could not."""
        if decision.next is None:
            return None
        try:
            RaceCards(cards).deal(decision.next.key, self.race_card(decision))
        except RecordUnavailable as error:
            return str(error)
        return None

    def race_card(self, decision: Decision) -> RaceAgainst | None:
        """What the measurement of `decision.next` races: its group's measured fastest, named
        by the values that set it apart (its batch size, length and GPUs); None: none yet."""
        fastest = decision.incumbent
        if decision.next is None or fastest is None or not fastest.speed:
            return None
        point = self.points[fastest.key][1]
        name = ", ".join(f"{axis} {point[axis]}" for axis in AXES if axis in point)
        return RaceAgainst(
            speed=fastest.speed,
            ci95_percent=fastest.ci95_percent,
            incumbent=name or fastest.key,
            measure_ties=self.settings.measure_ties,
        )

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
