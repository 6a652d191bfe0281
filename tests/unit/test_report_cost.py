"""What a space cost (report/cost.py): device-hours reserved, valid and invalid apart, GPU and CPU
apart, and the configurations skipped without launching, by rule, from the metadata ado
stores or, for older rows, the reason's words."""

from __future__ import annotations

import pytest
from test_report import row

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.validity import configuration_problems
from ado_actuators.sfttrainer.contract.outcomes import (
    CERTAIN_OOM,
    CONFIGURATION_RULE,
    OOM_DOMINANCE,
    PREDICTED_OOM,
)
from ado_actuators.sfttrainer.plan.launch.environments import vision_problem
from ado_actuators.sfttrainer.report.cost import Cost, Hours, cost, cost_lines, rule_of
from ado_actuators.sfttrainer.report.table import space_table

STABILITY = "SFTTrainer.finetune_full_stability-v1.0.0"
REASONS = {  # one of each as stored before answered_by was written for it
    CERTAIN_OOM: "certain GPU out of memory: each device needs at least 3024.09 GiB (...)",
    PREDICTED_OOM: "predicted GPU out of memory (a prediction, not a measurement): ...",
    OOM_DOMINANCE: "GPU out of memory, answered without launching: batch_size.8-... ran out",
    CONFIGURATION_RULE: "batch_size 9 is not divisible by number_gpus 2",
}
LAUNCHED_OOM = "GPU out of memory: CUDA out of memory. Tried to allocate 2.00 GiB (rank 0)"


def stored(batch, gpus=1, valid=1, seconds=None, answered="", reason="", **extra):
    """A row as sources.py gives it from ado's API: the metadata beside the properties."""
    extra |= {"measurement_seconds": seconds} if seconds is not None else {}
    return row(gpus=gpus, batch=batch, valid=valid, **extra) | {
        "answered_by": [answered],
        "invalid_reason": [reason],
    }


def space():
    rows = [
        stored(4, gpus=2, seconds=1800),  # 1 GPU-hour
        stored(8, gpus=1, seconds=900),  # 0.25
        stored(16, gpus=4, valid=0, seconds=450, reason=LAUNCHED_OOM),  # 0.5, invalid
        stored(4, gpus=0, seconds=1800, number_nodes=2),  # 1 CPU-hour: 2 nodes' ranks
        stored(8, gpus=0, valid=0, seconds=900, reason="CPU run killed"),  # 0.25, invalid
        stored(2, gpus=1),  # launched, stored before measurement_seconds
        # the stability experiment records no time; its rows are not drawn but still count
        stored(
            2,
            gpus=1,
            experiment_id=STABILITY,
            dataset_tokens_per_second="",
            dataset_tokens_per_second_per_gpu="",
            f_gpu_oom="0.2",
        ),
    ]
    for batch, rule in enumerate(REASONS, start=32):  # each rule by its marker
        rows.append(stored(batch, valid=0, answered=rule, reason="whatever the words"))
    for batch, reason in enumerate(REASONS.values(), start=64):  # and by its words
        rows.append(stored(batch, valid=0, reason=reason))
    return rows


def test_hours_are_split_valid_from_invalid_and_gpu_from_cpu_and_answers_counted_by_rule():
    table = space_table(space())
    assert STABILITY not in {dict(p.identity)["experiment_id"] for p in table.points}
    assert cost(table) == Cost(
        gpu=Hours(valid=1.25, invalid=0.5, measurements=3),
        cpu=Hours(valid=1.0, invalid=0.25, measurements=2),
        untimed=2,
        answered={CONFIGURATION_RULE: 2, CERTAIN_OOM: 2, PREDICTED_OOM: 2, OOM_DOMINANCE: 2},
    )


def test_the_cost_in_words_never_calls_cpu_time_gpu_time():
    assert cost_lines(cost(space_table(space()))) == [
        "GPU time reserved: 1.75 GPU-hours (1.25 valid, 0.5 invalid) over 3 measurements "
        "(measurement_seconds × number_gpus)",
        "CPU time reserved, apart (number_gpus 0, no GPU): 1.25 CPU-hours (1 valid, 0.25 invalid) "
        "over "
        "2 measurements (measurement_seconds × nodes, one CPU rank per node; cores not recorded)",
        "Not counted: 2 measurements without a recorded time (stored before measurement_seconds, "
        "or the stability experiment, which records none)",
        "Skipped without launching (no device reserved): 8 configurations: 2 by a configuration "
        "rule, 2 certain OOM (memory lower bound), 2 predicted OOM (skip_predicted_oom), 2 "
        "dominated by a measured OOM",
    ]


def test_the_cost_block_adds_what_a_guided_walk_saved():
    from ado_actuators.sfttrainer.contract.guided import GuidedRecord, Unmeasured

    def left(hours: float, skipped: bool = False) -> Unmeasured:
        entity = {"batch_size": 8}
        return Unmeasured("finetune_full_benchmark-v1.0.0", entity, "g", "why", hours, skipped)

    # the third would not have launched (a predicted OOM): nothing saved by leaving it
    record = GuidedRecord(
        "space-1", 0.95, None, True, 3, 1.5, (left(2.0), left(0.25), left(0, True)), False
    )
    lines = cost_lines(cost(space_table(space())), record)
    assert lines[:-1] == cost_lines(cost(space_table(space())))
    assert lines[-1] == (
        "Saved by the guided walk: about 2.25 GPU-hours (predicted) on 2 configurations it left "
        "unmeasured, against 1.5 spent on 3 measurements; the walk had not finished; the "
        "configurations and reasons: 'Left unmeasured by the guided walk'"
    )
    # on CPUs a configuration left costs no GPU-hours, and is still one left
    cpu = GuidedRecord("space-1", 0.5, None, True, 1, 0.0, (left(0.0),), True)
    assert cost_lines(cost(space_table(space())), cpu)[-1].startswith(
        "Saved by the guided walk: about 0 GPU-hours (predicted) on 1 configuration it left "
        "unmeasured, against 0 spent on 1 measurement; the configurations"
    )


def test_a_csv_without_metadata_says_the_answers_are_not_known_and_counts_them_untimed():
    rows = [
        {k: v for k, v in r.items() if k not in ("answered_by", "invalid_reason")} for r in space()
    ]
    found = cost(space_table(rows))
    assert found.answered is None and found.untimed == 2 + 8
    assert found.gpu == Hours(1.25, 0.5, 3)
    lines = cost_lines(found)
    assert lines[-2].endswith(
        "which records none; in ado's CSV, also those skipped without launching)"
    )
    assert lines[-1] == (
        "Skipped without launching: not known from this table (ado's CSV holds "
        "no result metadata); plot the space by its id to count them"
    )


def test_a_row_measured_twice_pairs_its_time_with_the_launched_measurement():
    # ado lists the row's values per property, skipping measurements without one: the answer
    # held nothing, so the one time is the launched measurement's
    twice = row(batch=4) | {
        "is_valid": "[0, 1]",
        "measurement_seconds": "3600",
        "answered_by": ["oom_dominance", ""],
        "invalid_reason": [REASONS[OOM_DOMINANCE], ""],
    }
    assert cost(space_table([twice])) == Cost(
        Hours(1.0, 0.0, 1),
        Hours(),
        0,
        {CONFIGURATION_RULE: 0, CERTAIN_OOM: 0, PREDICTED_OOM: 0, OOM_DOMINANCE: 1},
    )
    # two launched measurements of one validity, one stored before measurement_seconds
    older = row(batch=4) | {"is_valid": "[1, 1]", "measurement_seconds": "1800"}
    assert cost(space_table([older])) == Cost(Hours(0.5, 0.0, 1), Hours(), 1, None)
    # of two validities, which held the one time is not known: none is counted
    mixed = older | {"is_valid": "[0, 1]"}
    assert cost(space_table([mixed])) == Cost(Hours(), Hours(), 2, None)


@pytest.mark.parametrize(
    "overrides",
    [
        {"batch_size": 3},
        {"number_nodes": 3},
        {"number_nodes": 0},
        {"batch_size": 0},
        {"gpu_model": None},
        {"fast_moe": 4, "batch_size": 2},
        {"fast_moe": 2},
    ],
)
def test_every_configuration_rules_words_are_read_as_one(overrides):
    values = entity_values(
        {
            "model_name": "m",
            "model_max_length": 128,
            "batch_size": 4,
            "number_gpus": 2,
            "gpu_model": "NVIDIA-A100-SXM4-80GB",
            **overrides,
        }
    )
    for experts in (None, 7):
        problems = configuration_problems(values, experts)
        assert problems
        assert rule_of("", "; ".join(problems)) == CONFIGURATION_RULE, problems


def test_reasons_of_launched_runs_are_read_as_no_rule():
    assert rule_of("", vision_problem("2.1.2", vision=True)) == CONFIGURATION_RULE
    for reason in (
        LAUNCHED_OOM,
        "GPU out of memory (from the training log, rank 1)",
        "CPU run killed",
        "",
    ):
        assert rule_of("", reason) is None
    assert rule_of("something new", LAUNCHED_OOM) is None  # an unknown marker is no rule


def test_a_measured_ooms_reason_is_read_in_todays_words_and_in_those_stored_before():
    today = REASONS[OOM_DOMINANCE].replace("answered without", "skipped without")
    assert today != REASONS[OOM_DOMINANCE]
    assert rule_of("", today) == rule_of("", REASONS[OOM_DOMINANCE]) == OOM_DOMINANCE


def test_the_metadata_ado_stores_reaches_the_rows_read_through_its_api():
    """sources.with_metadata on ado's own objects: an entity measured twice under one
    experiment, first answered by the certain bound (stored before the marker: its reason
    only), then launched."""
    from ado.schema.entity import Entity
    from ado.schema.property import ConstitutivePropertyDescriptor
    from ado.schema.property_value import ConstitutivePropertyValue

    from ado_actuators.sfttrainer.actuator.experiments import build_experiments
    from ado_actuators.sfttrainer.actuator.results import to_result
    from ado_actuators.sfttrainer.contract.outcomes import Invalid, Measured
    from ado_actuators.sfttrainer.report.sources import with_metadata

    experiment = next(
        e for e in build_experiments() if e.identifier == "finetune_full_benchmark-v1.0.0"
    )
    answered = Invalid(REASONS[CERTAIN_OOM], gpu_oom=True)
    launched = Measured(
        {
            "is_valid": 1,
            "dataset_tokens_per_second": 100.0,
            "dataset_tokens_per_second_per_gpu": 50.0,
            "measurement_seconds": 1800.0,
        }
    )
    fields = {"model_name": "m", "number_gpus": 2, "model_max_length": 512, "batch_size": 4}
    entity = Entity(
        identifier="e1",
        constitutive_property_values=tuple(
            ConstitutivePropertyValue(
                value=v, property=ConstitutivePropertyDescriptor(identifier=k)
            )
            for k, v in fields.items()
        ),
        measurement_results=[to_result(o, "e1", experiment) for o in (answered, launched)],
    )
    rows = [series.to_dict() for series in entity.experimentSeries([experiment.reference])]
    (read,) = with_metadata(rows, [entity])
    assert read["answered_by"] == ["", ""] and read["invalid_reason"][0] == REASONS[CERTAIN_OOM]
    found = cost(space_table([read]))
    assert found.answered[CERTAIN_OOM] == 1 and found.gpu == Hours(1.0, 0.0, 1)
    assert found.untimed == 0
