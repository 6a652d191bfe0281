"""What one measurement costs before it runs: its training seconds under each stop method, from
the predicted step time, and what it costs apart from training (loading the model, building a
package environment). Pure arithmetic.

- time-bounded (`stop_after_seconds`): exactly that;
- step-bounded (`max_steps`): the steps times the predicted step time;
- the spec's WARMUP_60S_STABLE_120S_OR_10_STEPS: whole steps until the warm-up's 60 s, then whole
  steps until both 120 s and 10 steps have passed;
- STEADY_CI95_1PCT: the steps it needs where the step time is steady (the first step, the
  trend test's window, then the interval's floor of steps), at most its cap;
- bounded by epochs: the dataset's entries over the samples of a step, times the epochs.

Whichever limit comes first ends training, as the trainer's policies do (trainer/stopping.py).
"""

from __future__ import annotations

import dataclasses
import math

from ado_actuators.sfttrainer.catalog.datasets import get_shape
from ado_actuators.sfttrainer.catalog.entity import EntityValues
from ado_actuators.sfttrainer.trainer.steady import (
    MIN_STEADY_STEPS,
    STEADY_CI95_1PCT,
    WARMUP_WINDOW,
)
from ado_actuators.sfttrainer.trainer.stopping import (
    WARMUP_60S_STABLE_120S_OR_10_STEPS,
    WarmupThenStable,
)

LOAD_GBPS = 1.0
"""Bytes per second a node reads a checkpoint at (a shared volume): an assumption, not a
measurement; the bill states it."""
START_SECONDS = 8.5
"""From the launch to the first step, apart from reading the weights: benchmarks/
time_to_first_step.py's 8.5 s on the tiny model (README, Performance)."""
ENVIRONMENT_BUILD_SECONDS = 55.0
"""One package environment built on one node (match_exact_dependencies false): 40-55 s
measured on the 2-core test machine (README); an exact build compiling flash-attn takes far
longer."""


@dataclasses.dataclass(frozen=True)
class TrainingTime:
    seconds: float | None
    how: str  # how it was estimated, in the words the row prints
    exact: bool = False


def _spec_method(step: float) -> float:
    method = WarmupThenStable()
    warmup = math.ceil(method.warmup / step) * step
    stable = max(math.ceil(method.stable_seconds / step), method.stable_steps) * step
    return warmup + stable


def _steady(step: float, cap: float) -> float:
    steps = 1 + WARMUP_WINDOW + MIN_STEADY_STEPS
    return min(cap, steps * step)


def _epochs(values: EntityValues, step: float) -> float:
    assert values.dataset_id is not None  # catalog.domain_problems refused None
    entries = get_shape(values.dataset_id).entries
    per_step = max(1, values.batch_size) * max(1, values.gradient_accumulation_steps)
    return math.ceil(entries / per_step) * values.num_train_epochs * step


def training_time(values: EntityValues, step: float | None, repeats: int = 1) -> TrainingTime:
    """The seconds one measurement (`repeats` runs of it) trains for; `step` is the predicted
    seconds of one optimizer step, None where none is predicted."""
    method = (values.auto_stop_method or "").upper()
    limit = values.stop_after_seconds if values.stop_after_seconds > 0 else math.inf
    if method == WARMUP_60S_STABLE_120S_OR_10_STEPS:
        found = (
            (_spec_method(step), f"{WARMUP_60S_STABLE_120S_OR_10_STEPS} from the predicted step")
            if step
            else None
        )
    elif method == STEADY_CI95_1PCT:
        cap = values.auto_stop_max_seconds
        found = (
            (_steady(step, cap), f"{STEADY_CI95_1PCT} from the predicted step")
            if step
            else ((cap, f"{STEADY_CI95_1PCT}: its cap"))
        )
    elif values.max_steps and values.max_steps > 0:
        found = (values.max_steps * step, "max_steps x the predicted step") if step else None
    elif limit < math.inf:
        found = None
    else:
        found = (_epochs(values, step), "epochs x the predicted step") if step else None
    if found is None:
        if limit < math.inf:
            return TrainingTime(limit * repeats, "stop_after_seconds: exact", exact=True)
        return TrainingTime(None, "no step time predicted")
    seconds, how = found
    if limit < seconds:
        return TrainingTime(limit * repeats, "stop_after_seconds, before the method's end")
    return TrainingTime(seconds * repeats, how)


def start_seconds(checkpoint_bytes: float) -> float:
    """Seconds from launch to the first step: the process start and reading the weights."""
    return START_SECONDS + checkpoint_bytes / (LOAD_GBPS * 1e9)
