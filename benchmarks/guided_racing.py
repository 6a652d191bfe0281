"""Racing (issue 54) simulated on guided_search.py's public oracles: a measurement stops once it
cannot win its group (stopping/racing.race, the function the trainer calls through stopping/raced.py), and what that
saves against the floor (only each group's true fastest measured).

Each measured configuration's window is priced from its own step time (its tokens per step over
its published tokens/s) under a stop method: its warm-up, then measured steps until the method's
end, or with racing until race() says it lost to the group's measured fastest so far. Both
methods are priced with and without racing, the floor under the same method:
- the spec's WARMUP_60S_STABLE_120S_OR_10_STEPS (guided_search.py's bill): whole steps to 60 s,
  then to both 120 s and 10 steps;
- STEADY_CI95_1PCT steady from the start (SteadyMethod.expected's assumption): the first step and
  the trend test's window, then steps until the interval is within 1 % (at least
  MIN_STEADY_STEPS), at most its 80 s cap. The cap counts from the first step's start, warm-up
  included (stopping/steady.py's SteadyInterval stops at the first step end past it, warmed up
  or not): a run whose steps take more than 80 s / 11 ends in its warm-up, and its row's figure
  and interval cover every step (metrics/aggregate.py's window without a warm-up end).

The interval model: a run's 95 % half-width after n measured steps is the batch-means interval
(stats/batch_means.py's batching and T_975) of independent steps whose time varies by STEP_CV,
with the run's figure its published one. It is an expected interval, not a sampled one: no run
is stopped by a figure that strayed, so "groups right" here says whether racing's windows and
the walk's decisions on the wider intervals keep every answer, not how often noise would fool
it. Nothing in it is fitted on these tables.

What it shows (at its first commit): racing saves little here. A raced row still pays its start,
its whole warm-up (60 s under the spec's method) and the 20-step floor; with ties measured, most
of the excess over the floor is rows whose interval overlaps the incumbent's (a tie, which that
walk measures on purpose) or rows measured before their group's winner, with no or a weaker
incumbent; with ties unmeasured the walk already leaves out what racing would stop. The table's
last three columns say where the GPU-hours go. Racing from the first interval (6 measured steps,
race's min_steps) in place of the 20-step floor moved fms-acceleration's ties-measured walk from
2.06x to 1.95x of the floor and llm-foundry's from 1.12x to 1.09x (spec's windows): a check of
how much the floor matters, not a setting chosen on these tables.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from guided_search import (
    TIE,
    Config,
    Space,
    _candidates,
    _groups,
    _true_fastest,
    checkpoint_bytes,
    guided,
)

from ado_actuators.sfttrainer.space.bill import start_seconds
from ado_actuators.sfttrainer.space.guided_rule import Result, Settings
from ado_actuators.sfttrainer.stats.batch_means import T_975, batching
from ado_actuators.sfttrainer.stopping import steady
from ado_actuators.sfttrainer.stopping.racing import Incumbent, Standing, behind, race

STEP_CV = 0.02
"""The step time's coefficient of variation: stopping/steady.py's design figure (its 20-step
floor "exceeds the (t * CV / 1 %)^2 steps a 2 % coefficient of variation needs"), the spread
guided_search.py's TIE stands for. Not fitted: the tables publish no spread."""


def half_width(steps: int, cv: float = STEP_CV) -> float | None:
    """The expected 95 % half-width, in percent, over `steps` independent steps of `cv`: t with
    batches - 1 degrees of freedom times cv over the root of the steps the batches hold."""
    shape = batching(steps)
    if shape is None:
        return None
    size, batches = shape
    return T_975[batches - 1] * 100 * cv / math.sqrt(size * batches)


@dataclasses.dataclass(frozen=True)
class Window:
    """One stop method's window in steps: the warm-up, then measured steps until its end."""

    name: str
    warmup: Callable[[float], int]
    measured: Callable[[float], int]


def _spec_measured(step: float) -> int:
    return max(math.ceil(120.0 / step), 10)


def _steady_steps(step: float) -> int:
    """The steps STEADY_CI95_1PCT trains at most: to the first step end at or past its cap,
    counted from the first step's start, warm-up included."""
    return max(math.ceil(steady.DEFAULT_MAX_SECONDS / step), 1)


def _steady_warmup(step: float) -> int:
    return min(1 + steady.WARMUP_WINDOW, _steady_steps(step))


def _steady_measured(step: float) -> int:
    """Measured steps after the warm-up; 0 where the cap ends the run in its warm-up."""
    cap = _steady_steps(step) - _steady_warmup(step)
    n = steady.MIN_STEADY_STEPS
    while n < cap and (half_width(n) or math.inf) > steady.TARGET_PERCENT:
        n += 1
    return min(n, cap)


SPEC_WINDOW = Window(
    "WARMUP_60S_STABLE_120S_OR_10_STEPS", lambda s: math.ceil(60.0 / s), _spec_measured
)
STEADY_WINDOW = Window(steady.STEADY_CI95_1PCT, _steady_warmup, _steady_measured)


@dataclasses.dataclass(frozen=True)
class Run:
    """A configuration measured under a window: its row as the walk reads it, and whether it
    was raced."""

    result: Result
    raced: bool


def start_hours(c: Config) -> float:
    """GPU-hours of `c`'s start, on every GPU: the process and the checkpoint's read (what no
    racing rule saves)."""
    gpus = c.observed.configuration.parallelism.gpus
    return gpus * start_seconds(checkpoint_bytes(c.observed)) / 3600


def measure(c: Config, window: Window, incumbent: Incumbent | None, ties: bool) -> Run:
    """The row and GPU-hours of measuring `c` under `window`, raced against `incumbent` (None:
    no racing, or no measured fastest in its group yet)."""
    tokens = (
        c.observed.configuration.batch.per_device_batch
        * c.observed.configuration.batch.sample_tokens
    )
    gpus = c.observed.configuration.parallelism.gpus
    if c.oom:  # its start and one predicted step, as guided_search.py bills it
        hours = start_hours(c) + gpus * tokens / (c.predicted / gpus) / 3600
        return Run(Result(c.key, False, None, gpu_hours=hours), False)
    step = tokens / c.observed.tokens_per_second
    warm, full = window.warmup(step), window.measured(step)
    stop, raced = full, False
    for n in range(1, full):
        standing = Standing(c.speed, half_width(n), warmed_up=True, measured_steps=n)
        if race(incumbent, standing, ties).lost:
            stop, raced = n, True
            break
    hours = start_hours(c) + gpus * (warm + stop) * step / 3600
    # no step measured after the warm-up: the row's figure and interval cover every step
    ci95 = half_width(stop) if stop else half_width(warm)
    return Run(Result(c.key, True, c.speed, ci95, hours), raced)


def _incumbent(group: list[Config], runs: dict[str, Run]) -> Incumbent | None:
    done = [runs[c.key].result for c in group if c.key in runs and not runs[c.key].raced]
    best = max((r for r in done if r.valid and r.speed), key=lambda r: r.speed or 0.0, default=None)
    return None if best is None else Incumbent(best.speed or 0.0, best.ci95_percent)


def walk(space: Space, window: Window, ties: bool, racing: bool) -> dict[str, Run]:
    """The guided walk over `space` (ties measured or not), each measurement priced under
    `window` and, with `racing`, raced against its group's measured fastest so far."""
    configs, device, prior = space
    groups = _groups(configs)
    kept = [c for cs in groups.values() for c in cs]
    group_of = {c.key: groups[c.group] for c in kept}
    by_key = {c.key: c for c in kept}
    pick = guided(Settings(priors={device: prior}, measure_ties=ties))
    candidates = _candidates(kept, device)
    runs: dict[str, Run] = {}
    while (chosen := pick(candidates, {k: r.result for k, r in runs.items()})) is not None:
        incumbent = _incumbent(group_of[chosen.key], runs) if racing else None
        runs[chosen.key] = measure(by_key[chosen.key], window, incumbent, ties)
    return runs


@dataclasses.dataclass
class Tally:
    """GPU-hours in all and where they went: OOM rows (start and one step), raced rows, and rows
    measured whole that are not their group's true fastest (the rest is the winners')."""

    hours: float = 0.0
    raced: int = 0
    right: int = 0
    groups: int = 0
    oom_hours: float = 0.0
    raced_hours: float = 0.0
    losers_hours: float = 0.0
    tie_hours: float = 0.0  # rows measured whole whose interval reaches the winner's
    raced_start_hours: float = 0.0

    def add(self, group: list[Config], runs: dict[str, Run]) -> None:
        """A raced row is never named fastest: the answer is the fastest row measured whole."""
        self.groups += 1
        best = _true_fastest(group)
        for c in (c for c in group if c.key in runs):
            run, hours = runs[c.key], runs[c.key].result.gpu_hours or 0.0
            self.hours += hours
            self.raced += run.raced
            self.oom_hours += hours if c.oom else 0.0
            self.raced_hours += hours if run.raced else 0.0
            self.losers_hours += hours if c is not best and not c.oom and not run.raced else 0.0
        whole = [c.speed for c in group if c.key in runs and not runs[c.key].raced]
        self.right += max(whole, default=0.0) >= best.speed * (1 - TIE)
        self._unavoidable(group, best, runs)

    def _unavoidable(self, group: list[Config], best: Config, runs: dict[str, Run]) -> None:
        """What no racing rule could have saved of this walk: the ties it measures whole (with
        ties measured, racing never ends a run whose interval still reaches the winner's) and
        the raced rows' starts (OOMs are counted apart)."""
        won = runs[best.key].result if best.key in runs else None
        winner = Incumbent(won.speed, won.ci95_percent) if won and won.speed else None
        for c in (c for c in group if c.key in runs and c is not best and not c.oom):
            run = runs[c.key]
            if run.raced:
                self.raced_start_hours += start_hours(c)
            elif winner is not None and (speed := run.result.speed) is not None:
                reach = Standing(speed, run.result.ci95_percent, True, 0).upper or speed
                below, _ = behind(reach, speed, winner.lower, winner.speed, measure_ties=True)
                self.tie_hours += 0.0 if below else run.result.gpu_hours or 0.0

    def least(self, floor: float) -> float:
        """The least GPU-hours any racing rule could reach on this walk's picks: the floor,
        its ties, its OOMs and its raced rows' starts."""
        return floor + self.tie_hours + self.oom_hours + self.raced_start_hours


def simulate(spaces: dict[str, Space], window: Window) -> dict[str, Tally]:
    """Per strategy: the floor, then the guided walk with ties measured or not, without and
    with racing."""
    tallies: dict[str, Tally] = {"floor": Tally()}
    for space in spaces.values():
        groups = _groups(space[0])
        floor = {c.key: measure(c, window, None, True) for c in map(_true_fastest, groups.values())}
        for group in groups.values():
            tallies["floor"].add(group, floor)
        for ties in (True, False):
            for racing in (False, True):
                name = f"ties {'measured' if ties else 'unmeasured'}, {'racing' if racing else 'no racing'}"
                runs = walk(space, window, ties, racing)
                for group in groups.values():
                    tallies.setdefault(name, Tally()).add(group, runs)
    return tallies


def table(tallies: dict[str, Tally]) -> list[str]:
    floor = tallies["floor"].hours
    lines = [
        "| guided walk | GPU-hours | x the floor | rows raced | groups right "
        "| of which OOM rows | raced rows | other rows measured whole, not the winner |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, t in tallies.items():
        lines.append(
            f"| {name} | {t.hours:,.1f} | {t.hours / floor:.2f} | {t.raced} "
            f"| {t.right / t.groups:.1%} ({t.right} of {t.groups}) | {t.oom_hours:,.1f} "
            f"| {t.raced_hours:,.1f} | {t.losers_hours:,.1f} |"
        )
    return lines


GOALS = {"fms-acceleration": (1.4, 1.1), "llm-foundry": (1.1, 1.1)}
"""Issue 54's goals, x the floor's GPU-hours with racing: (ties measured, ties unmeasured)."""


def report(label: str, spaces: dict[str, Space]) -> list[str]:
    """The racing tables of one oracle, one per stop method, and issue 54's goals on each."""
    lines: list[str] = []
    for window in (SPEC_WINDOW, STEADY_WINDOW):
        tallies = simulate(spaces, window)
        lines += ["", f"racing ({label}), windows under {window.name}, step CV {STEP_CV:.0%}:"]
        lines += table(tallies)
        floor = tallies["floor"].hours
        for ties, goal in zip(("measured", "unmeasured"), GOALS[label], strict=True):
            t = tallies[f"ties {ties}, racing"]
            met = t.hours <= goal * floor and t.right == t.groups
            lines.append(
                f"goal ({label}, {window.name}): ties {ties}, racing <= {goal}x the floor "
                f"and every group right: {'met' if met else 'NOT met'}"
            )
        t = tallies["ties measured, racing"]
        lines.append(
            f"no racing rule goes below {t.least(floor) / floor:.2f}x the floor with ties "
            f"measured on these picks ({label}, {window.name}): ties measured whole "
            f"{t.tie_hours:.2f}, OOMs {t.oom_hours:.2f}, raced rows' starts "
            f"{t.raced_start_hours:.2f} GPU-hours"
        )
    return lines
