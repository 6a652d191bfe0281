"""Calibration from a device's own rows (ado_actuators/sfttrainer/ledger/calibration.py) on
devices whose rows fitted nothing: calibrate on k rows, predict the rest, for k = 0, 1, 2, 4.

The k rows are those the guided sampler measures first: the fastest predicted upper bound, the
calibration redone after each row (ledger/guided.py's order). Two sets of devices:

- fms-acceleration's L40 table (benchmarks/data/fms_acceleration_l40.csv): no constant was
  fitted on it; the speed model prices it by what the L40 achieves;
- the A100 tables with each model family left out: the family is predicted with the constants
  fitted on the others, then calibrated on its own first rows (the family is the "device").

Reported per k: the median |error| of the rows not used, the share of them inside their 95 %
interval, and the interval's median half-width. Goals: median <= 10 % after 2 rows, <= 6 %
after 4; coverage >= 90 %; on the A100 families, no worse than the uncalibrated median.

    python benchmarks/calibration.py
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable

from throughput_prediction import FITTED, Observed, fit, load, load_l40, predicted

from ado_actuators.sfttrainer.ledger.calibration import (
    REFERENCE_DEVICE,
    Row,
    calibrate,
    prior_for,
)
from ado_actuators.sfttrainer.ledger.guided import measuring_order

KS = (0, 1, 2, 4)
Scored = tuple[float, bool, float, float]
"""A predicted row: its calibrated error, whether its 95 % interval holds the measured figure,
the interval's half-width over the prediction, and its error uncalibrated."""


def kind(observed: Observed) -> str:
    """What the calibration tells apart on a device: the training method (ledger/guided.py's
    Candidate.method)."""
    return observed.run.method


def score(
    runs: list[Observed], guess: Callable[[Observed], float], device: str, k: int
) -> list[Scored]:
    """Each run past the first k measured, scored."""
    prior = prior_for(device)
    rows = {
        id(o): Row(device, guess(o) * o.run.gpus, o.tokens_per_second * o.run.gpus, kind(o))
        for o in runs
    }
    order = measuring_order(
        [(id(o), rows[id(o)].predicted, kind(o)) for o in runs],
        lambda done: calibrate(device, [rows[i] for i in done], prior),
        k,
    )
    calibration = calibrate(device, [rows[i] for i in order], prior)
    found = []
    for o in runs:
        if id(o) in order:
            continue
        row = rows[id(o)]
        interval = calibration.interval(row.predicted, method=row.method)
        found.append(
            (
                interval.central / row.measured - 1,
                interval.low <= row.measured <= interval.high,
                interval.half_width / interval.central,
                row.predicted / row.measured - 1,
            )
        )
    return found


def line(label: str, k: int, found: list[Scored]) -> str:
    median = statistics.median(abs(e) for e, *_ in found)
    covered = sum(c for _, c, *_ in found) / len(found)
    width = statistics.median(w for _, _, w, _ in found)
    before = statistics.median(abs(b) for *_, b in found)
    return (
        f"  {label:<13} k={k}: {len(found):>3} rows predicted, median |error| {median:5.1%} "
        f"(uncalibrated {before:5.1%}), inside the 95 % interval {covered:5.1%}, median "
        f"half-width {width:5.1%}"
    )


def l40() -> dict[int, list[Scored]]:
    runs = load_l40()
    print("L40 (fms-acceleration, nothing fitted on it):")
    found = {}
    for k in KS:
        found[k] = score(runs, lambda o: predicted(o, FITTED), "NVIDIA-L40", k)
        print(line("L40", k, found[k]))
    return found


def a100_families() -> dict[int, list[Scored]]:
    runs = load()
    print("A100, each family left out of the fit, calibrated on its own first rows:")
    pooled: dict[int, list[Scored]] = {k: [] for k in KS}
    for family in sorted({o.family for o in runs}):
        fitted = fit([o for o in runs if o.family != family])
        mine = [o for o in runs if o.family == family]
        for k in KS:
            found = score(mine, lambda o, f=fitted: predicted(o, f), REFERENCE_DEVICE, k)
            pooled[k] += found
            print(line(family, k, found))
    for k in KS:
        print(line("all families", k, pooled[k]))
    return pooled


def main() -> int:
    on_l40, on_a100 = l40(), a100_families()

    def median(found: list[Scored]) -> float:
        return statistics.median(abs(e) for e, *_ in found)

    def before(found: list[Scored]) -> float:
        return statistics.median(abs(b) for *_, b in found)

    def covered(found: list[Scored]) -> float:
        return sum(c for _, c, *_ in found) / len(found)

    goals = {
        "L40 median <= 10 % after 2 rows": median(on_l40[2]) <= 0.10,
        "L40 median <= 6 % after 4 rows": median(on_l40[4]) <= 0.06,
        "coverage >= 90 % at every k": all(
            covered(f) >= 0.90 for found in (on_l40, on_a100) for f in found.values()
        ),
        "A100 families no worse than uncalibrated, on the same rows": all(
            median(on_a100[k]) <= before(on_a100[k]) + 1e-9 for k in KS
        ),
    }
    for goal, met in goals.items():
        print(f"goal: {goal}: {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
