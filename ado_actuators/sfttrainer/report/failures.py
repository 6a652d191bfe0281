"""The requests of a space that failed, as sfttrainer_plot lists them: each configuration left
without a measurement, with its reason (the actuator's reason names the fix where one is known).

ado keeps a failed request's results (an InvalidMeasurementResult each, its reason) only in the
operation's trace: the table of measured entities leaves them out, so a space whose every
request failed reads as empty there. The trace is what `ado show trace operation OPERATION_ID`
prints, its reasons in full with `-o yaml`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ado_actuators.sfttrainer.catalog.experiments import short_name


def trace_command(operation: str) -> str:
    """ado-core's command that prints a failed request's reason in full (its table's Metadata
    column is the request's, empty here; the reason is the result's)."""
    return f"ado show trace operation {operation} -o yaml"


@dataclasses.dataclass(frozen=True)
class Failure:
    """A configuration's last failed request, where no measurement of it is stored."""

    operation: str
    experiment: str  # the experiment's reference, "SFTTrainer.finetune_full_benchmark-v1.0.0"
    entity: str
    fields: Mapping[str, Any]  # the entity's constitutive properties
    reason: str


def failures(
    requests: Mapping[str, Iterable[Any]],  # ado-core's MeasurementRequests per operation
    measured: set[tuple[str, str]],
) -> tuple[Failure, ...]:
    """The failed results of `requests` whose (entity, experiment) is not in `measured`, the
    latest per configuration, ordered by experiment and configuration."""
    from ado.schema.result import InvalidMeasurementResult

    found: dict[tuple[str, str], tuple[Any, Failure]] = {}
    for operation, listed in requests.items():
        for request in listed:
            entities = {e.identifier: e for e in request.entities if e is not None}
            for result in request.measurements or ():
                key = (str(result.entityIdentifier), str(result.experimentReference))
                if not isinstance(result, InvalidMeasurementResult) or key in measured:
                    continue
                entity = entities.get(result.entityIdentifier)
                fields = {} if entity is None else _fields(entity)
                failure = Failure(operation, key[1], key[0], fields, str(result.reason))
                if key not in found or found[key][0] <= request.timestamp:
                    found[key] = (request.timestamp, failure)
    return tuple(sorted((f for _, f in found.values()), key=_order))


def _fields(entity: Any) -> dict[str, Any]:  # ado-core's Entity
    return {v.property.identifier: v.value for v in entity.constitutive_property_values}


def _order(failure: Failure) -> tuple[str, str, str]:
    return (failure.experiment, str(failure.fields.get("model_name", "")), failure.entity)


def of_space(space: Any, measured: set[tuple[str, str]]) -> tuple[Failure, ...]:
    """The failures of a DiscoverySpace's operations, () where its sample store keeps no
    requests (only ado's SQL sample store does)."""
    operations = set(space.operations)
    store = space.sample_store
    if not operations or not hasattr(store, "measurement_requests_for_operation"):
        return ()
    return failures(store.measurement_requests_for_operation(operations), measured)


def configuration(fields: Mapping[str, Any]) -> str:
    """ "model granite-3.1-2b, 2 GPUs, batch 4, sequence length 512" from an entity's fields."""
    gpus = fields.get("number_gpus")
    named = [
        f"model {fields['model_name']}" if "model_name" in fields else "",
        "" if gpus is None else "CPU" if gpus in (0, "0") else f"{gpus} GPU" + "s" * (gpus != 1),
        f"batch {fields['batch_size']}" if "batch_size" in fields else "",
        f"sequence length {fields['model_max_length']}" if "model_max_length" in fields else "",
    ]
    return ", ".join(part for part in named if part) or "fields not recorded"


def failure_lines(found: Iterable[Failure]) -> list[str]:
    """A title, then per failed configuration its experiment and fields, then its reason in
    full (indented), then the command that prints the trace."""
    listed = list(found)
    if not listed:
        return []
    count = f"{len(listed)} configuration{'' if len(listed) == 1 else 's'}"
    lines = [f"Failed, nothing stored: {count} (ado keeps the reason in the operation's trace)"]
    for failure in listed:
        lines.append(f"  {short_name(failure.experiment)}: {configuration(failure.fields)}:")
        lines += [f"    {line}" for line in failure.reason.splitlines() or [""]]
    operations = sorted({f.operation for f in listed})
    lines.append("The trace in full: " + "; ".join(f"`{trace_command(o)}`" for o in operations))
    return lines
