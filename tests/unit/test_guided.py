"""space/guided_rule.py: the guided walk's order, its stopping rule, its reasons and its resumption,
pure."""

from __future__ import annotations

from ado_actuators.sfttrainer.space.calibration import Row, calibrate
from ado_actuators.sfttrainer.space.guided_rule import (
    Candidate,
    Result,
    Settings,
    decide,
    measuring_order,
)

L40 = "NVIDIA-L40"


def candidate(key: str, predicted: float | None, group: str = "g", hours: float = 1.0) -> Candidate:
    return Candidate(key, group, L40, predicted, hours, method="lora")


SPACE = [
    candidate("a", 1000.0),
    candidate("b", 3000.0),
    candidate("c", 2900.0),
    candidate("d", 300.0),
]


def test_the_highest_upper_bound_is_measured_first():
    assert decide(SPACE, {}).next == SPACE[1]
    unknown = candidate("x", None)
    assert decide([*SPACE, unknown], {}).next == unknown  # nothing bounds it


def test_a_group_stops_once_no_upper_bound_reaches_the_fastest():
    results = {"b": Result("b", True, 3000.0, 1.0), "c": Result("c", True, 2950.0, 1.0)}
    decision = decide(SPACE, results)
    assert decision.next is None
    assert set(decision.unmeasured) == {"a", "d"}
    assert "below the measured fastest's 3,000 - 30" in decision.unmeasured["a"]
    assert decision.unmeasured["a"].startswith("predicted ")


def test_a_contender_whose_interval_reaches_the_fastest_is_measured():
    decision = decide(SPACE, {"b": Result("b", True, 3000.0)})
    assert decision.next == SPACE[2]


def test_tied_contenders_are_left_when_not_wanted():
    decision = decide(
        SPACE, {"b": Result("b", True, 3000.0)}, settings=Settings(measure_ties=False)
    )
    assert decision.next is None
    assert "possibly tied" in decision.unmeasured["c"]


def test_groups_are_decided_apart():
    other = [candidate("e", 100.0, group="h")]
    decision = decide(
        SPACE + other, {"b": Result("b", True, 3000.0), "c": Result("c", True, 2950.0)}
    )
    assert decision.next == other[0]


def test_an_invalid_measurement_never_is_the_fastest():
    decision = decide(SPACE, {"b": Result("b", False), "c": Result("c", False)})
    assert decision.next == SPACE[0]


def test_the_budget_stops_the_walk_with_a_reason():
    results = {"b": Result("b", True, 3000.0, gpu_hours=1.5)}
    decision = decide(SPACE, results, settings=Settings(budget_gpu_hours=2.0))
    assert decision.next is None
    assert "over the GPU-hour budget of 2" in decision.unmeasured["c"]


def test_a_configuration_that_does_not_fit_is_left_with_its_verdict():
    oom = Candidate("z", "g", L40, 9000.0, 1.0, skip="predicted OOM: 90 GiB of 80")
    assert decide([*SPACE, oom], {}).unmeasured["z"] == "predicted OOM: 90 GiB of 80"


def test_a_walk_run_again_measures_nothing_twice():
    """The decision reads only what is stored and what is in flight: the measured and the
    pending are never chosen again, whichever order they came in."""
    measured = {}
    chosen = []
    for _ in range(len(SPACE)):
        decision = decide(SPACE, measured, pending=set())
        if decision.next is None:
            break
        chosen.append(decision.next.key)
        # killed after the choice: the run again sees the stored rows and chooses anew
        measured[decision.next.key] = Result(decision.next.key, True, decision.next.predicted)
    assert len(chosen) == len(set(chosen))
    assert decide(SPACE, {}, pending={"b"}).next == SPACE[2]


def test_the_measuring_order_recalibrates():
    rows = {"a": Row(L40, 1000.0, 700.0), "b": Row(L40, 3000.0, 2000.0)}
    order = measuring_order(
        [("a", 1000.0, "", "", "", 0.0), ("b", 3000.0, "", "", "", 0.0)],
        lambda done: calibrate(L40, [rows[k] for k in done]),
        2,
    )
    assert order == ["b", "a"]


def test_a_row_that_did_not_train_is_never_the_fastest():
    untrained = {"b": Result("b", True, 3000.0, trained=False)}
    decision = decide(SPACE, untrained)
    assert decision.next == SPACE[2] and not decision.unmeasured.get("a", "").startswith("pred")


def test_a_groups_first_row_calibrates_its_siblings():
    """The model is 20 % too fast on the group's first row: a sibling at the same GPU count
    predicted 17 % below it is ruled out by that row; one at another GPU count, whose factor
    is only partly shared, stays open; so does one of another group."""
    from ado_actuators.sfttrainer.space.calibration import REFERENCE_DEVICE

    def at(key: str, predicted: float, group: str, subgroup: str) -> Candidate:
        return Candidate(key, group, REFERENCE_DEVICE, predicted, 1.0, "", "lora", subgroup)

    space = [
        at("top", 3000.0, "g", "g 4 GPUs"),
        at("sibling", 2500.0, "g", "g 4 GPUs"),
        at("cousin", 2500.0, "g", "g 2 GPUs"),
        at("stranger", 2500.0, "h", "h 4 GPUs"),
    ]
    decision = decide(space, {"top": Result("top", True, 2400.0)})
    assert decision.unmeasured["sibling"].startswith("predicted")
    assert "cousin" not in decision.unmeasured or not decision.unmeasured["cousin"].startswith(
        "predicted"
    )
    assert decision.next is not None and decision.next.key in ("cousin", "stranger")


def test_the_engine_names_each_candidates_subgroup():
    """space/guided_walk.py: configurations that differ by their batch size alone share a subgroup;
    another GPU count or sequence length is another subgroup of the same group."""
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
    from ado_actuators.sfttrainer.space.guided_walk import candidates

    def point(gpus: int, length: int, batch: int) -> tuple[str, dict, dict]:
        values = {
            "model_name": "llama-8b",
            "number_gpus": gpus,
            "gpu_model": "NVIDIA-A100-SXM4-80GB",
            "model_max_length": length,
            "batch_size": batch,
        }
        return "finetune_full_benchmark-v1.0.0", values, {"stop_after_seconds": 600}

    points = [point(2, 2048, 8), point(2, 2048, 16), point(4, 2048, 16), point(2, 4096, 8)]
    found = candidates(points, MeasurementSettings())
    assert len({c.group for c in found}) == 1
    assert found[0].subgroup == found[1].subgroup
    assert len({found[1].subgroup, found[2].subgroup, found[3].subgroup}) == 3


def llama_point(gpus: int, batch: int) -> tuple[str, dict, dict]:
    """A configuration of llama3-8b (a catalogue model: its shape is shipped) on A100s, as a
    walk's points hold it: experiment, entity values, the experiment's fixed values."""
    values = {
        "model_name": "llama3-8b",
        "number_gpus": gpus,
        "gpu_model": "NVIDIA-A100-SXM4-80GB",
        "model_max_length": 2048,
        "batch_size": batch,
    }
    return "finetune_full_benchmark-v1.0.0", values, {"stop_after_seconds": 600}


def test_the_record_says_which_configurations_left_would_not_have_launched(tmp_path):
    """space/guided_walk.py's record: a configuration left by the rule is counted at its predicted
    GPU-hours; one that would not launch at all (here a configuration rule: 3 GPUs do not
    divide the batch) saves nothing and is marked skipped."""
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
    from ado_actuators.sfttrainer.space.guided_walk import Walk

    settings = MeasurementSettings(hf_home=str(tmp_path))
    walk = Walk.of("space-x", [llama_point(4, 16), llama_point(3, 16)], settings, Settings())
    [fits, rule] = walk.candidates
    assert not fits.skip and rule.skip
    # the attention's share of its predicted step, which a device's attention factor scales
    assert 0 < fits.attention_share < 0.5
    record = walk.record(walk.decide({}, set()), {})
    assert [(u.entity["number_gpus"], u.skipped) for u in record.unmeasured] == [(3, True)]
    assert record.unmeasured[0].predicted_gpu_hours == 0.0 and not record.finished
    measured = {fits.key: Result(fits.key, True, 1000.0, 1.0, 0.5)}
    done = walk.record(walk.decide(measured, set()), measured)
    assert done.finished and done.measured == 1 and done.spent_gpu_hours == 0.5


def test_a_walk_run_again_from_the_same_stored_rows_leaves_the_same_for_the_same_reasons(
    tmp_path,
):
    """space/guided_walk.py decides from what the store holds and nothing else: a fresh walk
    of the same space (each `ado create operation` builds one) over the same stored row, read
    as the sampler reads it (result_of), measures nothing and writes the same record, each
    configuration left with the same reason. (tests/e2e/test_ado_cli.py's third run is at
    another coverage, so it can no longer check this.)"""
    from ado_actuators.sfttrainer.contract import loss
    from ado_actuators.sfttrainer.contract.guided import GuidedRecord
    from ado_actuators.sfttrainer.contract.properties import THROUGHPUT, THROUGHPUT_CI95
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
    from ado_actuators.sfttrainer.space.guided_walk import Walk, result_of

    points = [llama_point(4, 16), llama_point(4, 4), llama_point(3, 16)]
    settings = MeasurementSettings(hf_home=str(tmp_path))

    def run(stored: dict[str, dict]) -> tuple[Candidate | None, GuidedRecord]:
        walk = Walk.of("space-x", points, settings, Settings())
        results = {key: result_of(key, properties, 4) for key, properties in stored.items()}
        decision = walk.decide(results, set())
        return decision.next, walk.record(decision, results)

    first, _ = run({})
    assert first is not None
    row = {
        "is_valid": 1,
        THROUGHPUT: first.predicted,
        THROUGHPUT_CI95: 2.0,
        "measurement_seconds": 600,
        loss.FINITE: 1,
        loss.ROSE: 0,
    }
    stored = {first.key: row}
    (done, record), (again, rerun) = run(stored), run(stored)
    assert done is None and again is None and record.finished
    reasons = [u.reason for u in record.unmeasured]
    assert any(r.startswith("predicted ") for r in reasons), reasons  # left by the rule
    assert rerun == record
