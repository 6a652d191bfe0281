"""The guided walk's decisions: which configuration to measure next, and which need never be.

Per answer group (the groups of sfttrainer_plot's "Fastest valid": the experiment and every
varying field but the GPU count, the batch size and the sequence length), the configurations
that fit are measured in order of their predicted upper bound, each device calibrated on its
rows measured so far (calibration.py), each group and each of its GPU counts and sequence
lengths on its own rows too: a group's first measured row narrows the rest of the group. A
group stops once no unmeasured configuration's upper bound reaches the measured fastest's
lower bound (its interval's low end at the same coverage, its stored 95 % interval scaled; its
figure where the row has no interval). Each configuration left unmeasured gets its reason.

Pure and stateless: candidates and the results measured so far in, a decision out. So a walk
that was killed and run again decides from what was stored, and measures nothing twice.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from statistics import NormalDist
from typing import TypeVar

from ado_actuators.sfttrainer.plan.speed.parts import StepParts
from ado_actuators.sfttrainer.space.calibration import (
    Calibration,
    Prior,
    Row,
    calibrate,
)
from ado_actuators.sfttrainer.stats.interval import COVERAGE, Interval
from ado_actuators.sfttrainer.stopping.racing import behind

K = TypeVar("K", bound=Hashable)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A configuration of the space as the walk sees it before measuring it. `predicted`: the
    speed model's whole-run tokens/s (None where it cannot predict one); `skip`: why it will
    not be launched at all (a configuration rule, a predicted OOM), empty when it fits."""

    key: str
    group: str
    device: str
    predicted: float | None
    gpu_hours: float = 0.0
    skip: str = ""
    method: str = ""
    subgroup: str = ""  # its group's configurations at its GPU count and sequence length
    attention_share: float = 0.0  # of its predicted step, in the attention kernel
    parts: StepParts | None = None  # its predicted step's compute and collectives


@dataclasses.dataclass(frozen=True)
class Result:
    """A configuration measured: valid or not, its whole-run tokens/s and 95 % interval (per
    cent of the figure), the GPU-hours it took, and whether its loss shows it trained (the
    answers pass over one that did not; its speed still calibrates its device)."""

    key: str
    valid: bool
    speed: float | None = None
    ci95_percent: float | None = None
    gpu_hours: float | None = None
    trained: bool = True  # False: its loss was not finite or rose: never the fastest
    raced: bool = False  # stopped once it could not win (stopping/racing.py): never the fastest

    def lower(self, coverage: float = COVERAGE) -> float:
        """The low end of its interval at `coverage` (its 95 % interval scaled, as a normal
        one scales); its figure where the row has none."""
        return (self.speed or 0.0) * (1 - self._half(coverage))

    def upper(self, coverage: float = COVERAGE) -> float:
        return (self.speed or 0.0) * (1 + self._half(coverage))

    def _half(self, coverage: float) -> float:
        scale = NormalDist().inv_cdf(0.5 + coverage / 2) / NormalDist().inv_cdf(0.975)
        return (self.ci95_percent or 0.0) / 100 * scale


@dataclasses.dataclass(frozen=True)
class Settings:
    coverage: float = COVERAGE
    budget_gpu_hours: float | None = None
    measure_ties: bool = True
    priors: Mapping[str, Prior] = dataclasses.field(default_factory=dict)
    """Per device, a prior in place of calibration.py's (the benchmarks' constants fitted
    without the rows they are tested on)."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """The next configuration to measure (None: the walk is done, or waits for those in
    flight), and every configuration that stays unmeasured as things stand, with its reason."""

    next: Candidate | None
    unmeasured: Mapping[str, str]
    calibrations: Mapping[str, Calibration]
    incumbent: Result | None = None
    """The measured fastest of `next`'s group, which its measurement races; None: none yet."""


def calibrations(
    candidates: Iterable[Candidate],
    results: Mapping[str, Result],
    priors: Mapping[str, Prior] | None = None,
) -> dict[str, Calibration]:
    """Each device's calibration on its valid measured rows that the speed model predicted,
    each row in its answer group."""
    rows: dict[str, list[Row]] = {}
    for c in candidates:
        rows.setdefault(c.device, [])
        found = results.get(c.key)
        if found and found.valid and found.speed and c.predicted:
            row = Row(
                c.device,
                c.predicted,
                found.speed,
                c.method,
                c.group,
                c.subgroup,
                c.attention_share,
                c.parts,
            )
            rows[c.device].append(row)
    given = priors or {}
    return {device: calibrate(device, found, given.get(device)) for device, found in rows.items()}


def interval_of(
    candidate: Candidate, found: Mapping[str, Calibration], coverage: float
) -> Interval | None:
    if candidate.predicted is None or candidate.predicted <= 0:
        return None
    calibration = found[candidate.device]
    return calibration.interval(
        candidate.predicted,
        coverage,
        candidate.method,
        candidate.group,
        candidate.subgroup,
        candidate.attention_share,
        candidate.parts,
    )


def _figure(value: float) -> str:
    return f"{value:,.0f}"


def _reason(interval: Interval, fastest: Result, tied: bool, coverage: float) -> str:
    plus = interval.high - interval.central
    said = f"predicted {_figure(interval.central)} ± {_figure(plus)} tokens/s"
    speed = fastest.speed or 0.0
    theirs = f"the measured fastest's {_figure(speed)} - {_figure(speed - fastest.lower(coverage))}"
    if tied:
        return f"{said}, possibly tied with {theirs}; tied contenders are not measured"
    return f"{said}, below {theirs}"


def _fastest(candidates: Sequence[Candidate], results: Mapping[str, Result]) -> dict[str, Result]:
    best: dict[str, Result] = {}
    for c in candidates:
        found = results.get(c.key)
        if (
            found
            and found.valid
            and found.trained
            and not found.raced
            and found.speed is not None
            and (c.group not in best or found.speed > (best[c.group].speed or 0.0))
        ):
            best[c.group] = found
    return best


def _ruled_out(
    interval: Interval | None, fastest: Result | None, settings: Settings
) -> tuple[bool, bool]:
    """(below the fastest, possibly tied but ties are not wanted)."""
    if interval is None or fastest is None:
        return False, False
    lower, speed = fastest.lower(settings.coverage), fastest.speed or 0.0
    return behind(interval.high, interval.central, lower, speed, settings.measure_ties)


def _requeued(found: Result, fastest: Result | None, measure_ties: bool) -> bool:
    """Whether a raced row must be measured again: the group's measured fastest it lost to is
    gone (re-measured slower, found invalid), so its interval, judged at the 95 % its race
    used, no longer lies below the fastest's as the race required."""
    if not found.raced or not found.valid:
        return False
    if fastest is None:
        return True
    below, tied = behind(
        found.upper(), found.speed or 0.0, fastest.lower(), fastest.speed or 0.0, measure_ties
    )
    return not (below or tied)


def _spent(
    candidates: Sequence[Candidate], results: Mapping[str, Result], pending: set[str]
) -> float:
    spent = 0.0
    for c in candidates:
        if c.key in results:
            measured = results[c.key].gpu_hours
            spent += c.gpu_hours if measured is None else measured
        elif c.key in pending:
            spent += c.gpu_hours
    return spent


def judge(
    candidates: Sequence[Candidate],
    results: Mapping[str, Result],
    pending: Iterable[str] = (),
    settings: Settings = Settings(),
    sent: Iterable[str] = (),
) -> tuple[list[tuple[float, Candidate]], dict[str, str], dict[str, Calibration]]:
    """The configurations that can still win (upper bound, candidate), highest first; those
    that cannot, with their reasons; and the devices' calibrations. A raced row whose fastest
    is gone can win again, unless this walk `sent` it already (ado would replay its row)."""
    in_flight, done = set(pending), set(sent)
    found = calibrations(candidates, results, settings.priors)
    fastest = _fastest(candidates, results)
    unmeasured: dict[str, str] = {}
    open_: list[tuple[float, Candidate]] = []
    for c in candidates:
        if c.key in in_flight:
            continue
        if (result := results.get(c.key)) is not None:
            if c.key not in done and _requeued(result, fastest.get(c.group), settings.measure_ties):
                open_.append((result.upper(settings.coverage), c))
            continue
        if c.skip:
            unmeasured[c.key] = c.skip
            continue
        interval = interval_of(c, found, settings.coverage)
        below, tied = _ruled_out(interval, fastest.get(c.group), settings)
        if (below or tied) and interval is not None:
            unmeasured[c.key] = _reason(interval, fastest[c.group], tied, settings.coverage)
        else:
            open_.append((math.inf if interval is None else interval.high, c))
    open_.sort(key=lambda pair: -pair[0])
    return open_, unmeasured, found


def decide(
    candidates: Sequence[Candidate],
    results: Mapping[str, Result],
    pending: Iterable[str] = (),
    settings: Settings = Settings(),
    sent: Iterable[str] = (),
) -> Decision:
    """The next configuration to measure (the highest upper bound of those that can still win,
    within the budget), the measured fastest it races, and the reasons for those left, from
    what is measured (`results`), what is being measured (`pending`) and what this walk has
    sent already (`sent`)."""
    in_flight = set(pending)
    open_, unmeasured, found = judge(candidates, results, in_flight, settings, sent)
    spent = _spent(candidates, results, in_flight)
    budget = settings.budget_gpu_hours
    chosen = None
    for _, c in open_:
        if chosen is None and (budget is None or spent + c.gpu_hours <= budget):
            chosen = c
        elif chosen is None and budget is not None:
            unmeasured[c.key] = (
                f"not measured: over the GPU-hour budget of {budget:g} "
                f"({spent:.2f} spent, {c.gpu_hours:.2f} predicted for it)"
            )
        else:
            unmeasured[c.key] = "not measured yet: waits for the measurements before it"
    incumbent = _fastest(candidates, results).get(chosen.group) if chosen else None
    return Decision(chosen, unmeasured, found, incumbent)


def measuring_order(
    candidates: Sequence[tuple[K, float, str, str, str, float, StepParts | None]],
    calibration_of: Callable[[list[K]], Calibration],
    count: int,
) -> list[K]:
    """The first `count` keys a walk of one device's candidates (key, predicted, method,
    group, subgroup, attention share, step parts) measures: the highest upper bound first, the device
    recalibrated after each."""
    done: list[K] = []
    for _ in range(min(count, len(candidates))):
        found = calibration_of(done)
        rest = [c for c in candidates if c[0] not in done]
        done.append(max(rest, key=lambda c: found.interval(c[1], COVERAGE, *c[2:]).high)[0])
    return done
