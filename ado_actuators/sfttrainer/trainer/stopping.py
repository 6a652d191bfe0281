"""When to stop training early, decided at each optimisation step's end.

The policies are pure state machines fed with step timings, so they are unit-tested with
injected clocks. `begin(start)` is called at every step's start; each step end goes through
two phases because ranks must agree:

    proposal = policy.propose(start, end)       # this rank's view
    agreed   = agree(proposal)                  # element-wise OR over ranks (a collective)
    policy.commit(end, agreed)                  # every rank applies the same decision

A rank that stopped alone would leave the others blocked in the next gradient all-reduce.
A policy that judges a statistic of the series (STEADY_CI95_1PCT, steady.py) is first given
the step as all ranks saw it (`shared_step`, one more collective), so every rank proposes the
same decision from the same numbers, and the OR changes nothing.
"""

from __future__ import annotations

from ado_actuators.sfttrainer.contract.trainer_io import AutoStopOutcome
from ado_actuators.sfttrainer.trainer.steady import STEADY_CI95_1PCT, SteadyInterval
from ado_actuators.sfttrainer.trainer.stop_decision import Decision, PolicyBase, StopPolicy

WARMUP_60S_STABLE_120S_OR_10_STEPS = "WARMUP_60S_STABLE_120S_OR_10_STEPS"
AUTO_STOP_METHODS = (WARMUP_60S_STABLE_120S_OR_10_STEPS, STEADY_CI95_1PCT)
__all__ = ["STEADY_CI95_1PCT", "Decision", "SteadyInterval", "StopPolicy"]


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


class WarmupThenStable(PolicyBase):
    """WARMUP_60S_STABLE_120S_OR_10_STEPS: warm up for at least `warmup` seconds (whole steps),
    then measure until both `stable_seconds` have passed and `stable_steps` steps have ended.

    Warm-up steps are reported (RankReport.warmup_steps) so throughput and system metrics
    can leave them out.
    """

    def __init__(self, warmup: float = 60.0, stable_seconds: float = 120.0, stable_steps: int = 10):
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


def make_policy(
    stop_after_seconds: float,
    auto_stop_method: str | None,
    auto_stop_max_seconds: float | None = None,
):
    policies: list[PolicyBase] = []
    if auto_stop_method and auto_stop_method.lower() != "none":
        method = auto_stop_method.upper()
        if method == WARMUP_60S_STABLE_120S_OR_10_STEPS:
            policies.append(WarmupThenStable())
        elif method == STEADY_CI95_1PCT:
            policies.append(SteadyInterval(auto_stop_max_seconds))
        else:
            supported = ", ".join(AUTO_STOP_METHODS)
            raise ValueError(f"auto_stop_method {auto_stop_method!r}: supported are {supported}")
    if stop_after_seconds > 0:
        policies.append(StopAfterSeconds(stop_after_seconds))
    if not policies:
        return NeverStop()
    return policies[0] if len(policies) == 1 else AnyOf(*policies)


def agree(decision: Decision, device=None) -> Decision:
    """Element-wise OR of every rank's proposal (all_reduce MAX); identity without a group.

    `device` must suit the process group's backend: the rank's CUDA device for NCCL, CPU for gloo.
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return decision
    flags = torch.tensor(
        [int(decision.end_warmup), int(decision.stop)], dtype=torch.int32, device=device or "cpu"
    )
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    end_warmup, stop = (bool(v) for v in flags.tolist())
    return Decision(end_warmup=end_warmup, stop=stop)


def shared_step(start: float, end: float, tokens: int, device=None) -> tuple[float, float, int]:
    """The step as every rank saw it: the earliest start, the latest end (the step ends when its
    slowest rank does, as metrics/precision.py counts it) and the dataset tokens of all ranks;
    the rank's own figures without a group. Two collectives on float64 (exact for tokens below
    2**53; 0.24 microseconds of resolution at today's epoch seconds)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return start, end, tokens
    times = torch.tensor([-start, end], dtype=torch.float64, device=device or "cpu")
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    count = torch.tensor([float(tokens)], dtype=torch.float64, device=device or "cpu")
    dist.all_reduce(count, op=dist.ReduceOp.SUM)
    earliest, latest = times.tolist()
    return -earliest, latest, round(count.item())
