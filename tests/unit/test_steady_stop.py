"""STEADY_CI95_1PCT as a pure state machine on synthetic series (steady, trending, never
steady, one outlier, autocorrelated), and Mann-Kendall's arithmetic against hand figures."""

from __future__ import annotations

import functools
import math
import random

import pytest
import stop_drive

from ado_actuators.sfttrainer.contract.trainer_io import (
    AutoStopOutcome,
    RankOutcome,
    RankReport,
    StepTiming,
)
from ado_actuators.sfttrainer.execute.classify import auto_stop_note, launch_outcome
from ado_actuators.sfttrainer.execute.node import NodeRun
from ado_actuators.sfttrainer.stats.batch_means import throughput_interval
from ado_actuators.sfttrainer.stats.trend import Trend, mann_kendall
from ado_actuators.sfttrainer.stopping.any_of import AnyOf
from ado_actuators.sfttrainer.stopping.methods import make_policy
from ado_actuators.sfttrainer.stopping.seconds import StopAfterSeconds
from ado_actuators.sfttrainer.stopping.steady import (
    DEFAULT_MAX_SECONDS,
    MIN_STEADY_STEPS,
    STEADY_CI95_1PCT,
    WARMUP_WINDOW,
    SteadyInterval,
    added_seconds,
)

# every step carries 100 tokens, at epoch-sized clocks as time.time() gives
drive = functools.partial(stop_drive.drive, tokens=100, t0=1.7e9)


# --- Mann-Kendall, by hand ------------------------------------------------------------------


def test_a_strictly_rising_series_has_the_largest_s_and_a_significant_z():
    found = mann_kendall(list(range(10)))
    # S = 45 pairs, all concordant; var = 10 * 9 * 25 / 18 = 125; Z = (45 - 1) / sqrt(125)
    assert found.s == 45 and found.z == pytest.approx(44 / math.sqrt(125), rel=1e-12)
    assert found.significant
    falling = mann_kendall(list(range(10, 0, -1)))
    assert (falling.s, falling.z, falling.significant) == (
        -45,
        pytest.approx(-44 / math.sqrt(125)),
        True,
    )


def test_one_outlier_cannot_fake_a_trend():
    found = mann_kendall([5.0] + [1.0] * 9)
    # S = -9; ties: one group of 9, 9 * 8 * 23 = 1656; var = (2250 - 1656) / 18 = 33
    assert found.s == -9 and found.z == pytest.approx(-8 / math.sqrt(33), rel=1e-12)
    assert not found.significant


def test_equal_values_have_no_order_and_no_trend():
    assert mann_kendall([0.5] * 10) == Trend(0, 0.0)  # a variance of 0 too
    # a rise then the same fall: S = 0, and Z is 0, not the continuity correction's -1 / sd
    assert mann_kendall([1, 2, 3, 4, 5, 5, 4, 3, 2, 1]) == Trend(0, 0.0)
    assert not mann_kendall([1.0, 2.0] * 5).significant  # alternating


def test_the_boundary_of_significance_is_z_1_96():
    # no ties: S = 45 - 2 * inversions, var = 125, Z = (S - 1) / sqrt(125)
    eleven = [4, 3, 2, 1, 0, 5, 6, 7, 9, 8]  # S = 23: Z = 22 / 11.18 = 1.968
    twelve = [4, 3, 2, 1, 0, 5, 7, 6, 9, 8]  # S = 21: Z = 20 / 11.18 = 1.789
    assert (mann_kendall(eleven).s, mann_kendall(eleven).significant) == (23, True)
    assert (mann_kendall(twelve).s, mann_kendall(twelve).significant) == (21, False)


def test_fewer_than_ten_values_are_refused():
    with pytest.raises(ValueError, match="needs 10 values, got 9"):
        mann_kendall([1.0] * 9)


# --- the policy -----------------------------------------------------------------------------


def test_a_steady_series_ends_warm_up_after_the_window_and_stops_on_the_floor():
    policy = SteadyInterval()
    # the first step never counts; then WARMUP_WINDOW equal durations: no trend
    assert drive(policy, [3.0] + [0.5] * 200) == 1 + WARMUP_WINDOW + MIN_STEADY_STEPS
    assert policy.warmup_steps == 1 + WARMUP_WINDOW
    outcome = policy.outcome()
    assert (outcome.target_reached, outcome.steady_state_found, outcome.ended_by) == (
        True,
        True,
        "target",
    )
    assert (outcome.ci95_percent, outcome.measured_steps, outcome.warmup_steps) == (0.0, 20, 11)
    assert policy.reason == f"auto_stop_method={STEADY_CI95_1PCT}"


def test_warm_up_lasts_as_long_as_the_step_times_fall():
    jitter = random.Random(7)
    decay = [1.0 + 2.0 * math.exp(-i / 8) + jitter.uniform(-0.01, 0.01) for i in range(400)]
    policy = SteadyInterval()
    drive(policy, decay)
    warm = policy.warmup_steps
    # the decay still exceeds the jitter's whole range (0.02) by 10x until exp(-i/8) < 0.1
    assert warm > 8 * math.log(2.0 / 0.2)
    assert not mann_kendall(decay[warm - WARMUP_WINDOW : warm]).significant
    assert mann_kendall(decay[warm - WARMUP_WINDOW - 1 : warm - 1]).significant


def test_a_series_that_never_settles_stops_at_the_cap_and_says_so():
    policy = SteadyInterval(max_seconds=30.0)
    rising = [1.0 + 0.01 * i for i in range(100)]  # a device heating up
    ran = drive(policy, rising)
    ends = [sum(rising[: n + 1]) for n in range(100)]
    assert ran == next(n for n, end in enumerate(ends, start=1) if end >= 30.0)
    outcome = policy.outcome()
    assert (outcome.steady_state_found, outcome.target_reached, outcome.ended_by) == (
        False,
        False,
        "cap",
    )
    assert policy.warmup_steps == 0 and outcome.measured_steps == ran
    assert outcome.ci95_percent is None


def test_a_noisy_series_stops_at_the_cap_with_the_interval_it_reached():
    noise = random.Random(3)
    policy = SteadyInterval(max_seconds=60.0)
    steps = [1.0 * noise.lognormvariate(0, 0.3) for _ in range(500)]  # ~30 % CV
    drive(policy, steps)
    outcome = policy.outcome()
    assert outcome.ended_by == "cap" and outcome.steady_state_found and not outcome.target_reached
    assert outcome.ci95_percent > 1.0
    measured = steps[policy.warmup_steps : policy.steps]
    assert outcome.ci95_percent == pytest.approx(
        throughput_interval(measured, [100] * len(measured)).percent, rel=1e-6
    )  # the policy's seconds are differences of epoch-sized clocks: 1e-7 s of rounding


def test_one_outlier_is_kept_in_the_figure_and_delays_the_stop():
    flat = [3.0] + [1.0] * 2000
    outlier = list(flat)
    outlier[20] = 5.0  # a measured step (warm-up ends at step 11)
    quiet, late = SteadyInterval(max_seconds=1e9), SteadyInterval(max_seconds=1e9)
    quiet_steps, late_steps = drive(quiet, flat), drive(late, outlier)
    assert late.outcome().target_reached and late.outcome().ci95_percent <= 1.0
    assert late_steps > quiet_steps == 31
    assert late.warmup_steps == quiet.warmup_steps  # outside the warm-up window's view


def test_autocorrelated_steps_need_more_steps_than_independent_ones_of_the_same_spread():
    def series(phi: float, seed: int) -> list[float]:
        draw, x, out = random.Random(seed), 0.0, [2.0]
        for _ in range(5000):  # AR(1) with the same marginal sd (3 %) whatever phi is
            x = phi * x + math.sqrt(1 - phi**2) * draw.gauss(0, 0.03)
            out.append(1.0 + x)
        return out

    runs = {}
    for phi in (0.0, 0.9):
        stops = []
        for seed in range(5):
            policy = SteadyInterval(max_seconds=1e9)
            stops.append(drive(policy, series(phi, seed)))
            assert policy.outcome().target_reached
        runs[phi] = sorted(stops)[2]  # the median of five
    # a naive interval would stop both at about (2 * 3 / 1)^2 = 36 measured steps; batch means
    # see part of the correlation (an AR(1) at 0.9 would need 19x the steps to be exact)
    assert runs[0.9] > 1.5 * runs[0.0]


def test_a_peer_stop_from_another_limit_is_named():
    steady = SteadyInterval()
    policy = AnyOf(steady, StopAfterSeconds(5.0))
    assert policy.shares_steps
    drive(policy, [1.0] * 50)
    assert policy.outcome().ended_by == "other limit" and not policy.outcome().target_reached


def test_training_that_ends_first_is_told_apart():
    policy = SteadyInterval()
    drive(policy, [3.0] + [0.5] * 15)  # max_steps 16: no stop proposed
    outcome = policy.outcome()
    assert (outcome.ended_by, outcome.steady_state_found, outcome.target_reached) == (
        "training end",
        True,
        False,
    )
    assert outcome.measured_steps == 16 - 11


def test_the_cap_counts_from_the_first_start_and_the_target_is_judged_on_tokens_too():
    policy = SteadyInterval(max_seconds=10.0)
    assert drive(policy, [0.5] * 100) == 20  # ends at 10.0 s: 1 + 10 warm-up steps, 9 measured
    # steps that carry different tokens in equal times are not a steady throughput
    draw = random.Random(1)
    varying = SteadyInterval(max_seconds=1e9)
    t, count = 1.7e9, 0
    for n in range(2000):
        varying.begin(t)
        decision = varying.propose(t, t + 1.0, draw.choice([90, 100, 110]))
        varying.commit(t + 1.0, decision)
        count, t = n + 1, t + 1.0
        if decision.stop:
            break
    assert 0 < varying.outcome().ci95_percent <= 1.0
    assert count > 1 + WARMUP_WINDOW + MIN_STEADY_STEPS


def test_a_target_met_exactly_counts_and_a_rank_that_counted_no_token_never_meets_it():
    exact = SteadyInterval(target_percent=0.0)  # a constant series' interval is exactly 0 %
    assert drive(exact, [3.0] + [0.5] * 100) == 1 + WARMUP_WINDOW + MIN_STEADY_STEPS
    assert exact.outcome().target_reached
    blind = SteadyInterval(max_seconds=40.0)
    for n in range(100):  # no tokens given: the throughput is unknown, so no interval either
        start = 1.7e9 + n * 0.5
        blind.begin(start)
        decision = blind.propose(start, start + 0.5)
        blind.commit(start + 0.5, decision)
        if decision.stop:
            break
    assert blind.outcome().ended_by == "cap" and blind.outcome().ci95_percent is None


def test_added_seconds_is_the_row_series():
    steps = [(10.0, 11.0, 1), (11.5, 12.0, 1), (12.0, 13.5, 1)]
    assert added_seconds(steps) == [1.0, 1.0, 1.5]
    assert added_seconds([]) == []


def test_make_policy_offers_the_method_with_its_cap():
    default = make_policy(-1, "steady_ci95_1pct")
    assert isinstance(default, SteadyInterval) and default.max_seconds == DEFAULT_MAX_SECONDS
    assert make_policy(-1, STEADY_CI95_1PCT, 45.0).max_seconds == 45.0
    both = make_policy(30, STEADY_CI95_1PCT)
    assert isinstance(both, AnyOf) and both.shares_steps
    assert not make_policy(30, None).shares_steps


# --- what the row says --------------------------------------------------------------------


def ended(**fields) -> AutoStopOutcome:
    base = {
        "method": STEADY_CI95_1PCT,
        "target_percent": 1.0,
        "max_seconds": 120.0,
        "steady_state_found": True,
        "target_reached": False,
        "ended_by": "cap",
        "ci95_percent": 2.345,
        "warmup_steps": 11,
        "measured_steps": 40,
    }
    return AutoStopOutcome(**(base | fields))


def test_the_row_says_in_words_when_the_target_was_not_reached():
    assert auto_stop_note(None) is None
    assert auto_stop_note(ended(target_reached=True, ended_by="target")) is None
    assert auto_stop_note(ended()) == (
        "STEADY_CI95_1PCT: target not reached: auto_stop_max_seconds (120 s) passed before the "
        "95 % interval was within 1 % (it was 2.35 %)"
    )
    assert auto_stop_note(ended(ended_by="training end", ci95_percent=None)) == (
        "STEADY_CI95_1PCT: target not reached: training ended (max_steps or num_train_epochs) "
        "before the 95 % interval was within 1 %"
    )
    assert auto_stop_note(ended(steady_state_found=False, ended_by="other limit")) == (
        "STEADY_CI95_1PCT: no steady state found before stop_after_seconds stopped training: the "
        "step times still showed a trend, so no step was left out as warm-up and the figures "
        "cover every step"
    )


def test_the_outcome_reaches_the_row_metadata_and_notes():
    steps = [StepTiming(step=n, start=n, end=n + 1, dataset_tokens=5) for n in range(1, 9)]
    reports = [
        RankReport(
            rank=r,
            local_rank=r,
            world_size=2,
            hostname="h",
            outcome=RankOutcome.OK,
            steps=steps,
            auto_stop=ended(),
        )
        for r in (0, 1)
    ]
    outcome = launch_outcome(
        reports, [NodeRun(returncode=0)], world_size=2, number_gpus=2, stop_after_seconds=-1
    )
    assert outcome.metadata["auto_stop"] == ended().model_dump()
    assert auto_stop_note(ended()) in outcome.metadata["notes"]
