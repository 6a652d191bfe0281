"""How precise a throughput is: the 95 % confidence interval of dataset_tokens_per_second,
counted over effective samples. Pure.

The interval itself is stats/batch_means.py's; this module turns rank reports' steps into the
series it reads.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from ado_actuators.sfttrainer.contract.trainer_io import StepTiming


def step_series(per_rank: Iterable[Sequence[StepTiming]]) -> tuple[list[float], list[int]]:
    """Per step of the window, by step number: the seconds it added to the window (from the
    previous step's end, or the window's first start, to the end of its slowest rank) and
    its dataset tokens over every rank. The seconds sum to the window's span."""
    ends: dict[int, float] = {}
    tokens: dict[int, int] = defaultdict(int)
    start = math.inf
    for steps in per_rank:
        for step in steps:
            ends[step.step] = max(ends.get(step.step, step.end), step.end)
            tokens[step.step] += step.dataset_tokens
            start = min(start, step.start)
    seconds = []
    for number in sorted(ends):
        seconds.append(ends[number] - start)
        start = ends[number]
    return seconds, [tokens[number] for number in sorted(ends)]
