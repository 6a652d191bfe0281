"""Whether a series shows a monotonic trend: Mann-Kendall's test. Pure.

The rank's stop policy asks it when warm-up has ended: while step times still fall (kernels
being tuned, the allocator growing its pools, data workers filling their queues) or rise (a
device heating up to its thermal limit), the figure is not yet the one a long run settles at.
Mann-Kendall (Mann, "Nonparametric tests against trend", Econometrica 1945; Kendall, "Rank
Correlation Methods", 1975) is the standard test for it:

- it compares only the order of the values, so no distribution of step times is assumed and
  one slow step (a garbage collection, a logging flush) moves the statistic by at most n - 1
  of its n(n - 1)/2 pairs: an outlier cannot fake a trend nor hide one;
- it needs no model of the warm-up's shape (exponential, stepwise, linear all count), unlike
  a fitted slope, which a single outlier can tilt.

S = sum over pairs i < j of sign(x_j - x_i); under no trend S has mean 0 and variance
(n(n - 1)(2n + 5) - sum over tied groups of t(t - 1)(2t + 5)) / 18, and (S -/+ 1) / sqrt(var)
(continuity-corrected) is standard normal from n = 10 on (Kendall 1975, ch. 4): the test is
two-sided at 5 %, |Z| > 1.959964.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence

Z_975 = 1.959964
"""The standard normal's 97.5 % quantile: a two-sided test at 5 %."""
MIN_LENGTH = 10
"""Below 10 values S's normal approximation is poor (Kendall 1975)."""


@dataclasses.dataclass(frozen=True)
class Trend:
    s: int
    z: float

    @property
    def significant(self) -> bool:
        return abs(self.z) > Z_975


def mann_kendall(values: Sequence[float]) -> Trend:
    """Mann-Kendall's S and continuity-corrected Z of `values`, in order; at least MIN_LENGTH."""
    n = len(values)
    if n < MIN_LENGTH:
        raise ValueError(f"Mann-Kendall's normal approximation needs {MIN_LENGTH} values, got {n}")
    s = sum(
        (values[j] > values[i]) - (values[j] < values[i]) for i in range(n) for j in range(i + 1, n)
    )
    ties = sum(t * (t - 1) * (2 * t + 5) for t in Counter(values).values())
    variance = (n * (n - 1) * (2 * n + 5) - ties) / 18
    # S = 0 (every value equal among them, where the variance is 0 too): no trend either way
    z = (s - math.copysign(1, s)) / math.sqrt(variance) if s else 0.0
    return Trend(s, z)
