"""space/groups.py: one definition of an answer group, its subgroups and a row's device, read
alike by the guided walk (entity values as ado gives them), the calibration (cells of ado's
CSV) and the picture (report/table.py's axes)."""

from __future__ import annotations

from ado_actuators.sfttrainer.report import table
from ado_actuators.sfttrainer.space import groups

LORA = "finetune_lora_benchmark-v1.0.0"


def test_a_value_reads_the_same_from_an_entity_ado_and_a_csv():
    assert groups.text(8) == groups.text(8.0) == groups.text("8") == groups.text("8.0") == "8"
    assert groups.text(0.5) == groups.text("0.5") == "0.5"
    assert groups.text(True) == "True" and groups.text("True") == "True"
    assert groups.text("llama3.1-8b") == "llama3.1-8b"
    assert groups.text(None) == "None" and groups.text(float("nan")) == "nan"


def test_the_group_names_the_experiment_and_each_field_given_the_subgroup_its_axes():
    values = {"model_name": "m", "r": 8.0, "number_gpus": "4", "model_max_length": 2048}
    group = groups.group_of(LORA, values, ["model_name", "r", "torch_dtype"])
    assert group == "finetune_lora_benchmark, model_name m, r 8"
    assert groups.subgroup_of(group, values) == f"{group}, 4 GPUs, 2048 tokens"


def test_the_axes_never_make_a_group_and_the_device_does_where_it_varies():
    points = [
        {"batch_size": b, "number_gpus": g, "model_max_length": 512, "gpu_model": d, "r": 8}
        for b in (1, 2)
        for g in (1, 2)
        for d in ("A100", "H100")
    ]
    assert groups.varying(points) == ["gpu_model"]
    assert groups.varying([{**p, "r": 8.0} if p["batch_size"] == 1 else p for p in points]) == [
        "gpu_model"
    ]


def test_the_calibration_groups_by_what_sets_speed_apart():
    values = {
        "model_name": "m",
        "gpu_model": "A100",
        "batch_size": 8,
        "auto_stop_method": "STEADY_CI95_1PCT",
        "max_steps": 5,
        "torch_dtype": "",
        "r": 16,
    }
    assert groups.speed_fields(values) == ["model_name", "r"]


def test_a_rows_device_is_its_gpu_model_or_the_cpu():
    assert groups.device_of({"number_gpus": 2, "gpu_model": "A100"}) == "A100"
    assert groups.device_of({"number_gpus": "2", "gpu_model": "A100"}) == "A100"
    for none in ({"number_gpus": 0, "gpu_model": "A100"}, {"gpu_model": "A100"}, {}):
        assert groups.device_of(none) == groups.CPU
    assert groups.device_of({"number_gpus": "n/a"}) == groups.CPU


def test_the_picture_draws_its_panels_on_the_answer_groups_axes():
    assert (table.X, table.LINE, table.ROW) == groups.AXES


def test_a_stored_value_is_a_number_only_where_it_holds_one():
    """ado's store gives NaN for a property not measured, a CSV gives text: neither is a figure
    the calibration or the walk may read."""
    from ado_actuators.sfttrainer.space.stored import number

    assert [number(v) for v in (3, "2.5", 0, "-1")] == [3.0, 2.5, 0.0, -1.0]
    assert [number(v) for v in (None, "", "n/a", float("nan"), "nan")] == [None] * 5
