"""A stop method's policy that also races (stopping/racing.py): the run stops once it cannot win
its answer group, whichever method it measures under.

The method keeps deciding the warm-up and its own end; once the warm-up is over, this policy
judges the steps measured since with the arithmetic the row reports its interval with
(stats/batch_means.py, stopping/steady.py's series) at each step end, and stops the run once
`race` says it lost. It judges the step as every rank saw it (`shares_steps`), so every rank
proposes the same decision. What the loss saved is what the method would still have trained
(its `seconds_left`): the rest of the spec's fixed window, or the time STEADY_CI95_1PCT's
interval would still have needed to reach its target.
"""

from __future__ import annotations

from ado_actuators.sfttrainer.contract.trainer_io import AutoStopOutcome, RaceOutcome
from ado_actuators.sfttrainer.stats.batch_means import throughput_interval
from ado_actuators.sfttrainer.stopping.policy import Decision, PolicyBase
from ado_actuators.sfttrainer.stopping.racing import Incumbent, Standing, Verdict, race
from ado_actuators.sfttrainer.stopping.steady import added_seconds

Step = tuple[float, float, int]


class Racing(PolicyBase):
    shares_steps = True
    # set by propose(), which every step's commit() follows
    _pending: Step
    _verdict: Verdict
    _saved: float

    def __init__(self, method: PolicyBase, incumbent: Incumbent, measure_ties: bool):
        super().__init__()
        self.method, self.incumbent, self.measure_ties = method, incumbent, measure_ties
        self.seen: list[Step] = []
        self.measured_from: int | None = None  # steps seen when the warm-up ended
        self.lost: RaceOutcome | None = None

    @property
    def warmup_steps(self) -> int:  # type: ignore[override]  # read-only: the method's own
        return self.method.warmup_steps

    def begin(self, start: float) -> None:
        self.method.begin(start)  # this policy keeps its own steps (`seen`)

    def propose(self, start: float, end: float, tokens: int = 0) -> Decision:
        decision = self.method.propose(start, end, tokens)
        self._pending = (start, end, tokens)
        self._verdict = self._judge([*self.seen, self._pending])
        return Decision(decision.end_warmup, decision.stop or self._verdict.lost)

    def _judge(self, steps: list[Step]) -> Verdict:
        """The race at this step end, over the steps measured since the warm-up."""
        if self.measured_from is None:  # no step is judged in the warm-up
            return Verdict(False)
        measured = steps[self.measured_from :]  # never empty: it holds this step
        seconds = added_seconds(measured)
        if sum(seconds) <= 0:
            return Verdict(False)
        interval = throughput_interval(seconds, [t for _, _, t in measured])
        speed = sum(t for _, _, t in measured) / sum(seconds)
        standing = Standing(speed, interval.percent, True, len(measured))
        verdict = race(self.incumbent, standing, self.measure_ties)
        if verdict.lost:
            elapsed = steps[-1][1] - steps[0][0]
            self._saved = self.method.seconds_left(elapsed, sum(seconds), interval.percent)
        return verdict

    def commit(self, end: float, decision: Decision) -> None:
        self.method.commit(end, decision)
        self.seen.append(self._pending)
        if decision.end_warmup and self.measured_from is None:
            self.measured_from = len(self.seen)
        if not decision.stop:
            return
        if self._verdict.lost:  # the last commit: nothing is proposed after a stop
            self.lost = RaceOutcome(
                reason=self._verdict.reason,
                behind_percent=self._verdict.behind_percent,
                saved_seconds=self._saved,
            )
            self.reason = self._verdict.reason
        else:
            self.reason = self.method.reason

    def outcome(self) -> AutoStopOutcome | None:
        return self.method.outcome()

    def race_outcome(self) -> RaceOutcome | None:
        return self.lost
