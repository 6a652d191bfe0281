"""One measurement's dealings with the record of measured OOMs: asked before it launches
whether a measured OOM already answers it, told afterwards what it ended as.

Nothing here may fail a measurement: a record that cannot be read is no answer (the request is
measured), one that cannot be written is a warning and a note in the result's metadata.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.catalog.entity import EntityValues
from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition
from ado_actuators.sfttrainer.contract import outcomes
from ado_actuators.sfttrainer.contract.outcomes import Invalid, Measured, MeasurementOutcome
from ado_actuators.sfttrainer.ledger.dominance import (
    Configuration,
    configuration,
    is_measured_oom,
    takes_part,
    tightest,
)
from ado_actuators.sfttrainer.ledger.record import Entry, Record, RecordUnavailable

log = logging.getLogger(__name__)

ANSWERED_BY = outcomes.OOM_DOMINANCE
"""metadata["answered_by"] of a request skipped without launching, given the record."""
NOTE = "oom_record"
"""metadata key of what a measured outcome did to the record (or why it could not)."""


@dataclasses.dataclass(frozen=True)
class Neighbours:
    """A request as the record sees it."""

    record: Record
    configuration: Configuration
    label: str
    experiment: str
    batch_size: int

    def answer_from_measured_ooms(self) -> Invalid | None:
        """is_valid = 0 when a measured OOM dominates this request; else None (measure it)."""
        try:
            ooms = self.record.ooms()
        except RecordUnavailable as error:
            log.warning("%s is measured without the OOM record: %s", self.label, error)
            return None
        proof = tightest(((e.configuration, e) for e in ooms), self.configuration)
        if proof is None:
            return None
        log.info(
            "%s skipped without launching: the measured OOM of %s covers it",
            self.label,
            proof.proof.get("label"),
        )
        return Invalid(
            reason=self._reason(proof),
            gpu_oom=True,
            metadata={
                outcomes.ANSWERED_BY: ANSWERED_BY,
                "measured": False,
                "dominated_by": {**proof.proof, "record": str(self.record.path)},
            },
        )

    def record_outcome(self, outcome: MeasurementOutcome) -> MeasurementOutcome:
        """Records a measured OOM, or withdraws the OOMs a run that fitted contradicts."""
        try:
            if is_measured_oom(outcome):
                self.record.add(self.configuration, self._proof(outcome))
                outcome.metadata[NOTE] = {"recorded": str(self.record.path)}
            elif isinstance(outcome, Measured):
                withdrawn = self.record.supersede(self.configuration, self._proof(outcome))
                if withdrawn:
                    self._contradicted(withdrawn, outcome)
        except RecordUnavailable as error:
            log.warning("the outcome of %s is not in the OOM record: %s", self.label, error)
            outcome.metadata[NOTE] = {"problem": str(error)}
        return outcome

    def _proof(self, outcome: MeasurementOutcome) -> dict[str, Any]:
        reason = getattr(outcome, "reason", "")
        return {
            "label": self.label,
            "experiment": self.experiment,
            "batch_size": self.batch_size,
            "batch_per_device": self.configuration.batch_per_device,
            "model_max_length": self.configuration.model_max_length,
            "workdir": outcome.metadata.get(outcomes.WORKDIR),
            "log": outcome.metadata.get(outcomes.LOG),
            "reason": (reason.splitlines() or [""])[0][:300],
        }

    def _contradicted(self, withdrawn: list[Entry], outcome: Measured) -> None:
        for entry in withdrawn:
            proof = entry.proof
            log.warning(
                "%s fitted (batch %g per device, model_max_length %d), contradicting the "
                "measured OOM of %s (batch %g per device, model_max_length %s, log %s): that "
                "OOM answers no request any more (%s)",
                self.label,
                self.configuration.batch_per_device,
                self.configuration.model_max_length,
                proof.get("label"),
                entry.configuration.batch_per_device,
                entry.configuration.model_max_length,
                proof.get("log"),
                self.record.path,
            )
        outcome.metadata[NOTE] = {
            "superseded": [
                {k: e.proof.get(k) for k in ("label", "workdir", "recorded_at")} for e in withdrawn
            ],
            "record": str(self.record.path),
        }

    def _reason(self, proof: Entry) -> str:
        was, this = proof.configuration, self.configuration
        facts = proof.proof
        return (
            f"GPU out of memory, skipped without launching: {facts.get('label')} "
            f"({facts.get('experiment')}) ran out of GPU memory with batch_size "
            f"{facts.get('batch_size')} ({was.batch_per_device:g} per device) and "
            f"model_max_length {was.model_max_length}, and this request is the same "
            f"configuration but no smaller ({this.batch_per_device:g} per device, "
            f"model_max_length {this.model_max_length}). Its log: {facts.get('log')} (workdir "
            f"{facts.get('workdir')}, recorded {facts.get('recorded_at')}). Not launched: set the "
            f"actuator parameter oom_dominance: false to measure it anyway, or remove that "
            f"OOM's line from {self.record.path}"
        )


def neighbours(
    record_path: Path | None,
    values: EntityValues,
    definition: ExperimentDefinition,
    model_location: str,
    label: str,
) -> Neighbours | None:
    """The request's standing with the record, or None where the record has no part in it:
    turned off (no path) or a stability experiment."""
    if record_path is None or not takes_part(definition.repeats):
        return None
    return Neighbours(
        record=Record(record_path),
        configuration=configuration(values, definition.identifier, model_location),
        label=label,
        experiment=definition.identifier,
        batch_size=values.batch_size,
    )
