"""The interval of a throughput over effective samples (stats/batch_means.py, metrics/precision.py), against
hand-computed figures. t(2) = 4.302653 and t(8) = 2.306004 are Student's 97.5 % quantiles."""

import math

import pytest

from ado_actuators.sfttrainer.contract.trainer_io import StepTiming
from ado_actuators.sfttrainer.metrics.precision import step_series
from ado_actuators.sfttrainer.stats.batch_means import (
    T_975,
    Interval,
    batch_means_interval,
    batching,
    throughput_interval,
)

T2, T8 = 4.302653, 2.306004
TOO_FEW = "measured step(s): an interval needs at least 6 (3 batches of 2 steps)"


def coverage(t: float, nu: int) -> float:
    """P(|T| <= t) for Student's t with nu degrees of freedom, in closed form (Abramowitz &
    Stegun 26.7.3 and 26.7.4): independent of the table it checks."""
    theta = math.atan(t / math.sqrt(nu))
    c, s = math.cos(theta), math.sin(theta)
    if nu % 2 == 0:  # sin(theta) (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ... up to cos^(nu-2))
        term = total = 1.0
        for j in range(2, nu, 2):
            term *= (j - 1) / j * c * c
            total += term
        return s * total
    term = total = c  # 2/pi (theta + sin(theta) (cos + 2/3 cos^3 + ... up to cos^(nu-2)))
    for j in range(3, nu - 1, 2):
        term *= (j - 1) / j * c * c
        total += term
    return 2 / math.pi * (theta + s * total)


def test_the_t_table_holds_the_975_quantile_of_every_count_of_batches_less_one():
    # the closed form's own checks, outside the table: 30 degrees of freedom, and the normal
    assert coverage(2.042272, 30) == pytest.approx(0.95, abs=1e-7)
    assert coverage(1.959964, 10**6) == pytest.approx(0.95, abs=1e-6)
    for nu, t in T_975.items():
        assert coverage(t, nu) == pytest.approx(0.95, abs=1e-7), nu
    assert {batching(n)[1] - 1 for n in range(6, 3000)} == set(T_975) == set(range(2, 30))


@pytest.mark.parametrize(
    "steps, shape",
    [
        (0, None),
        (3, None),
        (4, None),
        (5, None),  # batches of 1 step, or only 2 batches
        (6, (2, 3)),
        (7, (2, 3)),
        (8, (2, 4)),
        (9, (3, 3)),
        (15, (3, 5)),
        (16, (4, 4)),
        (899, (30, 29)),
        (900, (30, 30)),  # floor(sqrt(n)) steps a batch up to 30 batches
        (901, (31, 29)),
        (930, (31, 30)),
        (1000, (34, 29)),  # then at most 30 batches
    ],
)
def test_batches_of_sqrt_n_steps_at_least_3_of_2_steps_at_most_30(steps, shape):
    assert batching(steps) == shape


def test_every_count_of_steps_from_6_on_has_3_to_30_batches_of_2_steps_or_more():
    for n in range(6, 5000):
        size, count = batching(n)
        assert size >= 2 and 3 <= count <= 30 and n - size * count < size, n


def constant_tokens(seconds, per_step=100):
    return throughput_interval(seconds, [per_step] * len(seconds))


def test_a_steady_series_is_precise_to_its_batches_spread():
    assert constant_tokens([0.5] * 6) == Interval(0.0, None, 2, 3, 0)
    # sub-second steps; batches of 3 take 0.29, 0.30 and 0.31 s: mean 0.30, sd 0.01
    found = constant_tokens([0.1, 0.1, 0.09, 0.1, 0.1, 0.1, 0.1, 0.1, 0.11])
    assert found.percent == pytest.approx(100 * T2 * 0.01 / math.sqrt(3) / 0.30, rel=1e-12)
    assert found.percent == pytest.approx(8.2804596, rel=1e-7)
    assert (found.why, found.steps_per_batch, found.batches, found.steps_left_out) == (
        None,
        3,
        3,
        0,
    )


@pytest.mark.parametrize("where", [0, 4, 8])
def test_one_outlier_widens_the_interval_wherever_it_falls(where):
    seconds = [1.0] * 9
    seconds[where] = 4.0
    # batches of 3 take 3, 3 and 6 s (in some order): mean 4, sd sqrt(3); half-width
    # t(2) sqrt(3) / sqrt(3) = t(2) s of 4 s
    assert constant_tokens(seconds) == Interval(pytest.approx(25 * T2, rel=1e-12), None, 3, 3, 0)


def test_correlated_steps_widen_the_interval_beyond_the_naive_one():
    drift = [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0]  # slow steps come together
    tokens = [100] * 9
    # batches: 3, 6, 9 s: mean 6, sd 3 -> t(2) 3 / sqrt(3) of 6
    batched = throughput_interval(drift, tokens)
    assert batched.percent == pytest.approx(100 * T2 * 3 / math.sqrt(3) / 6, rel=1e-12)
    assert batched.percent == pytest.approx(124.2068934, rel=1e-9)
    # single steps as if independent: mean 2, sd sqrt(6 / 8) -> t(8) sd / sqrt(9) of 2
    naive = batch_means_interval(drift, tokens, 1)
    assert naive == Interval(
        pytest.approx(100 * T8 * math.sqrt(0.75) / 3 / 2, rel=1e-12), None, 1, 9, 0
    )
    assert naive.percent == pytest.approx(33.2843008, rel=1e-7)
    assert batched.percent > 3 * naive.percent


def test_a_late_end_stamp_shortens_the_next_step_and_cancels_within_a_batch():
    # step 3 ended 0.5 s late, so step 4 took 0.5 s less: the window's span did not change
    seconds = [1.0, 1.0, 1.5, 0.5, 1.0, 1.0]
    assert constant_tokens(seconds) == Interval(0.0, None, 2, 3, 0)
    assert batch_means_interval(seconds, [100] * 6, 1).percent > 0


def test_the_first_steps_that_fill_no_batch_are_left_out():
    # 10 steps: 3 batches of 3, the first step (nearest the warm-up) in none of them
    assert constant_tokens([4.0] + [1.0] * 9) == Interval(0.0, None, 3, 3, 1)
    assert constant_tokens([1.0] * 9 + [4.0]).percent == pytest.approx(25 * T2, rel=1e-12)
    # 901 steps: 29 batches of 31, the first 2 left out
    assert constant_tokens([50.0, 50.0] + [0.2] * 899) == Interval(
        pytest.approx(0.0, abs=1e-9), None, 31, 29, 2
    )


def test_tokens_that_vary_count_as_the_ratio_of_two_sums():
    # every step 1 s, batches of 2 steps with 180, 200, 220 tokens: rate 100/s, residuals
    # -20, 0, 20, sd 20 -> t(2) 20 / sqrt(3) tokens of a mean 200
    found = throughput_interval([1.0] * 6, [90, 90, 100, 100, 110, 110])
    assert found == Interval(
        pytest.approx(100 * T2 * 20 / math.sqrt(3) / 200, rel=1e-12), None, 2, 3, 0
    )
    assert found.percent == pytest.approx(24.8413787, rel=1e-7)
    # longer steps that carry proportionally more tokens: the same 100 tokens/s throughout
    steady = throughput_interval([1.0, 1.0, 2.0, 2.0, 3.0, 3.0], [100, 100, 200, 200, 300, 300])
    assert steady == Interval(0.0, None, 2, 3, 0)


@pytest.mark.parametrize("steps", [0, 1, 5])
def test_too_few_steps_give_no_interval_and_say_why(steps):
    assert constant_tokens([1.0] * steps) == Interval(None, f"{steps} {TOO_FEW}")
    assert Interval(None, "why").metadata() is None


def test_no_time_or_no_token_gives_no_interval_and_says_why():
    why = "the measured steps took no measurable time or trained no token"
    assert constant_tokens([0.0] * 6) == Interval(None, why)
    assert constant_tokens([1.0] * 6, per_step=0) == Interval(None, why)


def test_the_metadata_say_how_the_interval_was_counted():
    found = constant_tokens([1.0] * 7)
    assert found.metadata() == {"steps_per_batch": 2, "batches": 3, "steps_left_out": 1}


def step(number, start, end, tokens):
    return StepTiming(step=number, start=start, end=end, dataset_tokens=tokens)


def test_a_step_ends_when_its_slowest_rank_ends_it_and_the_steps_add_up_to_the_window():
    rank0 = [step(1, 10.0, 12.0, 100), step(2, 12.0, 13.0, 110), step(3, 13.0, 14.5, 120)]
    rank1 = [step(3, 13.5, 14.0, 20), step(2, 12.5, 13.5, 10), step(1, 9.5, 11.0, 5)]  # any order
    seconds, tokens = step_series([rank0, rank1])
    # ends 12.0 (rank 0), 13.5 (rank 1), 14.5 (rank 0), from the first start 9.5 (rank 1)
    assert seconds == [2.5, 1.5, 1.0] and sum(seconds) == 14.5 - 9.5
    assert tokens == [105, 120, 140]
    assert step_series([]) == ([], []) and step_series([[], []]) == ([], [])
