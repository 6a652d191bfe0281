"""Outcomes -> ado measurement results, for every entity of a request."""

from __future__ import annotations

from typing import Any

from ado.schema.result import InvalidMeasurementResult, ValidMeasurementResult
from ado.utilities.support import compute_measurement_status, observed_property_values_from_dict

from ado_actuators.sfttrainer.measurement import measure
from ado_actuators.sfttrainer.outcomes import Failed, Invalid, Outcome
from ado_actuators.sfttrainer.parameters import SFTTrainerParameters


def _json_safe(metadata: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if v is not None}


def to_result(outcome: Outcome, entity_id: str, experiment: Any) -> Any:
    if isinstance(outcome, Failed):
        return InvalidMeasurementResult(
            entityIdentifier=entity_id,
            experimentReference=experiment.reference,
            reason=outcome.reason,
        )
    if isinstance(outcome, Invalid):
        properties = {"is_valid": 0}
        metadata = {**outcome.metadata, "invalid_reason": outcome.reason}
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


def measure_request(request: Any, *, experiment: Any, params: SFTTrainerParameters) -> Any:
    """Measure each entity of `request` in turn and complete it (runs in a Ray task)."""
    results = []
    for entity in request.entities:
        try:
            values = experiment.propertyValuesFromEntity(entity)
        except ValueError as error:
            outcome: Outcome = Failed(f"entity {entity.identifier} lacks an input: {error}")
        else:
            outcome = measure(values, experiment.identifier, params, label=entity.identifier)
        results.append(to_result(outcome, entity.identifier, experiment))
    request.measurements = results
    request.status = compute_measurement_status(results)
    return request
