"""Racing wired end to end, each seam pure (issue 54): the trainer's stop rule ends a run that
cannot win, its outcome becomes the row's properties and note, the guided walk deals each
measurement its group's fastest through the race cards and never names a raced row fastest,
and the answers list raced rows with what stopping them saved."""

from __future__ import annotations

import functools
import json
import random

import pytest
import stop_drive
from test_plan import inputs

from ado_actuators.sfttrainer.contract.guided import point_key
from ado_actuators.sfttrainer.contract.properties import RACED_BEHIND, RACED_SAVED
from ado_actuators.sfttrainer.contract.trainer_io import (
    RaceAgainst,
    RaceOutcome,
    RankOutcome,
    RankReport,
    StepTiming,
)
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.execute.classify import launch_outcome, race_note
from ado_actuators.sfttrainer.execute.node import NodeRun
from ado_actuators.sfttrainer.ledger.race_cards import RaceCards
from ado_actuators.sfttrainer.metrics.aggregate import raced_properties
from ado_actuators.sfttrainer.plan.launch.launch_plan import plan_launch
from ado_actuators.sfttrainer.report.answers import answers
from ado_actuators.sfttrainer.report.summary import answer_blocks
from ado_actuators.sfttrainer.report.table import space_table
from ado_actuators.sfttrainer.space.guided_rule import Candidate, Result, decide
from ado_actuators.sfttrainer.stats.batch_means import MIN_STEADY_STEPS
from ado_actuators.sfttrainer.stopping.methods import make_policy
from ado_actuators.sfttrainer.stopping.policy import PolicyBase
from ado_actuators.sfttrainer.stopping.raced import Racing
from ado_actuators.sfttrainer.stopping.racing import Incumbent, seconds_saved
from ado_actuators.sfttrainer.stopping.steady import STEADY_CI95_1PCT, STEADY_STEPS, SteadyInterval
from ado_actuators.sfttrainer.stopping.warmup_stable import WarmupThenStable

drive = functools.partial(stop_drive.drive, tokens=100, t0=1.7e9)


def noisy(n: int, mean: float = 0.1, spread: float = 0.3) -> list[float]:
    """Step times drawn uniformly within ±spread of `mean` (a fixed seed): no trend, and an
    interval that takes many steps to narrow to 1 %."""
    draw = random.Random(54)
    return [mean * (1 + draw.uniform(-spread, spread)) for _ in range(n)]


# --- the stop rule --------------------------------------------------------------------------

INCUMBENT = RaceAgainst(speed=3000.0, ci95_percent=1.0, incumbent="batch_size 4")


def steady(race: RaceAgainst | None = INCUMBENT) -> PolicyBase:
    return make_policy(-1, STEADY_CI95_1PCT, 80.0, race)


def test_a_run_far_behind_its_incumbent_stops_at_the_floor_of_steps_and_says_why():
    # 100 tokens per 0.1 s: about 1,000 tokens/s against an incumbent at 3,000 ± 1 %
    policy = steady()
    steps = drive(policy, noisy(400))
    lost = policy.race_outcome()
    assert steps == STEADY_STEPS  # the first step, the trend's window, the floor of steps
    assert lost is not None and "batch_size 4's 3,000 tokens/s ± 1 %" in lost.reason
    assert lost.behind_percent == pytest.approx(66.7, abs=2)  # its figure ~1,000
    assert lost.saved_seconds > 0
    assert policy.reason == lost.reason  # what the row's stopped_by says
    outcome = policy.outcome()
    assert outcome is not None and not outcome.target_reached


def test_the_same_series_without_an_incumbent_runs_on_to_its_target_or_cap():
    raced, whole = steady(), steady(None)
    assert drive(whole, noisy(2000)) > drive(raced, noisy(2000))
    assert whole.race_outcome() is None and whole.outcome().ended_by in ("target", "cap")


def test_a_run_that_can_still_win_is_never_raced():
    policy = make_policy(-1, STEADY_CI95_1PCT, 80.0, INCUMBENT.model_copy(update={"speed": 1000.0}))
    drive(policy, noisy(400, spread=0.02))
    assert policy.outcome().ended_by == "target"
    assert policy.race_outcome() is None and raced_properties(policy.race_outcome()) == {}


def test_the_specs_fixed_window_races_too_after_its_warm_up_and_saves_the_rest():
    policy = Racing(
        WarmupThenStable(warmup=5.0, stable_seconds=120.0), Incumbent(3000.0, 1.0), True
    )
    steps = drive(policy, noisy(4000))
    lost = policy.race_outcome()
    assert lost is not None and policy.warmup_steps > 0
    assert steps == policy.warmup_steps + MIN_STEADY_STEPS  # no step is judged in the warm-up
    # the rest of its 120 s window: 120 s less the 20 steps of about 0.1 s measured
    assert lost.saved_seconds == pytest.approx(118.0, abs=0.5)


def test_a_stop_after_seconds_beside_the_method_bounds_what_a_race_saves():
    policy = make_policy(10.0, STEADY_CI95_1PCT, 80.0, INCUMBENT)
    drive(policy, noisy(400))
    lost = policy.race_outcome()
    assert lost is not None and lost.saved_seconds < 10.0


def test_seconds_saved_follow_the_root_of_the_steps_and_stop_at_the_cap():
    assert seconds_saved(4.0, 1.0, 10.0, 1000.0) == pytest.approx(150.0)  # 16 x 10 s - 10 s
    assert seconds_saved(4.0, 1.0, 10.0, 60.0) == 60.0
    assert seconds_saved(0.5, 1.0, 10.0, 60.0) == 0.0


# --- the row --------------------------------------------------------------------------------

LOST = RaceOutcome(
    reason="raced: its 95 % upper bound 1,120 < 2,970 of batch_size 4's 3,000 tokens/s",
    behind_percent=66.7,
    saved_seconds=42.0,
)


def test_a_lost_race_becomes_two_properties_and_a_note_naming_the_incumbent():
    assert raced_properties(LOST) == {RACED_BEHIND: 66.7, RACED_SAVED: 42.0}
    note = race_note(LOST)
    assert note is not None and "could not win its answer group" in note
    assert "batch_size 4's 3,000 tokens/s" in note and "42 s of training saved" in note
    assert race_note(None) is None


# --- the cards ------------------------------------------------------------------------------


def test_the_newest_card_for_a_key_is_in_force_and_none_withdraws_it(tmp_path):
    cards = RaceCards(tmp_path / "cards.jsonl")
    key = point_key("finetune_lora_benchmark-v1.0.0", {"batch_size": 2.0, "model_name": "m"})
    assert key == point_key("finetune_lora_benchmark-v1.0.0", {"model_name": "m", "batch_size": 2})
    assert cards.for_key(key) is None
    first = RaceAgainst(speed=100.0, ci95_percent=2.0, incumbent="batch_size 4")
    cards.deal(key, first)
    cards.deal("another", RaceAgainst(speed=5.0, incumbent="x"))
    assert cards.for_key(key) == first
    cards.deal(key, None)
    assert cards.for_key(key) is None
    with (tmp_path / "cards.jsonl").open("a") as handle:  # a card edited by hand
        handle.write(json.dumps({"format": 1, "key": key, "race": {"speed": -1}}) + "\n")
    assert cards.for_key(key) is None


def test_the_cards_live_under_the_data_directory_unless_given_whole(tmp_path):
    relative = MeasurementSettings(data_directory=str(tmp_path))
    assert relative.race_cards_file() == tmp_path / ".sfttrainer" / "race-cards.jsonl"
    given = MeasurementSettings(race_cards_path=str(tmp_path / "cards.jsonl"))
    assert given.race_cards_file() == tmp_path / "cards.jsonl"


# --- the walk -------------------------------------------------------------------------------

L40 = "NVIDIA-L40"
SPACE = [Candidate(k, "g", L40, p, 1.0, method="lora") for k, p in (("a", 3000.0), ("b", 2900.0))]


def test_the_walk_deals_the_next_configuration_its_groups_measured_fastest():
    first = decide(SPACE, {})
    assert first.next is not None and first.next.key == "a" and first.incumbent is None
    measured = {"a": Result("a", True, 3000.0, 1.0)}
    second = decide(SPACE, measured)
    assert second.next is not None and second.next.key == "b"
    assert second.incumbent == measured["a"]


def test_a_raced_row_is_never_the_fastest_and_stays_settled_while_its_fastest_stands():
    results = {
        "a": Result("a", True, 3000.0, 1.0),
        "b": Result("b", True, 1000.0, 12.0, raced=True),
    }
    [c] = [Candidate("c", "g", L40, 100.0, 1.0, method="lora")]
    decision = decide([*SPACE, c], results)
    assert decision.next is None or decision.next.key != "b"
    assert decide(SPACE, results).next is None


def test_a_raced_row_whose_fastest_is_gone_is_measured_again_once_per_walk():
    # a's row was measured again and found invalid: b's race was lost to a figure that is gone
    results = {
        "a": Result("a", False),
        "b": Result("b", True, 1000.0, 12.0, raced=True),
    }
    again = decide(SPACE, results)
    assert again.next is not None and again.next.key == "b"
    assert decide(SPACE, results, sent={"b"}).next is None  # ado would replay its row


# --- the answers ----------------------------------------------------------------------------


def row(batch: int, speed: float, raced: float | None = None) -> dict[str, object]:
    values: dict[str, object] = {
        "experiment_id": "SFTTrainer.finetune_lora_benchmark-v1.0.0",
        "model_name": "tiny",
        "number_gpus": 2,
        "model_max_length": 512,
        "batch_size": batch,
        "is_valid": 1,
        "dataset_tokens_per_second": speed,
        "dataset_tokens_per_second_per_gpu": speed / 2,
        "dataset_tokens_per_second_ci95_percent": 40.0,
        "train_loss_finite": 1,
    }
    if raced is not None:
        values |= {RACED_BEHIND: raced, RACED_SAVED: 30.0}
    return values


def test_the_answers_never_name_a_raced_row_fastest_or_tied_and_say_what_it_saved():
    # the raced row is faster in its (wide) figure than the fastest's: still never the answer
    [group] = answers(space_table([row(1, 1000.0), row(2, 1100.0, raced=20.0)]))
    assert group.fastest is not None and group.fastest.batch_size == 1
    assert group.tied == () and [p.batch_size for p in group.raced] == [2]
    [(_, lines)] = answer_blocks((group,))
    [line] = [line for line in lines if line.startswith("Raced")]
    assert "batch 2: 1,100 ± 40 %, 20 % behind" in line
    assert line.endswith("saved about 60 GPU-seconds")  # 30 s on each of 2 GPUs


# --- what mutation testing asked of the seams ---------------------------------------------


def test_steadys_seconds_left_follow_the_interval_and_stop_at_the_cap():
    policy = SteadyInterval(80.0)
    assert policy.seconds_left(10.0, 2.0, 1.5) == pytest.approx(2.5)  # 2 s x 1.5^2 - 2 s
    assert policy.seconds_left(10.0, 2.0, None) == pytest.approx(70.0)  # no interval: the cap
    assert policy.seconds_left(79.5, 2.0, 20.0) == pytest.approx(0.5)  # the cap first
    assert policy.seconds_left(90.0, 2.0, 20.0) == 0.0


def test_a_race_lost_at_the_cap_saves_what_was_left_before_it():
    durations = noisy(400)
    steps = STEADY_STEPS  # where a clear loser is raced (the first test)
    cap = sum(durations[:steps]) + 0.4  # the cap falls 0.4 s after that step's end
    policy = make_policy(-1, STEADY_CI95_1PCT, cap, INCUMBENT)
    assert drive(policy, durations) == steps
    lost = policy.race_outcome()
    assert lost is not None and lost.saved_seconds == pytest.approx(0.4)


def test_a_narrow_loser_saves_what_its_interval_still_needed_not_the_cap():
    # steps of 0.1 s within 2 %: 1,000 tokens/s, lost to 1,100 once its interval is narrow
    policy = make_policy(-1, STEADY_CI95_1PCT, 80.0, INCUMBENT.model_copy(update={"speed": 1100.0}))
    steps = drive(policy, noisy(2000, spread=0.02))
    lost = policy.race_outcome()
    assert lost is not None
    assert lost.saved_seconds < 80.0 - steps * 0.1 - 1.0  # the interval's time, not the cap's


def test_steps_measured_in_no_time_are_never_judged():
    policy = make_policy(-1, STEADY_CI95_1PCT, 80.0, INCUMBENT)
    t = 1.7e9
    for n in range(60):  # a clock that stops as the warm-up ends (11 steps): nothing to judge
        end = t + (0.1 if n < 11 else 0.0)
        policy.begin(t)
        decision = policy.propose(t, end, 100)
        policy.commit(end, decision)
        t = end
    assert policy.measured_from == 11 and policy.race_outcome() is None


def test_fast_steps_are_raced_as_slow_ones_are():
    # 20 measured steps of about 10 ms: under a second measured, raced all the same
    policy = make_policy(
        -1, STEADY_CI95_1PCT, 80.0, INCUMBENT.model_copy(update={"speed": 30000.0})
    )
    assert drive(policy, noisy(400, mean=0.01)) == STEADY_STEPS
    assert policy.race_outcome() is not None


def test_ties_measured_run_on_while_the_intervals_overlap_and_unmeasured_stop():
    slower = INCUMBENT.model_copy(update={"speed": 1030.0, "ci95_percent": 1.0})  # the run: ~1,000
    measured = make_policy(-1, STEADY_CI95_1PCT, 80.0, slower)
    unmeasured = make_policy(
        -1, STEADY_CI95_1PCT, 80.0, slower.model_copy(update={"measure_ties": False})
    )
    drive(measured, noisy(2000, spread=0.3))
    drive(unmeasured, noisy(2000, spread=0.3))
    assert measured.race_outcome() is None or measured.race_outcome().behind_percent > 1.0
    tied = unmeasured.race_outcome()
    assert tied is not None and "at best tied" in tied.reason and tied.behind_percent > 0


def test_a_run_that_ends_its_own_way_keeps_its_methods_reason():
    policy = make_policy(-1, STEADY_CI95_1PCT, 80.0, INCUMBENT.model_copy(update={"speed": 1000.0}))
    drive(policy, noisy(400, spread=0.02))
    assert policy.race_outcome() is None
    assert policy.reason == f"auto_stop_method={STEADY_CI95_1PCT}"


def test_the_job_carries_the_card_to_the_trainer():
    race = RaceAgainst(speed=3000.0, ci95_percent=1.0, incumbent="batch_size 4")
    plan = plan_launch(inputs().model_copy(update={"race": race}))
    assert plan.job.race == race
    assert plan_launch(inputs()).job.race is None


def test_a_lost_race_reaches_the_rows_properties_and_notes():
    steps = [StepTiming(step=i, start=float(i), end=i + 0.5, dataset_tokens=100) for i in range(40)]
    reports = [
        RankReport(
            rank=0,
            local_rank=0,
            world_size=1,
            hostname="h",
            outcome=RankOutcome.OK,
            steps=steps,
            race=LOST,
        )
    ]
    outcome = launch_outcome(
        reports, [NodeRun(returncode=0)], world_size=1, number_gpus=1, stop_after_seconds=-1
    )
    assert outcome.properties[RACED_BEHIND] == 66.7 and outcome.properties[RACED_SAVED] == 42.0
    assert race_note(LOST) in outcome.metadata["notes"]
