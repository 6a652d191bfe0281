"""The spread of optimisation-step times: p50, p90 and coefficient of variation. Pure.

A step's time is HF's step boundary to boundary (trainer/callback.py): from on_step_begin,
after the step's micro-batches were fetched, to on_step_end, after the optimizer step.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, R's type 7)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def step_time_properties(durations: Sequence[float]) -> dict[str, float]:
    """cv is the population standard deviation over the mean, in percent (0 for one step)."""
    mean = statistics.fmean(durations)
    spread = statistics.pstdev(durations) if len(durations) > 1 else 0.0
    return {
        "train_step_seconds_p50": percentile(durations, 0.5),
        "train_step_seconds_p90": percentile(durations, 0.9),
        "train_step_seconds_cv_percent": 100.0 * spread / mean if mean > 0 else 0.0,
    }
