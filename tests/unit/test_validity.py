"""The spec's is_valid rules 1-7."""

import json

import pytest

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.validity import (
    ModelConfigUnavailable,
    configuration_problems,
    num_local_experts,
    read_model_config,
)


def values(**overrides):
    base = {"model_name": "m", "model_max_length": 128, "batch_size": 4, "number_gpus": 2,
            "gpu_model": "NVIDIA-A100-SXM4-80GB"}  # fmt: skip
    return entity_values({**base, **overrides})


def test_valid_configuration_has_no_problems():
    assert configuration_problems(values()) == []
    assert configuration_problems(values(number_gpus=0, gpu_model=None)) == []


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"batch_size": 3}, "batch_size 3 is not divisible by number_gpus 2"),
        ({"number_nodes": 3, "number_gpus": 2}, "number_gpus 2 is not divisible by number_nodes 3"),
        ({"number_nodes": 0}, "number_nodes must be at least 1"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"gpu_model": ""}, "gpu_model must be set when number_gpus is 2"),
        ({"gpu_model": None}, "gpu_model must be set"),
        ({"fast_moe": 4, "number_gpus": 2, "batch_size": 2}, "number_gpus 2 is not divisible by fast_moe 4"),
    ],
)
def test_rules(overrides, fragment):
    problems = configuration_problems(values(**overrides), num_local_experts=8)
    assert any(fragment in p for p in problems), problems


def test_rule_7_experts_must_divide_by_fast_moe():
    moe = values(fast_moe=2)
    assert configuration_problems(moe, num_local_experts=8) == []
    assert "num_local_experts 7 is not divisible by fast_moe 2" in configuration_problems(moe, 7)[0]
    assert "declares no num_local_experts" in configuration_problems(moe, None)[0]


def test_num_local_experts_read_from_config_without_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_local_experts": 8}))
    assert num_local_experts(read_model_config(str(tmp_path), None)) == 8
    nested = {"text_config": {"num_local_experts": 4}}
    assert num_local_experts(nested) == 4
    assert num_local_experts({"hidden_size": 8}) is None


def test_config_of_an_uncached_hub_model_names_the_download_command(tmp_path):
    with pytest.raises(ModelConfigUnavailable, match="sfttrainer_download_hf_weights"):
        read_model_config("org/not-cached", str(tmp_path))
