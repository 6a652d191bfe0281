"""WARMUP_60S_STABLE_120S_OR_10_STEPS, the method ado's SFTTrainer guide documents: its policy
and the seconds it trains for a predicted step time."""

from __future__ import annotations

import math

from ado_actuators.sfttrainer.stopping.method import Expected
from ado_actuators.sfttrainer.stopping.policy import Decision, PolicyBase

WARMUP_60S_STABLE_120S_OR_10_STEPS = "WARMUP_60S_STABLE_120S_OR_10_STEPS"


class WarmupThenStable(PolicyBase):
    """WARMUP_60S_STABLE_120S_OR_10_STEPS: warm up for at least `warmup` seconds (whole steps),
    then measure until both `stable_seconds` have passed and `stable_steps` steps have ended.

    Warm-up steps are reported (RankReport.warmup_steps) so throughput and system metrics
    can leave them out.
    """

    def __init__(
        self, warmup: float = 60.0, stable_seconds: float = 120.0, stable_steps: int = 10
    ) -> None:
        super().__init__()
        self.warmup, self.stable_seconds, self.stable_steps = warmup, stable_seconds, stable_steps
        self.name = f"auto_stop_method={WARMUP_60S_STABLE_120S_OR_10_STEPS}"
        self.warmup_steps = 0
        self.warmup_end: float | None = None

    def propose(self, start: float, end: float, tokens: int = 0) -> Decision:
        if self.warmup_end is None:
            return Decision(end_warmup=self.elapsed(end) >= self.warmup)
        measured_steps = self.steps + 1 - self.warmup_steps
        return Decision(
            stop=end - self.warmup_end >= self.stable_seconds
            and measured_steps >= self.stable_steps
        )

    def commit(self, end: float, decision: Decision) -> None:
        super().commit(end, decision)
        if decision.end_warmup and self.warmup_end is None:
            self.warmup_end = end
            self.warmup_steps = self.steps
        elif decision.stop:
            self.reason = self.name

    def seconds_left(self, elapsed: float, measured_seconds: float, percent: float | None) -> float:
        """The rest of its stable window (its 10 steps are long passed where a race is lost)."""
        if self.warmup_end is None:
            return self.warmup - elapsed + self.stable_seconds
        return max(0.0, self.stable_seconds - measured_seconds)


class WarmupThenStableMethod:
    """The method as the rest of the package asks for it (stopping/method.py)."""

    name = WARMUP_60S_STABLE_120S_OR_10_STEPS

    def policy(self, max_seconds: float | None) -> WarmupThenStable:
        return WarmupThenStable()  # no cap: its own fixed times bound it

    def expected(self, step: float | None, max_seconds: float) -> Expected | None:
        """Whole steps until the warm-up's seconds, then whole steps until both the stable
        seconds and the stable steps have passed, as the policy counts them."""
        if not step:
            return None
        policy = WarmupThenStable()
        warmup = math.ceil(policy.warmup / step) * step
        stable = max(math.ceil(policy.stable_seconds / step), policy.stable_steps) * step
        return Expected(warmup + stable, f"{self.name} from the predicted step")


METHOD = WarmupThenStableMethod()
