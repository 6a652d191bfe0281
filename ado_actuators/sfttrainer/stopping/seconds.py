"""The fixed stops that are not an auto_stop_method: none at all, and `stop_after_seconds`
(whose expected duration is its limit, which space/bill.py applies over every method)."""

from __future__ import annotations

from ado_actuators.sfttrainer.stopping.policy import Decision, PolicyBase


class NeverStop(PolicyBase):
    synchronised = False

    def propose(self, start: float, end: float, tokens: int = 0) -> Decision:
        return Decision()


class StopAfterSeconds(PolicyBase):
    """Stop at the first step end at least `limit` seconds after the first step's start."""

    def __init__(self, limit: float) -> None:
        super().__init__()
        self.limit = limit
        self.name = f"stop_after_seconds={limit:g}"

    def propose(self, start: float, end: float, tokens: int = 0) -> Decision:
        return Decision(stop=self.elapsed(end) >= self.limit)

    def commit(self, end: float, decision: Decision) -> None:
        super().commit(end, decision)
        if decision.stop:
            self.reason = self.name

    def seconds_left(self, elapsed: float, measured_seconds: float, percent: float | None) -> float:
        return max(0.0, self.limit - elapsed)
