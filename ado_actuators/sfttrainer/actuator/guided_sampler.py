"""The guided sampler, for ado's `random_walk`: measure only the configurations that can still be
the fastest of their answer group, in order of their predicted upper bound.

    samplerConfig:
      module:
        moduleName: ado_actuators.sfttrainer.actuator.guided_sampler
        moduleClass: GuidedSampler
      parameters: {coverage: 0.95, gpu_hour_budget: 40, measure_ties: true}

Each time the walk asks for a configuration, the sampler reads what the space has measured so
far (through the remote discovery space on a Ray cluster), recalibrates each device on its rows
(space/calibration.py) and decides (space/guided_rule.py); it writes the configurations it leaves
unmeasured, with their reasons, where sfttrainer_plot reads them (contract/guided.py), and deals
the configuration it sends its group's measured fastest, which the measurement races
(ledger/race_cards.py, under the actuator parameters' data_directory). It keeps nothing else:
a killed operation run again continues from what was stored, and measures nothing twice. Give
the walk `batchSize: 1` for the strict order; a larger batch decides with the measurements that
have finished.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Generator, Mapping
from typing import Any

import pydantic
from ado.core.discoveryspace.samplers import BaseSampler
from ado.core.discoveryspace.space import DiscoverySpace
from ado.modules.operators.discovery_space_manager import DiscoverySpaceManager
from ado.schema.entity import Entity

from ado_actuators.sfttrainer.contract.guided import write_record
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.space.guided_walk import (
    Decision,
    Point,
    Result,
    Settings,
    Walk,
    point_key,
    result_of,
)

log = logging.getLogger(__name__)


class GuidedSamplerParameters(pydantic.BaseModel):
    """The `parameters:` of the guided sampler's samplerConfig."""

    model_config = pydantic.ConfigDict(extra="forbid")

    coverage: float = pydantic.Field(
        0.95, ge=0.5, lt=1.0, description="The coverage of the intervals the rule compares"
    )
    gpu_hour_budget: float | None = pydantic.Field(
        None, gt=0, description="GPU-hours the walk may spend; none: no limit"
    )
    measure_ties: bool = pydantic.Field(
        True,
        description="Also measure configurations predicted slower than the measured fastest "
        "whose interval still reaches it (its possible ties)",
    )
    actuator_parameters: dict[str, Any] = pydantic.Field(
        default_factory=dict,
        description="The actuator configuration's parameters (hf_home, model_map, "
        "data_directory): where the models' config.json files are, for the predictions, and "
        "where the measurements read what each races (race_cards_path)",
    )
    record_directory: str | None = pydantic.Field(
        None, description="Where the record of unmeasured configurations goes"
    )


def _points(space: DiscoverySpace) -> list[Point]:
    entity_space = space.entitySpace
    names = [c.identifier for c in entity_space.constitutiveProperties]
    grid = [dict(zip(names, p, strict=True)) for p in entity_space.sequential_point_iterator()]
    found = []
    for experiment in space.measurementSpace.experiments:
        reference = experiment.reference
        fixed = {v.property.identifier: v.value for v in reference.parameterization or []}
        found += [(reference.experimentIdentifier, point, fixed) for point in grid]
    return found


def _results(space: DiscoverySpace, entities: list[Entity]) -> dict[str, Result]:
    """What the space has measured, per configuration key."""
    found: dict[str, Result] = {}
    for entity in entities:
        point = {v.property.identifier: v.value for v in entity.constitutive_property_values}
        for experiment in space.measurementSpace.experiments:
            values = entity.propertyValuesFromExperimentReference(experiment.reference)
            if not values:
                continue
            properties = {v.property.targetProperty.identifier: v.value for v in values}
            gpus = int(point.get("number_gpus") or 0)
            key = point_key(experiment.reference.experimentIdentifier, point)
            found[key] = result_of(key, properties, gpus)
    return found


class GuidedSampler(BaseSampler):
    """ado's sampler interface (ado.core.discoveryspace.samplers.BaseSampler) over space/guided_walk.py."""

    def __init__(self, parameters: GuidedSamplerParameters | None = None) -> None:
        self.parameters = parameters or GuidedSamplerParameters()
        self.settings = Settings(
            coverage=self.parameters.coverage,
            budget_gpu_hours=self.parameters.gpu_hour_budget,
            measure_ties=self.parameters.measure_ties,
        )
        self.measurement = MeasurementSettings.model_validate(self.parameters.actuator_parameters)

    @classmethod
    def parameters_model(cls) -> type[pydantic.BaseModel] | None:
        return GuidedSamplerParameters

    @classmethod
    def samplerCompatibleWithDiscoverySpaceRemote(
        cls, remoteDiscoverySpace: DiscoverySpaceManager
    ) -> bool:
        return True

    def walk(self, space: DiscoverySpace) -> Walk:
        return Walk.of(space.uri, _points(space), self.measurement, self.settings)

    def _next(self, walk: Walk, results: Mapping[str, Result], yielded: set[str]) -> Point | None:
        decision = walk.decide(results, yielded - set(results), yielded)
        write_record(walk.record(decision, results), self.parameters.record_directory)
        if decision.next is None:
            return None
        yielded.add(decision.next.key)
        self._deal(walk, decision)
        return walk.points[decision.next.key]

    def _deal(self, walk: Walk, decision: Decision) -> None:
        """The card the measurement of the next configuration reads when it starts (ado sends
        it after this); without one it is measured whole, so a failure only costs the saving."""
        if problem := walk.deal(decision, self.measurement.race_cards_file()):
            log.warning(
                "measuring without racing: %s; give the sampler's actuator_parameters the "
                "actuator configuration's data_directory",
                problem,
            )

    def entityIterator(
        self, discoverySpace: DiscoverySpace, batchsize: int = 1
    ) -> Generator[list[Entity], None, None]:
        walk, yielded = self.walk(discoverySpace), set[str]()
        while True:
            found = _results(discoverySpace, discoverySpace.matchingEntities())
            point = self._next(walk, found, yielded)
            if point is None:
                return
            yield [discoverySpace.entity_for_point(point[1])]

    async def remoteEntityIterator(
        self, remoteDiscoverySpace: DiscoverySpaceManager, batchsize: int = 1
    ) -> AsyncGenerator[list[Entity], None]:
        manager: Any = remoteDiscoverySpace  # a Ray actor handle
        space: DiscoverySpace = await manager.discoverySpace.remote()
        walk = self.walk(space)
        return self._remote(manager, space, walk)

    async def _remote(
        self, manager: Any, space: DiscoverySpace, walk: Walk
    ) -> AsyncGenerator[list[Entity], None]:
        yielded: set[str] = set()
        while True:
            stored = await manager.matchingEntitiesInSource.remote()
            point = self._next(walk, _results(space, stored), yielded)
            if point is None:
                return
            yield [await manager.entity_for_point.remote(point=point[1])]
