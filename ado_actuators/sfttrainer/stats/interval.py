"""An interval about a figure, its default coverage and Student's t quantile, declared once for
the package: the calibration's predicted intervals (space/calibration.py), the guided walk's
comparisons at the coverage its user chose (space/guided_rule.py), and the batch-means
interval of a measured rate (batch_means.py, whose table of 95 % quantiles is this quantile's
exact values at the points the rank's stop decision needs). Standard library only."""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

COVERAGE = 0.95
"""The coverage of every interval the package states unless its user asks for another."""


def t_quantile(p: float, freedom: float) -> float:
    """Student's t quantile (Hill's expansion about the normal's, within 0.2 % from 3 degrees
    of freedom up: 3.1786 for 3.1824 at 3, exact in the limit)."""
    z = NormalDist().inv_cdf(p)
    if math.isinf(freedom):
        return z
    n = freedom
    return (
        z
        + (z**3 + z) / (4 * n)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * n**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * n**4)
    )


@dataclasses.dataclass(frozen=True)
class Interval:
    """A figure and its interval (low, high) at `coverage`."""

    central: float
    low: float
    high: float
    coverage: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2
