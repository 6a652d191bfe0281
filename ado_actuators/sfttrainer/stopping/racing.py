"""Racing: stop a measurement once it cannot win its answer group (issue 54).

A run launched in a group that already has a measured fastest (the incumbent) carries that
incumbent's figure and 95 % interval. At each step end after the warm-up its stop rule
requires, and over at least the floor of measured steps that rule judges an interval on
(stats/batch_means.py's MIN_STEADY_STEPS, which stopping/steady.py's target waits for too:
three batches that happen to agree cannot end a run here either), the run has lost once it
cannot reach the tie band, as the guided walk (space/guided_rule.py's _ruled_out) defines it
for a configuration not yet measured:

- ties measured: this run's 95 % upper bound lies below the incumbent's lower bound, so the
  two intervals no longer overlap (report/answers.py's ties: it cannot even tie);
- ties not measured: also once this run's figure is below the incumbent's, its interval still
  overlapping: at best a tie, which that walk does not spend GPU-hours on.

Pure and standard library only: stopping/raced.py wraps any stop method's policy and calls
`race` at each step end after the method's warm-up, and benchmarks/guided_search.py simulates
the same function on public tables, so the rule simulated is the rule run.
"""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.stats.batch_means import MIN_STEADY_STEPS


@dataclasses.dataclass(frozen=True)
class Incumbent:
    """The group's measured fastest: its tokens/s and 95 % half-width in percent of it (None:
    its row has no interval, so its figure is its lower bound, as the guided walk reads it)."""

    speed: float
    ci95_percent: float | None = None
    name: str = "the incumbent"
    """What the reason calls it: the configuration that measured it."""

    @property
    def lower(self) -> float:
        return self.speed * (1 - (self.ci95_percent or 0.0) / 100)


@dataclasses.dataclass(frozen=True)
class Standing:
    """This run as its stop rule sees it at a step end: its tokens/s over the measured steps,
    their 95 % half-width in percent (None below the interval's floor of steps), whether the
    warm-up is over and how many steps were measured since."""

    speed: float
    ci95_percent: float | None
    warmed_up: bool
    measured_steps: int

    @property
    def upper(self) -> float | None:
        if self.ci95_percent is None:
            return None
        return self.speed * (1 + self.ci95_percent / 100)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """lost: stop now; reason: why, naming the incumbent and the margin (empty when racing on)."""

    lost: bool
    reason: str = ""
    behind_percent: float = 0.0
    """How far the run's figure lies below the incumbent's, where it lost."""


def race(
    incumbent: Incumbent | None,
    run: Standing,
    measure_ties: bool = True,
    min_steps: int = MIN_STEADY_STEPS,
) -> Verdict:
    """Whether `run` has lost its group to `incumbent` (module docstring); never without an
    incumbent, before the warm-up ends, below `min_steps` measured steps or without an
    interval."""
    upper = run.upper
    if incumbent is None or not run.warmed_up or run.measured_steps < min_steps or upper is None:
        return Verdict(False)
    lower = incumbent.lower
    below, tied = behind(upper, run.speed, lower, incumbent.speed, measure_ties)
    margin = 100 * (1 - run.speed / incumbent.speed)
    if below:
        said = f"its 95 % upper bound {upper:,.0f}"
        return Verdict(True, _reason(run, incumbent, said, lower, margin), margin)
    if tied:
        said = f"at best tied: {run.speed:,.0f} tokens/s"
        return Verdict(True, _reason(run, incumbent, said, incumbent.speed, margin), margin)
    return Verdict(False)


def behind(
    high: float, central: float, lower: float, fastest: float, measure_ties: bool
) -> tuple[bool, bool]:
    """(below: an interval reaching up to `high` lies wholly under the fastest's lower bound
    `lower`; tied: not below, but its figure `central` is under the fastest's figure `fastest`
    where ties are not measured). The one comparison racing and the guided walk
    (space/guided_rule.py) both make."""
    if high < lower:
        return True, False
    return False, not measure_ties and central < fastest


def _reason(run: Standing, incumbent: Incumbent, said: str, bar: float, margin: float) -> str:
    plus = f" ± {incumbent.ci95_percent:g} %" if incumbent.ci95_percent is not None else ""
    return (
        f"raced: {said} < {bar:,.0f} of {incumbent.name}'s {incumbent.speed:,.0f} tokens/s{plus} "
        f"after {run.measured_steps} measured steps; {margin:.1f} % behind it"
    )


def seconds_saved(
    ci95_percent: float, target_percent: float, measured_seconds: float, left_to_cap: float
) -> float:
    """The seconds a run stopped by its race would still have trained to reach its target: an
    interval's half-width shrinks as one over the root of the steps, so (ci / target)^2 times
    the window measured so far, less that window; at most what was left before the cap."""
    needed = measured_seconds * (ci95_percent / target_percent) ** 2
    return max(0.0, min(left_to_cap, needed - measured_seconds))
