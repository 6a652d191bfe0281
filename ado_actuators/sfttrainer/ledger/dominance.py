"""Which requests a measured GPU out-of-memory run answers: the rule, pure.

A configuration that ran out of GPU memory in a launched run proves that a configuration equal
to it in everything but its size, and no smaller in any dimension of size, runs out too:
activations grow with the samples each device holds and with the sequence length, and nothing
else changes. "Everything" is every resolved entity value and experiment parameter (the
fms-hf-tuning version and gpu_model among them: another release or device may fit what this one
did not), the experiment and the weights the model name resolved to.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any, TypeVar

from ado_actuators.sfttrainer.catalog.entity import EntityValues
from ado_actuators.sfttrainer.contract.outcomes import Invalid, MeasurementOutcome, launched
from ado_actuators.sfttrainer.plan.model.geometry import batch_devices

SIZE_FIELDS = ("batch_size", "model_max_length")
"""The entity fields a dominating configuration may exceed; every other one must be equal."""

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Configuration:
    """A measurement as the rule compares it: what it is (but its size), and its size."""

    identity: str
    """Canonical JSON of every value but the size: equal text, equal configuration."""
    batch_per_device: float
    model_max_length: int

    def as_json(self) -> dict[str, Any]:
        return {
            "identity": json.loads(self.identity),
            "batch_per_device": self.batch_per_device,
            "model_max_length": self.model_max_length,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Configuration:
        return cls(
            identity=canonical(data["identity"]),
            batch_per_device=float(data["batch_per_device"]),
            model_max_length=int(data["model_max_length"]),
        )


def canonical(identity: dict[str, Any]) -> str:
    return json.dumps(identity, sort_keys=True)


def configuration(values: EntityValues, experiment_id: str, model_location: str) -> Configuration:
    """`values` measured under `experiment_id` with these weights."""
    identity = {k: v for k, v in values.model_dump().items() if k not in SIZE_FIELDS}
    identity["experiment"] = experiment_id
    identity["model_location"] = model_location
    return Configuration(
        identity=canonical(identity),
        # the devices one step's samples are split over (GPUs, or CPU ranks one per node)
        batch_per_device=values.batch_size / batch_devices(values),
        model_max_length=values.model_max_length,
    )


def dominates(oom: Configuration, other: Configuration) -> bool:
    """Whether `other` needs at least the memory per device that `oom` ran out of."""
    return (
        oom.identity == other.identity
        and other.batch_per_device >= oom.batch_per_device
        and other.model_max_length >= oom.model_max_length
    )


def tightest(ooms: Iterable[tuple[Configuration, T]], request: Configuration) -> T | None:
    """Of the OOMs that dominate `request`, the closest to it (the largest), else None."""
    found = [(c, item) for c, item in ooms if dominates(c, request)]
    if not found:
        return None
    return max(found, key=lambda pair: (pair[0].batch_per_device, pair[0].model_max_length))[1]


def takes_part(repeats: int) -> bool:
    """The stability experiment runs a configuration again and again to count how often it
    fails: an OOM among its runs is what it measures, not a verdict on the configuration, and
    it has to launch to measure anything."""
    return repeats == 1


def is_measured_oom(outcome: MeasurementOutcome) -> bool:
    """An OOM a launched run showed. The certain-OOM bound's answer launched nothing, and
    neither did an answer this rule gave."""
    return isinstance(outcome, Invalid) and outcome.gpu_oom and launched(outcome)
