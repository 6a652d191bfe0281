"""The 95 % confidence interval of a rate over a series of steps, counted over effective
samples (batch means). Pure: no import outside the standard library, so both the rank's stop
policy (trainer/) and the row's figures (metrics/) count it the same way.

The figure is the window's tokens over its span (metrics/aggregate.py), and that span is the
sum of what each step added to it (metrics/precision.py's `step_series`): a step ends when its slowest rank ends it,
so step k adds the time from step k-1's end (the window's first start, for the first step) to
step k's end, and the additions sum to `train_runtime` exactly. Consecutive steps are not
independent samples (a slow node, a thermal limit, a data block tokenised in the background
last for several steps; a late end stamp lengthens one step and shortens the next), so a
naive interval over single steps claims a precision the run does not have. Non-overlapping
batch means count the effective samples instead: the steps are cut into consecutive batches,
each batch's tokens and seconds are one sample, and the interval has batches - 1 degrees of
freedom (Law, "Simulation Modeling and Analysis", 5th ed., sec. 9.5.3).

The batch size (`batching`): floor(sqrt(n)) steps, the rule that keeps batch means consistent
as runs grow (Jones, Haran, Caffo & Neath, "Fixed-width output analysis for Markov chain Monte
Carlo", JASA 2006), but never more than MAX_BATCHES batches: beyond 30 the interval narrows
little while shorter batches let more correlation through (Schmeiser, "Batch size effects in
the analysis of simulation output", Operations Research 1982, recommends 10 to 30). The steps
that do not fill a batch are the first ones, nearest the warm-up, and are left out.

The interval is that of a ratio (tokens over seconds: steps carry different tokens when
entries are shorter than model_max_length), by the delta method over the batches. When every
step carries the same tokens it is exactly the interval of the mean step time, relative to
its mean.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

MIN_BATCH_STEPS = 2
"""A batch of one step is the naive interval, blind to correlation between steps."""
MIN_BATCHES = 3
"""Two batches leave one degree of freedom: t = 12.7, an interval too wide to tell anything."""
MIN_STEPS = MIN_BATCHES * MIN_BATCH_STEPS
"""From 6 steps on, floor(sqrt(n)) >= 2 and n // floor(sqrt(n)) >= 3 (4 and 5 give 2
batches), so `batching` needs no other condition."""
MAX_BATCHES = 30
MIN_STEADY_STEPS = 20
"""No stop decision (a target reached, a race lost) on fewer measured steps: 20 steps make at
least 5 batches (t <= 2.78, so three batches that happen to agree cannot end a run), and exceed
the (t * CV / 1 %)^2 ~ 16 steps a 2 % coefficient of variation needs."""

T_975 = {
    2: 4.302653,
    3: 3.182446,
    4: 2.776445,
    5: 2.570582,
    6: 2.446912,
    7: 2.364624,
    8: 2.306004,
    9: 2.262157,
    10: 2.228139,
    11: 2.200985,
    12: 2.178813,
    13: 2.160369,
    14: 2.144787,
    15: 2.131450,
    16: 2.119905,
    17: 2.109816,
    18: 2.100922,
    19: 2.093024,
    20: 2.085963,
    21: 2.079614,
    22: 2.073873,
    23: 2.068658,
    24: 2.063899,
    25: 2.059539,
    26: 2.055529,
    27: 2.051831,
    28: 2.048407,
    29: 2.045230,
}
"""Student's t 97.5 % quantile by degrees of freedom, the two-sided 95 % interval's: every
count of batches `batching` gives (3 to 30) less one. Computed to 6 decimals (they agree with
any printed table, e.g. NIST/SEMATECH e-Handbook of Statistical Methods, 1.3.6.7.2);
tests/unit/test_precision.py checks each against the t distribution's closed form."""


@dataclasses.dataclass(frozen=True)
class Interval:
    """The interval's relative half-width, or why there is none."""

    percent: float | None
    why: str | None = None
    steps_per_batch: int = 0
    batches: int = 0
    steps_left_out: int = 0
    """The first steps, which do not fill a batch."""

    def metadata(self) -> dict[str, int] | None:
        """How the interval was counted, for the row's metadata; None without one."""
        if self.percent is None:
            return None
        return {
            "steps_per_batch": self.steps_per_batch,
            "batches": self.batches,
            "steps_left_out": self.steps_left_out,
        }


def batching(steps: int) -> tuple[int, int] | None:
    """(steps per batch, batches) for `steps` measured steps; None below MIN_STEPS."""
    if steps < MIN_STEPS:
        return None
    size = max(math.isqrt(steps), math.ceil(steps / MAX_BATCHES))
    return size, steps // size


def batch_means_interval(
    seconds: Sequence[float], tokens: Sequence[int], steps_per_batch: int
) -> Interval:
    """The 95 % interval of tokens per second over batches of `steps_per_batch` consecutive
    steps (the first steps, which fill no batch, left out), as a percent of the batches'
    tokens per second: t * s / sqrt(k) / mean tokens per batch, where s is the standard
    deviation of each batch's tokens less the rate times its seconds (the delta method's
    residuals) over k batches. k must be 3 to 30, the batches T_975 has a quantile for."""
    count = len(seconds) // steps_per_batch
    skip = len(seconds) - count * steps_per_batch
    spans = [
        range(skip + j * steps_per_batch, skip + (j + 1) * steps_per_batch) for j in range(count)
    ]
    times = [sum(seconds[i] for i in span) for span in spans]
    counts = [sum(tokens[i] for i in span) for span in spans]
    if sum(times) <= 0 or not any(counts):  # token counts are never negative
        return Interval(None, "the measured steps took no measurable time or trained no token")
    rate = sum(counts) / sum(times)
    spread = math.sqrt(sum((counts[j] - rate * times[j]) ** 2 for j in range(count)) / (count - 1))
    half_width = T_975[count - 1] * spread / math.sqrt(count)
    return Interval(100 * half_width / (sum(counts) / count), None, steps_per_batch, count, skip)


def throughput_interval(seconds: Sequence[float], tokens: Sequence[int]) -> Interval:
    """The interval of a rate from its steps' seconds and tokens, in batches of `batching`."""
    shape = batching(len(seconds))
    if shape is None:
        return Interval(
            None,
            f"{len(seconds)} measured step(s): an interval needs at least "
            f"{MIN_STEPS} ({MIN_BATCHES} batches of {MIN_BATCH_STEPS} steps)",
        )
    return batch_means_interval(seconds, tokens, shape[0])
