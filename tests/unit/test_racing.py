"""stopping/racing.py: a run has lost once it cannot reach its group's tie band."""

from __future__ import annotations

import itertools

import pytest

from ado_actuators.sfttrainer.space.guided_rule import Result, Settings, _ruled_out
from ado_actuators.sfttrainer.stats.interval import Interval
from ado_actuators.sfttrainer.stopping.racing import (
    Incumbent,
    Standing,
    Verdict,
    behind,
    race,
    seconds_saved,
)
from ado_actuators.sfttrainer.stopping.steady import MIN_STEADY_STEPS

INCUMBENT = Incumbent(1000.0, 1.0)  # lower bound 990


def standing(speed: float, percent: float | None = 2.0, steps: int = MIN_STEADY_STEPS):
    return Standing(speed, percent, warmed_up=True, measured_steps=steps)


def test_no_incumbent_never_loses():
    assert race(None, standing(1.0)) == Verdict(False)


def test_before_warmup_or_below_the_floor_of_steps_never_loses():
    assert race(INCUMBENT, Standing(500.0, 2.0, warmed_up=False, measured_steps=50)).lost is False
    assert race(INCUMBENT, standing(500.0, steps=MIN_STEADY_STEPS - 1)).lost is False
    assert race(INCUMBENT, standing(500.0)).lost is True
    assert race(INCUMBENT, standing(500.0, steps=6), min_steps=6).lost is True


def test_without_an_interval_never_loses():
    assert race(INCUMBENT, standing(500.0, percent=None)).lost is False


def test_upper_bound_below_the_incumbents_lower_bound_loses_and_says_by_how_much():
    verdict = race(INCUMBENT, standing(960.0, 3.0))  # upper 988.8 < 990
    assert verdict.lost
    said = "its 95 % upper bound 989 < 990 of the incumbent's 1,000 tokens/s ± 1 %"
    assert said in verdict.reason
    assert "4.0 % behind it" in verdict.reason and f"{MIN_STEADY_STEPS} measured" in verdict.reason


def test_overlapping_intervals_race_on_when_ties_are_measured():
    assert race(INCUMBENT, standing(970.0, 3.0)).lost is False  # upper 999.1 >= 990
    assert race(INCUMBENT, standing(961.2, 3.0)).lost is False  # upper 990.036: touches


def test_ties_unmeasured_a_figure_below_the_incumbents_loses_while_overlapping():
    verdict = race(INCUMBENT, standing(995.0, 3.0), measure_ties=False)
    assert verdict.lost and "at best tied: 995 tokens/s" in verdict.reason
    assert race(INCUMBENT, standing(1005.0, 3.0), measure_ties=False).lost is False
    assert race(INCUMBENT, standing(995.0, 3.0), measure_ties=True).lost is False


def test_an_incumbent_without_an_interval_is_its_own_lower_bound():
    bare = Incumbent(1000.0)
    assert race(bare, standing(979.0, 2.0)).lost is True  # upper 998.58 < 1000
    assert race(bare, standing(981.0, 2.0)).lost is False  # upper 1000.62
    assert "±" not in race(bare, standing(979.0, 2.0)).reason


@pytest.mark.parametrize("measure_ties", [True, False])
def test_the_same_tie_band_as_the_guided_walk(measure_ties):
    """What racing stops is what the guided walk would not have measured, from the same figure
    and interval: one definition of a tie for both."""
    settings = Settings(measure_ties=measure_ties)
    for speed, percent, theirs in itertools.product(
        (900.0, 970.0, 985.0, 995.0, 1000.0, 1010.0), (0.5, 1.0, 3.0), (None, 0.5, 2.0)
    ):
        interval = Interval(speed, speed * (1 - percent / 100), speed * (1 + percent / 100), 0.95)
        below, tied = _ruled_out(interval, Result("k", True, 1000.0, theirs), settings)
        verdict = race(Incumbent(1000.0, theirs), standing(speed, percent), measure_ties)
        assert verdict.lost == (below or tied), (speed, percent, theirs)


def test_the_comparison_at_its_edges():
    # an upper bound equal to the lower bound still reaches it: not below
    assert behind(990.0, 960.0, 990.0, 1000.0, measure_ties=True) == (False, False)
    # below is never also tied, whether ties are measured or not
    assert behind(980.0, 960.0, 990.0, 1000.0, measure_ties=False) == (True, False)
    # a figure equal to the fastest's is no tie left unmeasured: it may be the fastest
    assert behind(1010.0, 1000.0, 990.0, 1000.0, measure_ties=False) == (False, False)


def test_the_margin_is_the_runs_shortfall_in_percent_whichever_way_it_lost():
    assert race(INCUMBENT, standing(960.0, 3.0)).behind_percent == pytest.approx(4.0)
    tied = race(INCUMBENT, standing(990.0, 3.0), measure_ties=False)
    assert tied.lost and tied.behind_percent == pytest.approx(1.0)


def test_an_incumbent_without_an_interval_is_named_without_one():
    verdict = race(Incumbent(1000.0), standing(500.0))
    assert "of the incumbent's 1,000 tokens/s after 20 measured steps" in verdict.reason


def test_seconds_saved_divide_by_the_target():
    assert seconds_saved(4.0, 2.0, 10.0, 1000.0) == pytest.approx(30.0)  # 10 s x 2^2 - 10 s
