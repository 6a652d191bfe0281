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

Whichever limit comes first ends training, as the trainer's policies do (stopping/any_of.py).
The two auto-stop methods' seconds are their own modules' (stopping/methods.py): the bill asks
the method the entity names.
"""

from __future__ import annotations

import dataclasses
import math

from ado_actuators.sfttrainer.catalog.datasets import get_shape
from ado_actuators.sfttrainer.catalog.entity import EntityValues
from ado_actuators.sfttrainer.stopping.method import Expected
from ado_actuators.sfttrainer.stopping.methods import method_named

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


def _epochs(values: EntityValues, step: float) -> float:
    assert values.dataset_id is not None  # catalog.domain_problems refused None
    entries = get_shape(values.dataset_id).entries
    per_step = max(1, values.batch_size) * max(1, values.gradient_accumulation_steps)
    return math.ceil(entries / per_step) * values.num_train_epochs * step


def training_time(values: EntityValues, step: float | None, repeats: int = 1) -> TrainingTime:
    """The seconds one measurement (`repeats` runs of it) trains for; `step` is the predicted
    seconds of one optimizer step, None where none is predicted."""
    limit = values.stop_after_seconds if values.stop_after_seconds > 0 else math.inf
    found = _until_the_end(values, step, limit)
    if found is None:
        if limit < math.inf:
            return TrainingTime(limit * repeats, "stop_after_seconds: exact", exact=True)
        return TrainingTime(None, "no step time predicted")
    if limit < found.seconds:
        return TrainingTime(limit * repeats, "stop_after_seconds, before the method's end")
    return TrainingTime(found.seconds * repeats, found.how)


def _until_the_end(values: EntityValues, step: float | None, limit: float) -> Expected | None:
    """The seconds to the end the configuration sets apart from stop_after_seconds (`limit`):
    its auto-stop method's own expectation, else max_steps, else its epochs; None where that
    end cannot be told (no step predicted, or only the time limit bounds it)."""
    method = method_named(values.auto_stop_method)
    if method is not None:
        return method.expected(step, values.auto_stop_max_seconds)
    if not step:
        return None
    if values.max_steps and values.max_steps > 0:
        return Expected(values.max_steps * step, "max_steps x the predicted step")
    if limit < math.inf:
        return None
    return Expected(_epochs(values, step), "epochs x the predicted step")


def start_seconds(checkpoint_bytes: float) -> float:
    """Seconds from launch to the first step: the process start and reading the weights."""
    return START_SECONDS + checkpoint_bytes / (LOAD_GBPS * 1e9)
