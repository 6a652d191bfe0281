"""What a stop policy answers at a step end, and the bookkeeping every policy shares.

A policy is a pure state machine fed with step timings: begin() at every step's start, then
propose() and commit() at its end, with the ranks' agreement between the two (the collectives,
which need torch, are trainer/stopping.py's). The policies live one method a module beside this
one (seconds.py, warmup_stable.py, steady.py), combined by any_of.py."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from ado_actuators.sfttrainer.contract.trainer_io import AutoStopOutcome, RaceOutcome


@dataclasses.dataclass(frozen=True)
class Decision:
    end_warmup: bool = False  # this step is the last warm-up step
    stop: bool = False

    def __or__(self, other: Decision) -> Decision:
        return Decision(self.end_warmup or other.end_warmup, self.stop or other.stop)


class StopPolicy(Protocol):
    reason: str | None  # what stopped training, once it did
    warmup_steps: int
    synchronised: bool  # False: the policy never stops, so ranks need not agree
    # True: propose() must be given the step as every rank saw it (the earliest start, the
    # latest end, the tokens of all ranks), so every rank judges the same series
    shares_steps: bool

    def begin(self, start: float) -> None: ...

    def propose(self, start: float, end: float, tokens: int = 0) -> Decision: ...

    def commit(self, end: float, decision: Decision) -> None: ...

    def outcome(self) -> AutoStopOutcome | None: ...

    def race_outcome(self) -> RaceOutcome | None: ...


class PolicyBase:
    """Shared bookkeeping: when the first step began and how many steps have ended."""

    synchronised = True
    shares_steps = False
    warmup_steps = 0
    reason: str | None = None
    name: str  # what reason says when this policy stops training; set by each policy that can

    def __init__(self) -> None:
        self.first_start: float | None = None
        self.steps = 0

    def begin(self, start: float) -> None:
        if self.first_start is None:
            self.first_start = start

    def elapsed(self, end: float) -> float:
        assert self.first_start is not None, "begin() is called at every step's start"
        return end - self.first_start

    def propose(self, start: float, end: float, tokens: int = 0) -> Decision:
        raise NotImplementedError  # each policy decides on its own

    def commit(self, end: float, decision: Decision) -> None:
        self.steps += 1

    def outcome(self) -> AutoStopOutcome | None:
        """How an adaptive method ended, for the rank's report; None for the fixed ones."""
        return None

    def race_outcome(self) -> RaceOutcome | None:
        """How the run lost its race, where it raced and lost (stopping/raced.py)."""
        return None

    def seconds_left(self, elapsed: float, measured_seconds: float, percent: float | None) -> float:
        """The seconds it would still train, `elapsed` after the first step's start with
        `measured_seconds` measured since the warm-up and an interval of `percent`: what a
        race lost now saves (stopping/raced.py). None that never stops on its own: 0."""
        return 0.0
