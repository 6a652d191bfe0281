"""Racing without a guided walk (`racing: true`): every measurement records its figure by
configuration and group (ledger/measured_speeds.py), and a configuration no walk dealt a card
races its group's recorded fastest (engine/race.py)."""

from __future__ import annotations

import json

import pytest

from ado_actuators.sfttrainer.contract.guided import point_key, race_group
from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.contract.trainer_io import RaceAgainst
from ado_actuators.sfttrainer.engine.race import Race
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.ledger.measured_speeds import MeasuredSpeeds, can_lead
from ado_actuators.sfttrainer.ledger.race_cards import RaceCards

LORA = "finetune_lora_benchmark-v1.0.0"
BASE = {"model_name": "m", "gpu_model": "NVIDIA-L40", "number_gpus": 1, "model_max_length": 512}


def row(speed: float, ci: float | None = 2.0, **extra: float) -> dict[str, float]:
    found = {"is_valid": 1, "dataset_tokens_per_second": speed, "train_loss_finite": 1, **extra}
    if ci is not None:
        found["dataset_tokens_per_second_ci95_percent"] = ci
    return found


def test_only_a_valid_trained_whole_row_can_lead_its_group():
    assert can_lead(row(100.0))
    assert not can_lead({**row(100.0), "is_valid": 0})
    assert not can_lead(row(100.0, train_loss_finite=0))  # trained nothing
    assert not can_lead(row(100.0, train_loss_rose=1))
    assert not can_lead(row(100.0, raced_behind_percent=12.0))  # lost a race: never fastest


def test_the_group_is_every_input_but_the_axes_so_fixed_values_and_devices_never_mix():
    group = race_group(LORA, {**BASE, "batch_size": 2})
    assert group == race_group(LORA, {**BASE, "batch_size": 8.0, "number_gpus": 2})
    assert group != race_group(LORA, {**BASE, "batch_size": 2, "gpu_model": "NVIDIA-A100"})
    assert group != race_group(LORA, {**BASE, "batch_size": 2, "fms_hf_tuning_version": "3.2.2"})
    assert group != race_group("finetune_full_benchmark-v1.0.0", {**BASE, "batch_size": 2})


def test_the_fastest_is_each_configurations_newest_row_that_can_lead(tmp_path):
    speeds = MeasuredSpeeds(tmp_path / "speeds.jsonl")
    group = race_group(LORA, BASE)
    speeds.record(group, "a", {**BASE, "batch_size": 2}, row(300.0, 1.5))
    speeds.record(group, "b", {**BASE, "batch_size": 4}, row(500.0, None))
    speeds.record("another group", "c", {**BASE, "batch_size": 8}, row(900.0))
    assert speeds.fastest(group, excluding="x") == RaceAgainst(
        speed=500.0,
        ci95_percent=None,
        incumbent="batch_size 4, model_max_length 512, number_gpus 1",
    )
    assert speeds.fastest(group, excluding="b").speed == 300.0  # never its own older row
    speeds.record(group, "b", {**BASE, "batch_size": 4}, {"is_valid": 0})  # measured again: OOM
    found = speeds.fastest(group, excluding="x")
    assert found is not None and (found.speed, found.ci95_percent) == (300.0, 1.5)
    speeds.record(group, "a", {**BASE, "batch_size": 2}, row(250.0, raced_behind_percent=9.0))
    assert speeds.fastest(group, excluding="x") is None
    assert speeds.fastest("no group", excluding="x") is None


def test_a_line_edited_by_hand_leads_nothing(tmp_path):
    path = tmp_path / "speeds.jsonl"
    with path.open("w") as handle:
        for speed in ("fast", -5, None, float("nan")):
            handle.write(json.dumps({"format": 1, "group": "g", "key": "k", "speed": speed}) + "\n")
    assert MeasuredSpeeds(path).fastest("g", excluding="x") is None


def settings(tmp_path, racing: bool | None) -> MeasurementSettings:
    return MeasurementSettings(data_directory=str(tmp_path), racing=racing)


def measured_fastest(tmp_path, speed: float = 400.0) -> None:
    """A row of batch 4 in BASE's group, as its measurement under racing: true recorded it."""
    earlier = Race(settings(tmp_path, True), LORA, {**BASE, "batch_size": 4}, None)
    earlier.record(Measured(properties=row(speed)))


@pytest.mark.parametrize("racing", [None, True, False])
def test_a_plain_walks_measurement_races_only_where_racing_is_set(tmp_path, racing):
    measured_fastest(tmp_path)
    race = Race(settings(tmp_path, racing), LORA, {**BASE, "batch_size": 2}, card_key="k")
    found = race.against()
    if racing is True:
        assert found is not None and found.speed == 400.0 and found.measure_ties
        assert found.incumbent == "batch_size 4, model_max_length 512, number_gpus 1"
    else:
        assert found is None


def test_a_walks_card_wins_over_the_record_even_when_it_says_none(tmp_path):
    measured_fastest(tmp_path)
    race = Race(settings(tmp_path, True), LORA, {**BASE, "batch_size": 2}, card_key="k")
    cards = RaceCards(settings(tmp_path, True).race_cards_file())
    card = RaceAgainst(speed=900.0, ci95_percent=1.0, incumbent="batch_size 8")
    cards.deal("k", card)
    assert race.against() == card
    cards.deal("k", None)  # the walk's group has no fastest yet: measured whole
    assert race.against() is None


def test_under_racing_every_stored_outcome_is_recorded_and_a_failure_never(tmp_path):
    inputs = {**BASE, "batch_size": 2}
    key, group = point_key(LORA, inputs), race_group(LORA, inputs)
    Race(settings(tmp_path, True), LORA, inputs, None).record(Measured(properties=row(700.0)))
    speeds = MeasuredSpeeds(settings(tmp_path, True).measured_speeds_file())  # type: ignore[arg-type]
    assert speeds.fastest(group, excluding="x").speed == 700.0  # type: ignore[union-attr]
    Race(settings(tmp_path, True), LORA, inputs, None).record(Failed("lost"))
    assert speeds.fastest(group, excluding="x").speed == 700.0  # type: ignore[union-attr]
    Race(settings(tmp_path, True), LORA, inputs, None).record(Invalid(reason="OOM"))
    assert speeds.fastest(group, excluding="x") is None
    assert speeds.fastest(group, excluding=key) is None


@pytest.mark.parametrize("racing", [None, False])
def test_unless_racing_is_true_nothing_is_written(tmp_path, racing):
    """A read-only data_directory must cost a measurement nothing (the guided walk reads the
    space's own rows)."""
    assert settings(tmp_path, racing).measured_speeds_file() is None
    race = Race(settings(tmp_path, racing), LORA, {**BASE, "batch_size": 2}, None)
    race.record(Measured(properties=row(700.0)))
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_record_measures_whole_and_says_why(tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("")
    given = MeasurementSettings(
        data_directory=str(tmp_path),
        racing=True,
        measured_speeds_path=str(blocked / "speeds.jsonl"),
        race_cards_path=str(blocked / "cards.jsonl"),
    )
    race = Race(given, LORA, {**BASE, "batch_size": 2}, card_key="k")
    assert race.against() is None
    race.record(Measured(properties=row(700.0)))
    assert "measured speed is not recorded" in caplog.text
