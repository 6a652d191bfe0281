"""Step-time spread on recorded step times, against hand-computed figures."""

import pytest

from ado_actuators.sfttrainer.metrics.steps import percentile, step_time_properties


def test_percentiles_interpolate_between_ranks():
    times = [1.0, 1.2, 1.1, 1.4, 3.0]  # sorted: 1.0 1.1 1.2 1.4 3.0
    assert percentile(times, 0.5) == pytest.approx(1.2)
    # position 0.9 * 4 = 3.6: 1.4 + 0.6 * (3.0 - 1.4) = 2.36
    assert percentile(times, 0.9) == pytest.approx(2.36)


def test_cv_is_population_spread_over_mean_in_percent():
    props = step_time_properties([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])  # mean 5, pstdev 2
    assert props["train_step_seconds_cv_percent"] == pytest.approx(40.0)
    assert props["train_step_seconds_p50"] == pytest.approx(4.5)
    assert props["train_step_seconds_p90"] == pytest.approx(7.0 + 0.3 * 2.0)


def test_one_step_has_no_spread():
    assert step_time_properties([0.5]) == {
        "train_step_seconds_p50": 0.5,
        "train_step_seconds_p90": 0.5,
        "train_step_seconds_cv_percent": 0.0,
    }


def test_two_steps_already_have_a_spread():
    assert step_time_properties([1.0, 3.0])["train_step_seconds_cv_percent"] == pytest.approx(50.0)
    # sub-second steps (a small model on a GPU) are the common case, not a corner
    assert step_time_properties([0.2, 0.4])["train_step_seconds_cv_percent"] == pytest.approx(
        100 / 3
    )


def test_steps_shorter_than_the_clocks_resolution_have_no_spread():
    assert step_time_properties([0.0, 0.0]) == {
        "train_step_seconds_p50": 0.0,
        "train_step_seconds_p90": 0.0,
        "train_step_seconds_cv_percent": 0.0,
    }


def test_no_step_has_no_percentile():
    with pytest.raises(ValueError, match=r"^percentile of no values$"):
        percentile([], 0.5)
