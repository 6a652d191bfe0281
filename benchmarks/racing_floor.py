"""What racing's floor of measured steps costs in ties dropped (issue 54): the product's own
stop decision (stopping/racing.race over stats/batch_means.throughput_interval) run on sampled
step times, the floor at 6 measured steps (the batch-means interval's least), 10 and 20 (the
shipped MIN_STEADY_STEPS).

Each run steps until its interval reaches STEADY_CI95_1PCT's 1 % (from 20 steps) or 60 steps,
raced at every step end (a race lost at the step the target is reached counts as raced, as the
row reports it) against an incumbent of 1,000 tokens/s +/- 1 %; the run's true speed is
the incumbent's times 1 + delta. Steps vary by 2 % (the design figure the floor was set for):
independent and normal, AR(1) with coefficient 0.3 (a slow spell lasting a few steps), and
Student's t with 3 degrees of freedom (rare long steps). Printed: the share of runs raced. A run
at delta 0 is a true tie, at -1 % a tie by the answers' 2 % band: a walk measuring ties should
not race either. Seeded: the same figures every run (about 1 minute).

    python benchmarks/racing_floor.py
"""

from __future__ import annotations

import random

from ado_actuators.sfttrainer.stats.batch_means import MIN_STEPS, throughput_interval
from ado_actuators.sfttrainer.stopping.racing import Incumbent, Standing, race
from ado_actuators.sfttrainer.stopping.steady import MIN_STEADY_STEPS, TARGET_PERCENT

CV = 0.02
MAX_STEPS = 60
TRIALS = 2000
FLOORS = (MIN_STEPS, 10, MIN_STEADY_STEPS)
INCUMBENT = Incumbent(1000.0, 1.0)


def _noise(rng: random.Random, heavy: bool) -> float:
    """One standard draw: normal, or Student's t with 3 degrees of freedom scaled to unit
    variance (its variance is 3)."""
    z = rng.gauss(0, 1)
    if not heavy:
        return z
    chi = sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3
    return z / chi**0.5 / 3**0.5


def raced_share(delta: float, floor: int, rho: float, heavy: bool, seed: int = 1) -> float:
    """The share of TRIALS runs whose race is lost before their own target or MAX_STEPS."""
    rng = random.Random(seed)
    raced = 0
    for _ in range(TRIALS):
        seconds: list[float] = []
        carried = 0.0
        for n in range(1, MAX_STEPS + 1):
            carried = rho * carried + (1 - rho**2) ** 0.5 * _noise(rng, heavy)
            seconds.append((1 + CV * carried) / (1 + delta))
            if n < MIN_STEPS:
                continue
            interval = throughput_interval(seconds, [1000] * n)
            standing = Standing(1000 * n / sum(seconds), interval.percent, True, n)
            if race(INCUMBENT, standing, True, min_steps=floor).lost:
                raced += 1  # at the step its own target is reached too, the row says raced
                break  # (stopping/raced.py's commit)
            if n >= MIN_STEADY_STEPS and (interval.percent or 100.0) <= TARGET_PERCENT:
                break  # the run's own stop: measured whole
    return raced / TRIALS


def main() -> int:
    print(f"share of runs raced, steps of {CV:.0%} CV, against 1,000 tokens/s +/- 1 %:")
    for rho, heavy, name in (
        (0.0, False, "independent"),
        (0.3, False, "AR(1) 0.3"),
        (0.0, True, "t(3)"),
    ):
        for delta in (0.0, -0.01, -0.02, -0.03, -0.05):
            shares = "  ".join(
                f"floor {f}: {raced_share(delta, f, rho, heavy):6.1%}" for f in FLOORS
            )
            print(f"  {name:11} {delta:+.0%} behind: {shares}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
