"""Several policies at once: whichever stops first stops training, and the reason names it."""

from __future__ import annotations

from ado_actuators.sfttrainer.contract.trainer_io import AutoStopOutcome
from ado_actuators.sfttrainer.stopping.policy import Decision, PolicyBase


class AnyOf(PolicyBase):
    """Several policies at once (stop_after_seconds and auto_stop_method both set)."""

    def __init__(self, *policies: PolicyBase) -> None:
        super().__init__()
        self.policies = policies

    @property
    def warmup_steps(self) -> int:  # type: ignore[override]  # read-only: its policies' own
        return max(p.warmup_steps for p in self.policies)

    @property
    def shares_steps(self) -> bool:  # type: ignore[override]  # read-only: its policies' own
        return any(p.shares_steps for p in self.policies)

    def outcome(self) -> AutoStopOutcome | None:
        return next((o for p in self.policies if (o := p.outcome()) is not None), None)

    def seconds_left(self, elapsed: float, measured_seconds: float, percent: float | None) -> float:
        """Whichever policy that can stop would stop first."""
        left = [p.seconds_left(elapsed, measured_seconds, percent) for p in self.policies]
        return min((s for s in left if s > 0), default=0.0)

    def begin(self, start: float) -> None:
        for p in self.policies:
            p.begin(start)

    def propose(self, start: float, end: float, tokens: int = 0) -> Decision:
        out = Decision()
        self._stoppers = []
        for p in self.policies:
            d = p.propose(start, end, tokens)
            if d.stop:
                self._stoppers.append(p.name)
            out = out | d
        return out

    def commit(self, end: float, decision: Decision) -> None:
        super().commit(end, decision)
        for p in self.policies:
            p.commit(end, decision)
        if decision.stop:
            # when a peer proposed the stop this rank cannot tell which policy did: name all
            self.reason = " | ".join(self._stoppers or [p.name for p in self.policies])
