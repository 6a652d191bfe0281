"""The questions a space is measured to answer, per experiment (and model, or any other entity
field that varies): which valid configuration is fastest and which are tied with it, which is
the largest batch that fits per (GPU count, sequence length), and how throughput scales with
GPUs.

Fast because broken is never the fastest: a valid configuration whose training loss was not
finite or rose across its window (report/loss.py) is passed over for fastest, tied and scaling,
and listed with why. It still fits: the largest batch that fits counts it.

Pure: a SpaceTable in, frozen answers out; wording is summary.py's, drawing figure.py's.
"""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.contract.properties import THROUGHPUT
from ado_actuators.sfttrainer.report.table import Point, SpaceTable

# What "fastest" means: the throughput of the whole run, as the user pays for it.
SPEED = THROUGHPUT


@dataclasses.dataclass(frozen=True)
class BatchLimit:
    number_gpus: int | None
    sequence_length: int
    largest_valid: int | None  # None: no batch size fits
    # The smallest batch size above largest_valid measured invalid: when set, largest_valid
    # is the boundary, not merely the largest batch tried.
    first_invalid: int | None


@dataclasses.dataclass(frozen=True)
class ScalingStep:
    """The fastest valid batch at one GPU count and sequence length, against perfect scaling
    from the smallest GPU count at which that sequence length fits."""

    point: Point
    baseline: Point

    @property
    def perfect(self) -> float:
        gpus, base_gpus = self.point.panel.number_gpus or 0, self.baseline.panel.number_gpus or 1
        return gpus / base_gpus * speed(self.baseline)

    @property
    def efficiency(self) -> float:
        return speed(self.point) / self.perfect


@dataclasses.dataclass(frozen=True)
class GroupAnswers:
    group: tuple[str, ...]  # the panel column: experiment, then the other varying fields
    fastest: Point | None  # None: nothing valid
    batch_limits: tuple[BatchLimit, ...]
    scaling: tuple[ScalingStep, ...]  # empty unless the group has several GPU counts
    # Valid configurations the measurements cannot tell from the fastest (`ties`), fastest first
    tied: tuple[Point, ...] = ()
    # The other valid configurations no tie could be judged for: no interval on either side
    unjudged: int = 0
    rivals: int = 0  # the other valid configurations
    # Valid configurations whose loss says they did not train, fastest first
    passed_over: tuple[Point, ...] = ()
    # Valid configurations stopped once they could not win (racing), fastest first
    raced: tuple[Point, ...] = ()

    @property
    def label(self) -> str:
        return ", ".join(self.group)


def answers(table: SpaceTable) -> tuple[GroupAnswers, ...]:
    groups = sorted({p.panel.column for p in table.points})
    return tuple(
        _group_answers(g, [p for p in table.points if p.panel.column == g]) for g in groups
    )


def speed(point: Point) -> float:
    return point.values[SPEED][0] if SPEED in point.values else float("nan")


def gpu_hours_per_million_tokens(point: Point) -> float | None:
    """number_gpus is the total over all nodes (catalog/entity.py). None on CPU (number_gpus 0):
    a CPU rank's cost depends on cores the space does not record, so no figure is better than
    a misleading one."""
    gpus = point.panel.number_gpus
    if not gpus or SPEED not in point.values or speed(point) <= 0:
        return None
    return gpus * 1e6 / speed(point) / 3600


def overlap(point: Point, other: Point) -> bool | None:
    """Whether the two 95 % intervals of dataset tokens/s intersect; None without both."""
    mine, theirs = point.interval, other.interval
    if mine is None or theirs is None:
        return None
    return mine[0] <= theirs[1] and theirs[0] <= mine[1]


def ties(point: Point, other: Point) -> bool:
    """Intervals that overlap; without an interval on either side, only an equal speed ties:
    nothing says how far apart two figures without one may be and still be the same."""
    return bool(overlap(point, other)) or speed(point) == speed(other)


def _group_answers(group: tuple[str, ...], points: list[Point]) -> GroupAnswers:
    trained = [p for p in points if p.valid and SPEED in p.values]
    candidates = [p for p in trained if p.loss.problem is None and not p.raced]
    fastest = max(candidates, key=speed, default=None)
    others = [p for p in candidates if p is not fastest]
    tied: tuple[Point, ...] = ()
    unjudged = 0
    if fastest is not None:  # else no candidate, and no other to tie with
        tied = tuple(sorted((p for p in others if ties(p, fastest)), key=speed, reverse=True))
        unjudged = sum(overlap(p, fastest) is None and not ties(p, fastest) for p in others)
    passed = tuple(sorted((p for p in trained if p.loss.problem), key=speed, reverse=True))
    return GroupAnswers(
        group,
        fastest,
        _batch_limits(points),
        _scaling(candidates),
        tied,
        unjudged,
        len(others),
        passed,
        tuple(
            sorted((p for p in trained if p.raced and not p.loss.problem), key=speed, reverse=True)
        ),
    )


def _batch_limits(points: list[Point]) -> tuple[BatchLimit, ...]:
    def where(p: Point) -> tuple[int, int]:
        return (-1 if p.panel.number_gpus is None else p.panel.number_gpus, p.sequence_length)

    limits = []
    for place in sorted({where(p) for p in points}):
        here = [p for p in points if where(p) == place]
        length = place[1]
        largest = max((p.batch_size for p in here if p.valid), default=None)
        above = [
            p.batch_size
            for p in here
            if not p.valid and (largest is None or p.batch_size > largest)
        ]
        limits.append(
            BatchLimit(here[0].panel.number_gpus, length, largest, min(above, default=None))
        )
    return tuple(limits)


def _scaling(candidates: list[Point]) -> tuple[ScalingStep, ...]:
    """Best batch per GPU count: more GPUs split the batch thinner, so each count is judged
    at the batch size that suits it, as a user would run it."""
    on_gpus = [p for p in candidates if (p.panel.number_gpus or 0) > 0]
    if len({p.panel.number_gpus for p in on_gpus}) < 2:
        return ()
    steps = []
    for length in sorted({p.sequence_length for p in on_gpus}):
        best: dict[int, Point] = {}
        for p in (p for p in on_gpus if p.sequence_length == length):
            gpus = p.panel.number_gpus or 0
            if gpus not in best or speed(p) > speed(best[gpus]):
                best[gpus] = p
        if len(best) > 1:
            baseline = best[min(best)]
            steps += [ScalingStep(best[n], baseline) for n in sorted(best)]
    return tuple(steps)
