"""STEADY_CI95_1PCT: stop once the figure is known to 1 %, instead of after a fixed time.

Warm-up ends at the first step end where the last WARMUP_WINDOW step durations show no
monotonic trend (Mann-Kendall at 5 %, stats/trend.py). The first step never counts: it holds
the one-off work (kernel selection, the allocator's first pools) whatever follows. Every step
up to that one is warm-up, left out of every figure as the spec's method leaves its own out.

Training then stops at the first step end where, over at least MIN_STEADY_STEPS measured steps,
the 95 % confidence interval of the throughput (batch means, stats/batch_means.py, the same
arithmetic and series the row's dataset_tokens_per_second_ci95_percent is computed with) has a
half-width of at most TARGET_PERCENT of the mean. Checking at every step and stopping at the
first success is the fixed-width sequential rule that Jones, Haran, Caffo & Neath (JASA 2006)
show keeps batch means' nominal coverage as the width shrinks.

At `max_seconds` after the first step's start it stops whatever it found, and the rank's
report (AutoStopOutcome) says whether the target was reached and whether a steady state was
found at all. Without one, nothing was identified as warm-up, so the figures cover every step.

Pure: a state machine fed with the steps every rank saw (trainer/stopping.shared_step), so
every rank proposes the same decision. The bill's expectation where the step time is steady from
the start: STEADY_STEPS steps, at most the cap (SteadyMethod.expected).
"""

from __future__ import annotations

import itertools

from ado_actuators.sfttrainer.contract.trainer_io import AutoStopOutcome
from ado_actuators.sfttrainer.stats.batch_means import (
    MIN_STEADY_STEPS,
    Interval,
    throughput_interval,
)
from ado_actuators.sfttrainer.stats.trend import MIN_LENGTH, mann_kendall
from ado_actuators.sfttrainer.stopping.method import Expected
from ado_actuators.sfttrainer.stopping.policy import Decision, PolicyBase
from ado_actuators.sfttrainer.stopping.racing import seconds_saved

STEADY_CI95_1PCT = "STEADY_CI95_1PCT"
TARGET_PERCENT = 1.0
WARMUP_WINDOW = MIN_LENGTH
"""Step durations the trend test reads: the fewest for which its normal approximation holds,
so warm-up ends as early as the test can tell."""
DEFAULT_MAX_SECONDS = 80.0
"""The cap's default: 4/9 of the 180 s the spec's method trains at least (60 s of warm-up, then
120 s), so even where the figure never settles this method trains less than half as long, with
a margin for the step that ends past the cap. A GPU step of a 1B to 8B model takes 0.1 to 2 s:
80 s holds 40 to 800 of them, room for the warm-up (at least 11 steps) and the 20-step floor up
to steps of 2.5 s, and far more steps than a CV of a few percent needs."""
STEADY_STEPS = 1 + WARMUP_WINDOW + MIN_STEADY_STEPS
"""The fewest steps it trains, reached where the step time is steady from the start: the first
step (never judged), the trend test's window, then the interval's floor of measured steps."""


class SteadyInterval(PolicyBase):
    shares_steps = True
    # set by propose(), which every step's commit() follows
    _pending: tuple[float, float, int]
    _reached: bool
    _at_cap: bool

    def __init__(self, max_seconds: float | None = None, target_percent: float = TARGET_PERCENT):
        super().__init__()
        self.max_seconds = DEFAULT_MAX_SECONDS if max_seconds is None else max_seconds
        self.target_percent = target_percent
        self.name = f"auto_stop_method={STEADY_CI95_1PCT}"
        self.seen: list[tuple[float, float, int]] = []  # (start, end, tokens) as all ranks saw them
        self.steady = False
        self.warmup_steps = 0
        self.interval: Interval | None = None  # the last one judged
        self._ended_by: str | None = None

    def propose(self, start: float, end: float, tokens: int = 0) -> Decision:
        self._pending = (start, end, tokens)
        steps = [*self.seen, self._pending]
        self._at_cap = end - steps[0][0] >= self.max_seconds
        self._reached = False
        if not self.steady:
            window = added_seconds(steps[1:])[-WARMUP_WINDOW:]
            settled = len(window) == WARMUP_WINDOW and not mann_kendall(window).significant
            return Decision(end_warmup=settled, stop=self._at_cap)
        measured = steps[self.warmup_steps :]
        self.interval = throughput_interval(added_seconds(measured), [t for _, _, t in measured])
        self._reached = (
            len(measured) >= MIN_STEADY_STEPS
            and self.interval.percent is not None
            and self.interval.percent <= self.target_percent
        )
        return Decision(stop=self._reached or self._at_cap)

    def commit(self, end: float, decision: Decision) -> None:
        super().commit(end, decision)
        self.seen.append(self._pending)
        if decision.end_warmup and not self.steady:
            self.steady, self.warmup_steps = True, self.steps
        if decision.stop and self._ended_by is None:
            self._ended_by = "target" if self._reached else "cap" if self._at_cap else "other limit"
            self.reason = self.name

    def seconds_left(self, elapsed: float, measured_seconds: float, percent: float | None) -> float:
        """Until the interval would reach the target at the pace so far, at most the cap."""
        left = max(0.0, self.max_seconds - elapsed)
        if percent is None:
            return left
        return seconds_saved(percent, self.target_percent, measured_seconds, left)

    def outcome(self) -> AutoStopOutcome:
        percent = self.interval.percent if self.interval is not None else None
        return AutoStopOutcome(
            method=STEADY_CI95_1PCT,
            target_percent=self.target_percent,
            max_seconds=self.max_seconds,
            steady_state_found=self.steady,
            target_reached=self._ended_by == "target",
            ended_by=self._ended_by or "training end",
            ci95_percent=percent,
            warmup_steps=self.warmup_steps,
            measured_steps=len(self.seen) - self.warmup_steps,  # warmup_steps is 0 until steady
        )


def added_seconds(steps: list[tuple[float, float, int]]) -> list[float]:
    """What each step added to the span from the first one's start: the first its own
    duration, each later one the time since the previous end (metrics/precision.py's
    step_series over the same steps)."""
    if not steps:
        return []
    return [steps[0][1] - steps[0][0]] + [b[1] - a[1] for a, b in itertools.pairwise(steps)]


class SteadyMethod:
    """The method as the rest of the package asks for it (stopping/method.py)."""

    name = STEADY_CI95_1PCT

    def policy(self, max_seconds: float | None) -> SteadyInterval:
        return SteadyInterval(max_seconds)

    def expected(self, step: float | None, max_seconds: float) -> Expected:
        """STEADY_STEPS steps of the predicted time, at most the cap; the cap where no step time
        is predicted, since it bounds the method whatever the steps take."""
        if not step:
            return Expected(max_seconds, f"{STEADY_CI95_1PCT}: its cap")
        return Expected(
            min(max_seconds, STEADY_STEPS * step), f"{STEADY_CI95_1PCT} from the predicted step"
        )


METHOD = SteadyMethod()
