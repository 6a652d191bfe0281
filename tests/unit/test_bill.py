"""The training seconds of one measurement under each stop method, by hand (space/bill.py)."""

from __future__ import annotations

import pytest

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.space.bill import (
    LOAD_GBPS,
    START_SECONDS,
    start_seconds,
    training_time,
)


def values(**fields):
    return entity_values(
        {
            "model_name": "m",
            "model_max_length": 8,
            "batch_size": 4,
            "number_gpus": 2,
            "gpu_model": "L40S",
            "gradient_accumulation_steps": 2,
            **fields,
        }
    )


def test_time_bounded_is_exact_with_or_without_a_step_time():
    assert training_time(values(stop_after_seconds=900.0), None).seconds == 900
    found = training_time(values(stop_after_seconds=900.0), 2.0)
    assert (found.seconds, found.exact) == (900, True)


def test_step_bounded_is_the_steps_times_the_predicted_step():
    assert training_time(values(max_steps=50), 2.0).seconds == 100
    # a time limit that comes first ends it
    assert training_time(values(max_steps=50, stop_after_seconds=30.0), 2.0).seconds == 30
    assert training_time(values(max_steps=50), None).seconds is None


def test_the_spec_method_is_whole_steps_to_60_s_then_to_both_120_s_and_10_steps():
    spec = "WARMUP_60S_STABLE_120S_OR_10_STEPS"
    assert training_time(values(auto_stop_method=spec), 2.0).seconds == 60 + 120
    # 7 s steps: 9 steps to pass 60 s (63 s), then 18 steps to pass 120 s (126 s)
    assert training_time(values(auto_stop_method=spec), 7.0).seconds == 63 + 126
    # 20 s steps: 3 steps of warm-up, then 10 steps outlast 120 s
    assert training_time(values(auto_stop_method=spec), 20.0).seconds == 60 + 200


def test_steady_is_its_steps_at_most_its_cap():
    steady = "STEADY_CI95_1PCT"
    # the first step, the trend test's 10, then the interval's floor of 20
    assert training_time(values(auto_stop_method=steady), 2.0).seconds == 31 * 2
    assert training_time(values(auto_stop_method=steady), 5.0).seconds == 80  # the default cap
    capped = values(auto_stop_method=steady, auto_stop_max_seconds=1800.0)
    assert training_time(capped, 5.0).seconds == 155
    assert training_time(capped, None).seconds == 1800


def test_epochs_are_the_dataset_over_the_samples_of_a_step():
    # 4096 entries over batch 4 x accumulation 2 = 512 steps, twice
    assert training_time(values(num_train_epochs=2.0), 0.5).seconds == 512 * 2 * 0.5


def test_repeats_multiply_and_the_start_is_the_weights_read_apart():
    assert training_time(values(max_steps=5), 2.0, repeats=5).seconds == 50
    assert start_seconds(2e9) == pytest.approx(START_SECONDS + 2 / LOAD_GBPS)
