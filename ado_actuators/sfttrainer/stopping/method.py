"""What a stop method offers the rest of the package: its name, the policy that decides inside
the rank, and the seconds it is expected to train for a predicted step time. Keeping both in the
method's own module means the bill (space/bill.py) cannot drift from what the rank does."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from ado_actuators.sfttrainer.stopping.policy import PolicyBase


@dataclasses.dataclass(frozen=True)
class Expected:
    """The seconds a method is expected to train, and how they were found, in the words the
    bill's row prints."""

    seconds: float
    how: str


class StopMethod(Protocol):
    @property
    def name(self) -> str:
        """The entity's `auto_stop_method` value that selects it."""
        ...

    def policy(self, max_seconds: float | None) -> PolicyBase:
        """The policy a rank runs; `max_seconds` is the entity's auto_stop_max_seconds (None:
        the method's own default), which a method without a cap ignores."""
        ...

    def expected(self, step: float | None, max_seconds: float) -> Expected | None:
        """The seconds one run trains for, from `step`, the predicted seconds of one optimizer
        step (None or 0 where none is predicted); None where the method cannot tell."""
        ...
