"""Outcomes -> ado measurement results, for every entity of a request."""

from __future__ import annotations

import logging
from typing import Any

from ado.schema.result import InvalidMeasurementResult, ValidMeasurementResult
from ado.utilities.support import compute_measurement_status, observed_property_values_from_dict

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog.entity import (
    fields_command,
    misspelt_fields,
    unknown_fields,
)
from ado_actuators.sfttrainer.contract.guided import point_key
from ado_actuators.sfttrainer.contract.outcomes import (
    INVALID_REASON,
    Failed,
    Invalid,
    MeasurementOutcome,
)
from ado_actuators.sfttrainer.engine.measurement import measure

log = logging.getLogger(__name__)


def _json_safe(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if v is not None}


# Any: ado-core is untyped (no py.typed)
def to_result(outcome: MeasurementOutcome, entity_id: str, experiment: Any) -> Any:
    if isinstance(outcome, Failed):
        return InvalidMeasurementResult(
            entityIdentifier=entity_id,
            experimentReference=experiment.reference,
            reason=outcome.reason,
        )
    if isinstance(outcome, Invalid):
        properties = {**outcome.properties, "is_valid": 0}
        metadata = {**outcome.metadata, INVALID_REASON: outcome.reason}
    else:
        properties, metadata = outcome.properties, outcome.metadata
    # ado's helper writes -1 for every target it is not given; properties the spec says are
    # omitted (e.g. train_tokens_per_second with stop_after_seconds) must stay absent.
    values = [
        v
        for v in observed_property_values_from_dict(properties, experiment)
        if v.property.targetProperty.identifier in properties
    ]
    return ValidMeasurementResult(
        entityIdentifier=entity_id, measurements=values, metadata=_json_safe(metadata)
    )


def announce(outcome: MeasurementOutcome, entity_id: str, experiment_id: str) -> None:
    """One line per unsuccessful measurement on the operation's own output.

    This runs in a Ray task: Ray forwards its stdout to the `ado create operation` console,
    where otherwise only "Final status: Failed" shows (the reason is in `ado show trace`).
    """
    if isinstance(outcome, Failed):
        verdict = "Failed"
    elif isinstance(outcome, Invalid):
        verdict = "is_valid=0"
    else:
        return
    first = (outcome.reason.splitlines() or [""])[0][:1000]
    print(f"SFTTrainer {experiment_id} {entity_id}: {verdict}: {first}", flush=True)


# Any: ado-core is untyped (no py.typed)
def _result(outcome: MeasurementOutcome, entity_id: str, experiment: Any) -> Any:
    try:
        return to_result(outcome, entity_id, experiment)
    except Exception as error:
        log.exception("cannot convert the outcome for %s", entity_id)
        failed = Failed(f"internal error while converting the result for ado: {error!r}")
        announce(failed, entity_id, experiment.identifier)
        return to_result(failed, entity_id, experiment)


# Any: ado-core is untyped (no py.typed)
def measure_request(request: Any, *, experiment: Any, params: SFTTrainerParameters) -> Any:
    """Measure each entity of `request` in turn and complete it (runs in a Ray task)."""
    results = []
    for entity in request.entities:
        values = entity_inputs(entity, experiment)
        if isinstance(values, Failed):
            outcome: MeasurementOutcome = values
        else:
            key = configuration_key(entity, experiment)
            outcome = measure(
                values, experiment.identifier, params, label=entity.identifier, race_key=key
            )
        announce(outcome, entity.identifier, experiment.identifier)
        results.append(_result(outcome, entity.identifier, experiment))
    request.measurements = results
    request.status = compute_measurement_status(results)
    return request


# Any: ado-core is untyped (no py.typed)
def configuration_key(entity: Any, experiment: Any) -> str:
    """The key a guided walk dealt this configuration's race card under (contract/guided.py)."""
    point = {v.property.identifier: v.value for v in entity.constitutive_property_values}
    return point_key(experiment.reference.experimentIdentifier, point)


# Any: ado-core is untyped (no py.typed)
def entity_inputs(entity: Any, experiment: Any) -> dict[str, Any] | Failed:
    """The experiment's inputs from `entity` (ado-core's reading), or the one line that names
    what is wrong with its properties: a misspelt field (ado-core would drop it silently and
    measure the default) with the field it was likely meant as, or a missing required one;
    either way the command that lists the fields."""
    given = {v.property.identifier for v in entity.constitutive_property_values}
    where = f"entity {entity.identifier}"
    if misspelt := misspelt_fields(given):
        return Failed(unknown_fields(misspelt, where, experiment.identifier))
    try:
        values: dict[str, Any] = experiment.propertyValuesFromEntity(entity)
    except ValueError as error:
        return Failed(f"{where} lacks an input: {error}; {fields_command(experiment.identifier)}")
    return values
