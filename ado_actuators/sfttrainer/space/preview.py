"""What a space would cost before anything is launched: each entity of a space document as the
engine would answer it up to the launch (configuration rules, the certain bound, the predicted
peak), its predicted step time and throughput, and its bill under its stop method. No Ray, no
ado, no GPU, no weights: only each model's config.json, from its directory, hf_home's cache, the
shipped shapes or, online, the hub (catalog/model_shapes.py).
"""

from __future__ import annotations

import dataclasses
import itertools
from importlib import metadata
from typing import Any

import pydantic

from ado_actuators.sfttrainer.catalog.entity import (
    FIELDS,
    EntityValues,
    entity_values,
    unknown_fields,
)
from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition, catalog_data
from ado_actuators.sfttrainer.catalog.names import did_you_mean
from ado_actuators.sfttrainer.contract.outcomes import Invalid
from ado_actuators.sfttrainer.contract.units import GIB
from ado_actuators.sfttrainer.engine.measurement import Resolved, resolve
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.plan.memory.verdict import MemoryAssessment, assess, fewest_gpus
from ado_actuators.sfttrainer.plan.speed.parts import StepParts
from ado_actuators.sfttrainer.plan.speed.prediction import SpeedPrediction, predict_speed
from ado_actuators.sfttrainer.space.bill import TrainingTime, start_seconds, training_time

LAUNCHED = ("fits", "unknown", "predicted OOM")
"""Verdicts launched under the default settings (skip_predicted_oom false)."""


class SpaceError(ValueError):
    """The space document cannot be read: the message names the part and the fix."""


@dataclasses.dataclass(frozen=True)
class PreviewRow:
    """One configuration of the space. Every figure but the device's memory is predicted."""

    experiment: str
    entity: dict[str, Any]  # the space's values of this point
    verdict: str  # invalid | certain OOM | predicted OOM | fits | unknown | failed
    why: str = ""
    why_in_brief: str = ""  # the why in a few words, for a terminal line; empty: the why is short
    shape_source: str | None = None  # where config.json came from (catalog/model_shapes.py)
    shape_where: str | None = None
    gpus: int = 0
    bound_gib: float | None = None
    predicted_gib: float | None = None
    device_gib: float | None = None
    need_gib: float | None = None  # the predicted peak and the allocator's headroom over it
    allocatable_gib: float | None = None  # what CUDA can allocate: the predicted verdict's limit
    fewest_gpus: int | None = None
    tokens_per_second_per_gpu: float | None = None
    step_seconds: float | None = None
    attention_share: float | None = None  # of the predicted step, in the attention kernel
    step_parts: StepParts | None = None  # the predicted step's compute and collectives
    speed_notes: tuple[str, ...] = ()
    training_seconds: float | None = None
    training_how: str = ""
    start_seconds: float | None = None
    repeats: int = 1
    effective: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Every entity field as the measurement would run it: the space's values, the
    experiment's fixed values and the defaults."""

    @property
    def launched(self) -> bool:
        return self.verdict in LAUNCHED

    @property
    def gpu_hours(self) -> float | None:
        """Training GPU-hours if launched: a predicted OOM's until its first step fails."""
        if not self.launched:
            return None
        if self.verdict == "predicted OOM":
            return self.oom_gpu_hours
        if self.training_seconds is None:
            return None
        return self.gpus * self.training_seconds / 3600

    @property
    def oom_gpu_hours(self) -> float | None:
        """What launching a predicted OOM costs before it fails: its start and one step."""
        if self.start_seconds is None or self.step_seconds is None:
            return None
        return self.gpus * self.repeats * (self.start_seconds + self.step_seconds) / 3600

    @property
    def full_gpu_hours(self) -> float | None:
        """Training GPU-hours as if it ran to its stop method's end (fits or not)."""
        if self.verdict in ("invalid", "failed") or self.training_seconds is None:
            return None
        return self.gpus * self.training_seconds / 3600

    @property
    def load_gpu_hours(self) -> float | None:
        if not self.launched or self.start_seconds is None:
            return None
        return self.gpus * self.repeats * self.start_seconds / 3600


def _values(domain: dict[str, Any], name: str) -> list[Any]:
    if "values" in domain and domain["values"] is not None:
        return list(domain["values"])
    if "domainRange" in domain:
        low, high = domain["domainRange"]
        return list(range(int(low), int(high), int(domain.get("interval") or 1)))
    raise SpaceError(f"entitySpace {name}: a propertyDomain needs values or a domainRange")


def _known_field(name: Any, where: str, experiment: str) -> str:
    """`name` if it is an entity field, else the error naming it, its likely fix and the
    command that lists the fields (catalog/entity.unknown_fields, as the actuator says it)."""
    if name not in FIELDS:
        raise SpaceError(unknown_fields([name], where, experiment))
    return str(name)


def _dimensions(document: dict[str, Any], experiment: str) -> list[tuple[str, list[Any]]]:
    dimensions = []
    for item in document["entitySpace"]:
        found = item.get("identifier") if isinstance(item, dict) else None
        name = _known_field(found, "entitySpace", experiment)
        dimensions.append((name, _values(item.get("propertyDomain") or {}, name)))
    return dimensions


def _experiment_ids(document: dict[str, Any]) -> list[str]:
    experiments = document.get("experiments") or []
    if not experiments:
        raise SpaceError("the space file lists no experiments")
    catalog = catalog_data()
    identifiers = []
    for experiment in experiments:
        identifier = experiment.get("experimentIdentifier", "")
        try:
            catalog.experiment(identifier)
        except KeyError:
            hint = did_you_mean(identifier, catalog.experiments)
            raise SpaceError(f"unknown experiment {identifier!r}{hint}") from None
        identifiers.append(identifier)
    return identifiers


def _fixed(experiment: dict[str, Any], identifier: str) -> dict[str, Any]:
    """An experiment's parameterization, each property an entity field."""
    where = f"the parameterization of {identifier}"
    return {
        _known_field(p["property"]["identifier"], where, identifier): p["value"]
        for p in experiment.get("parameterization") or []
    }


def entities(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(experiment id, entity values with the experiment's parameterization) per point."""
    if not isinstance(document, dict) or "entitySpace" not in document:
        raise SpaceError(
            "the space file has no entitySpace: give the file `ado create space -f` takes"
        )
    identifiers = _experiment_ids(document)
    dimensions = _dimensions(document, identifiers[0])
    names = [n for n, _ in dimensions]
    found = []
    for experiment, identifier in zip(document["experiments"], identifiers, strict=True):
        fixed = _fixed(experiment, identifier)
        for point in itertools.product(*(values for _, values in dimensions)):
            found.append((identifier, {**dict(zip(names, point, strict=True)), **fixed}))
    return found


def _checkpoint_bytes(memory: MemoryAssessment) -> float | None:
    """The weights a node reads before the first step (the bound's weights part, per device
    times its shards, is the whole checkpoint)."""
    if memory.bound is None or "weights" not in memory.bound.parts:
        return None
    return memory.bound.parts["weights"] * memory.bound.shards


def _priced(
    row: PreviewRow,
    values: EntityValues,
    memory: MemoryAssessment,
    speed: SpeedPrediction,
    repeats: int,
) -> PreviewRow:
    step = speed.step_seconds
    bill: TrainingTime = training_time(values, step, repeats)
    checkpoint = _checkpoint_bytes(memory)
    return dataclasses.replace(
        row,
        tokens_per_second_per_gpu=speed.tokens_per_second_per_gpu,
        step_seconds=step,
        attention_share=speed.attention_share,
        step_parts=speed.step_parts,
        speed_notes=speed.notes or ((speed.skipped,) if speed.skipped else ()),
        training_seconds=bill.seconds,
        training_how=bill.how,
        start_seconds=start_seconds(checkpoint) if checkpoint is not None else None,
        repeats=repeats,
    )


def _as_given(row: PreviewRow, definition: ExperimentDefinition) -> PreviewRow:
    """A configuration the engine refused, with its GPUs and values as the space gives them
    (the table's GPU columns), where they can be read at all."""
    try:
        values = entity_values(row.entity, overrides=definition.default_overrides())
    except pydantic.ValidationError:
        return row
    return dataclasses.replace(row, gpus=max(values.number_gpus, 0), effective=values.model_dump())


def preview_entity(
    values_in: dict[str, Any], experiment_id: str, settings: MeasurementSettings
) -> PreviewRow:
    definition = catalog_data().experiment(experiment_id)
    resolved = resolve(values_in, definition, settings.model_map, settings.hf_home, hub=True)
    row = PreviewRow(experiment=experiment_id, entity=values_in, verdict="unknown")
    if not isinstance(resolved, Resolved):
        verdict = "invalid" if isinstance(resolved, Invalid) else "failed"
        return dataclasses.replace(_as_given(row, definition), verdict=verdict, why=resolved.reason)
    values, training, found = resolved.values, resolved.training, resolved.found
    row = dataclasses.replace(row, gpus=max(values.number_gpus, 0), effective=values.model_dump())
    if found is None:
        error = resolved.config_error
        return dataclasses.replace(row, why=str(error), why_in_brief=error.brief if error else "")
    # an architecture the formula does not count is traced once per shape, kept under hf_home
    stated = settings.gpu_memory_gib
    memory = assess(training, hf_home=settings.hf_home, enabled=True, stated=stated)
    verdict, why = memory.verdict()
    fewest = None
    if verdict in ("certain OOM", "predicted OOM"):
        fewest = fewest_gpus(training, hf_home=settings.hf_home, stated=stated)
    row = dataclasses.replace(
        row,
        verdict=verdict,
        why=why,
        shape_source=found.source if found.checked else f"{found.source} (unchecked)",
        shape_where=found.where,
        bound_gib=memory.bound.gib if memory.bound else None,
        predicted_gib=memory.prediction.gib if memory.prediction else None,
        device_gib=memory.device_bytes / GIB if memory.device_bytes else None,
        need_gib=memory.predicted_need / GIB if memory.predicted_need else None,
        allocatable_gib=memory.allocatable / GIB if memory.allocatable else None,
        fewest_gpus=fewest,
    )
    speed = predict_speed(
        training,
        settings.inter_node_gbps,
        settings.intra_node_gbps,
        memory.paged_out_bytes,
        memory.need_share,
    )
    return _priced(row, values, memory, speed, definition.repeats)


def sorted_rows(rows: list[PreviewRow]) -> list[PreviewRow]:
    """Grouped by experiment and model (in the space's order), fastest predicted first."""
    groups: dict[tuple[str, str], list[PreviewRow]] = {}
    for row in rows:
        groups.setdefault((row.experiment, str(row.entity.get("model_name"))), []).append(row)
    return [
        row
        for group in groups.values()
        for row in sorted(group, key=lambda r: -(r.tokens_per_second_per_gpu or -1.0))
    ]


def installed_fms_hf_tuning() -> str | None:
    try:
        return metadata.version("fms-hf-tuning")
    except metadata.PackageNotFoundError:
        return None
