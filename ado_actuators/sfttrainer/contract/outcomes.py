"""What a measurement can end as. Each layer turns the failures it understands into one."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Measured:
    """A run that trained: its properties (is_valid = 1 among them)."""

    properties: dict[str, float]
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)  # ado stores any JSON


@dataclasses.dataclass(frozen=True)
class Invalid:
    """A configuration the spec deems invalid, or one that ran out of GPU memory.

    Stored as is_valid = 0 (and memoised): measuring it again gives the same answer.
    """

    reason: str
    gpu_oom: bool = False
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)  # ado stores any JSON
    properties: dict[str, float] = dataclasses.field(default_factory=dict)
    """Figures known without a full run (e.g. the memory lower bound); is_valid is added."""


@dataclasses.dataclass(frozen=True)
class Failed:
    """Anything else: nothing is stored and a rerun measures the entity again."""

    reason: str
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)  # ado stores any JSON


MeasurementOutcome = Measured | Invalid | Failed
"""What one measurement ends as: the engine's answer to its front end."""

# Metadata keys that more than one layer reads, each written in one place.
WORKDIR = "workdir"
"""The working directory of the measurement's first node that launched (execute/cluster.py);
absent when nothing was launched at all."""
LOG = "log"
"""That node's training log (execute/cluster.py); the record of measured OOMs cites it."""
TRAINING_COMPLETED = "training_completed"
"""Set on a Failed whose training itself succeeded: the figures are what failed
(execute/classify.py); the stability experiment counts it as a run without error."""
INVALID_REASON = "invalid_reason"
"""An Invalid's reason, as the ado front end stores it (actuator/results.py) and the report
reads it back."""
MACHINE = "machine"
"""What a measured row ran on (execute/classify.py, from trainer/machine.py's blocks); the
report compares two rows' (report/machine.py)."""
VERSIONS = "versions"
"""The library versions the training process imported (execute/classify.py); the report
compares two rows' (report/machine.py)."""


def launched(outcome: MeasurementOutcome) -> bool:
    """Whether the measurement launched anything (it then has a working directory)."""
    return WORKDIR in outcome.metadata


def failed_before_launch(outcome: MeasurementOutcome) -> bool:
    """A Failed that launched nothing (missing dataset or weights, wrong environment, no
    placement): trying again as it is would fail alike."""
    return isinstance(outcome, Failed) and not launched(outcome)


ANSWERED_BY = "answered_by"
"""The metadata key of an Invalid skipped without launching: which rule skipped it. Declared
here, the lowest layer, because its producers (engine/, plan/, ledger/) and its reader
(report/, counting what a space cost) live in layers that share no other."""
CONFIGURATION_RULE = "configuration_rule"
"""A rule the configuration breaks (catalog/validity.py, plan/launch/environments.vision_problem,
plan/model/releases.build_problem)."""
CERTAIN_OOM = "certain_oom"
"""The memory lower bound exceeds the device (plan/memory/verdict.py)."""
PREDICTED_OOM = "prediction"
"""The predicted peak exceeds the device, with skip_predicted_oom (plan/memory/verdict.py)."""
OOM_DOMINANCE = "oom_dominance"
"""A measured OOM of a configuration no larger (ledger/neighbours.py)."""
ANSWERED_WITHOUT_LAUNCHING = (CONFIGURATION_RULE, CERTAIN_OOM, PREDICTED_OOM, OOM_DOMINANCE)
