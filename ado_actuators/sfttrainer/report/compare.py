"""Two spaces side by side, configuration by configuration: how users check a new
fms-hf-tuning release (or GPU model, or dataset) for regressions.

Configurations match on everything that identifies them (experiment, entity fields and
experiment parameters, Point.identity) except the fields that differ by design: those fixed
to one value in each space, a different one in each (e.g. fms_hf_tuning_version 3.2.2 here,
3.1.0 there). Fields that vary inside a space are always matched on, and so are the picture's
axes, so two one-configuration spaces never pair batch 4 with batch 8.

Each pair is also checked for loss parity (report/loss.py: matched configurations on one
dataset and seed start from the same loss, up to rounding) and for a loss that failed in one
space only, and says where the two rows ran on different GPUs, drivers, CUDA, NCCL or library
releases (report/machine.py; only a space read through ado's API has them).

Pure: two SpaceTables in, a Comparison out.
"""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.report import loss, machine
from ado_actuators.sfttrainer.report.answers import SPEED, overlap, speed
from ado_actuators.sfttrainer.report.table import LINE, ROW, Point, SpaceTable, TableError, X

# Where either row has no 95 % interval (stored before it existed, or too few steps), a ratio
# further than this from 1 is flagged: above run-to-run noise on a quiet machine.
THRESHOLD = 0.10
# Which rule judged a pair's speeds.
INTERVALS, BAND = "95 % intervals", f"±{THRESHOLD:.0%} band"
SLOWER, VALID_THERE = "slower", "valid only in the other space"
LOSS_DIFFERS = "first-step loss differs"


def _failure(row: loss.RowLoss) -> str:
    return "loss rose" if row.finite else "loss not finite"


@dataclasses.dataclass(frozen=True)
class Pair:
    point: Point  # in the main space
    other: Point

    @property
    def ratio(self) -> float | None:
        """Main space's dataset tokens/s over the other's; None unless both are valid."""
        if SPEED not in self.point.values or SPEED not in self.other.values:
            return None
        return speed(self.point) / speed(self.other) if speed(self.other) > 0 else None

    @property
    def judged_by(self) -> str | None:
        """INTERVALS where both rows have one: they say how far apart the two speeds may be by
        the runs' own noise; else BAND. None where there is no ratio to judge."""
        if self.ratio is None:
            return None
        return BAND if overlap(self.point, self.other) is None else INTERVALS

    @property
    def speed_flag(self) -> str | None:
        if self.point.valid != self.other.valid:
            return VALID_THERE if self.other.valid else "valid only here"
        if (ratio := self.ratio) is None:
            return None
        if self.judged_by == INTERVALS:
            apart = not overlap(self.point, self.other)
        else:
            # rounded: 1100 / 1000 is 1.1000000000000001 in floating point, and 10 % is in
            apart = round(abs(ratio - 1), 9) > THRESHOLD
        if apart:
            return SLOWER if ratio < 1 else "faster"
        return None

    @property
    def parity(self) -> loss.Parity | None:
        """The two first-step losses against rounding's tolerance; None without both."""
        return loss.parity(
            self.point.loss, self.other.loss, (self.point.identity, self.other.identity)
        )

    @property
    def loss_flags(self) -> tuple[str, ...]:
        """The first-step losses apart beyond rounding; a loss not finite, or rising, in one
        space only."""
        found = [] if (p := self.parity) is None or p.holds else [LOSS_DIFFERS]
        here, there = self.point.loss.problem, self.other.loss.problem
        if here and here != there:
            found.append(f"{_failure(self.point.loss)} here")
        if there and there != here:
            found.append(f"{_failure(self.other.loss)} there")
        return tuple(found)

    @property
    def flag(self) -> str | None:
        """Every way the two rows differ beyond their noise, in words; None if none."""
        return ", ".join(f for f in (self.speed_flag, *self.loss_flags) if f) or None

    @property
    def machine_differences(self) -> tuple[tuple[str, str, str], ...]:
        return machine.differences(self.point.machine, self.other.machine)


@dataclasses.dataclass(frozen=True)
class Comparison:
    other_name: str
    pairs: tuple[Pair, ...]
    # (field, value here, value there): what the two spaces differ in by design
    differing: tuple[tuple[str, str, str], ...]
    only_here: int  # configurations without a counterpart
    only_there: int

    @property
    def flagged(self) -> tuple[Pair, ...]:
        return tuple(p for p in self.pairs if p.flag)

    def pair_of(self, point: Point) -> Pair | None:
        return next((p for p in self.pairs if p.point is point), None)

    @property
    def machines_known(self) -> bool:
        """Whether any pair has both rows' machines (a space read through ado's API)."""
        return any(p.point.machine and p.other.machine for p in self.pairs)

    @property
    def machine_differences(self) -> tuple[tuple[tuple[str, str, str], int], ...]:
        """Each (what, here, there) some pairs differ in, with how many pairs."""
        counts: dict[tuple[str, str, str], int] = {}
        for pair in self.pairs:
            for difference in pair.machine_differences:
                counts[difference] = counts.get(difference, 0) + 1
        return tuple(counts.items())


def compare(table: SpaceTable, other: SpaceTable, other_name: str) -> Comparison:
    mine, theirs = (
        [dict(p.identity) for p in table.points],
        [dict(p.identity) for p in other.points],
    )
    differing = _differing(mine, theirs)
    ignored = {name for name, _, _ in differing}

    def key(identity: dict[str, str]) -> tuple[tuple[str, str], ...]:
        return tuple((k, v) for k, v in sorted(identity.items()) if k not in ignored)

    there = {key(i): p for i, p in zip(theirs, other.points, strict=True)}
    pairs = tuple(
        Pair(p, there[key(i)]) for i, p in zip(mine, table.points, strict=True) if key(i) in there
    )
    if not pairs:
        fields = sorted({k for i in mine + theirs for k in i})
        raise TableError(
            f"--compare {other_name}: no configuration matches one of the main space's; they "
            "must agree on every field that is not fixed to one value in each (compared on: "
            f"{', '.join(f for f in fields if f not in ignored)})"
        )
    return Comparison(
        other_name, pairs, differing, len(mine) - len(pairs), len(theirs) - len(pairs)
    )


def _differing(mine: list[dict[str, str]], theirs: list[dict[str, str]]):
    found = []
    for name in sorted({k for i in mine + theirs for k in i} - {X, LINE, ROW}):
        here, there = {i.get(name, "") for i in mine}, {i.get(name, "") for i in theirs}
        if len(here) == len(there) == 1 and here != there:
            found.append((name, next(iter(here)) or "(unset)", next(iter(there)) or "(unset)"))
    return tuple(found)
