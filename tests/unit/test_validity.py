"""The spec's is_valid rules 1-7."""

import json

import pytest

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.validity import (
    ModelConfigUnavailable,
    configuration_problems,
    read_model_config,
)
from ado_actuators.sfttrainer.plan.model.shape import ModelShape


def values(**overrides):
    base = {
        "model_name": "m",
        "model_max_length": 128,
        "batch_size": 4,
        "number_gpus": 2,
        "gpu_model": "NVIDIA-A100-SXM4-80GB",
    }
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
        (
            {"fast_moe": 4, "number_gpus": 2, "batch_size": 2},
            "number_gpus 2 is not divisible by fast_moe 4",
        ),
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
    """fast_moe's rule reads the experts from the model's shape (plan/model/shape.py), the one
    reader of config.json's fields; multimodal models nest them under text_config."""
    (tmp_path / "config.json").write_text(json.dumps({"num_local_experts": 8}))
    assert ModelShape.of(read_model_config(str(tmp_path), None)).experts_given == 8
    nested = {"text_config": {"model_type": "mixtral", "num_local_experts": 4}}
    assert ModelShape.of(nested).experts_given == 4
    assert ModelShape.of({"hidden_size": 8}).experts_given is None


def test_config_of_an_uncached_hub_model_says_how_to_add_it(tmp_path):
    with pytest.raises(ModelConfigUnavailable, match="add a directory holding it to the actuator"):
        read_model_config("org/not-cached", str(tmp_path))


@pytest.mark.parametrize(
    ("version", "invalid"), [("2.7.1", True), ("2.1.2", True), ("2.8.2", False)]
)
def test_a_vision_dataset_on_a_release_without_image_fields_is_invalid_before_anything_runs(
    tmp_path, version, invalid
):
    from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
    from ado_actuators.sfttrainer.contract.outcomes import Invalid
    from ado_actuators.sfttrainer.engine.measurement import measure

    params = SFTTrainerParameters(output_dir=str(tmp_path), model_map={}, hf_home=str(tmp_path))
    outcome = measure(
        {
            "model_name": "not-in-any-map",
            "number_gpus": 0,
            "batch_size": 2,
            "model_max_length": 512,
            "fms_hf_tuning_version": version,
            "dataset_id": "vision-384x384-16384plus-entries-4096",
        },
        "finetune_full_benchmark-v1.0.0",
        params,
        label="vision",
    )
    if invalid:  # answered before the model is even looked up
        assert isinstance(outcome, Invalid)
        assert outcome.reason == (
            f"fms-hf-tuning {version} cannot read vision datasets (it has no "
            "--dataset_image_field); choose fms_hf_tuning_version 2.8.2 or later, or a text "
            "dataset_id"
        )
        assert outcome.metadata == {"answered_by": "configuration_rule"}
    else:  # a release that reads it goes on, here to the unknown model
        assert not isinstance(outcome, Invalid) and "not-in-any-map" in outcome.reason


def test_one_gpu_and_a_batch_of_one_are_valid_but_one_gpu_still_needs_its_model():
    assert configuration_problems(values(number_gpus=1, batch_size=1)) == []
    assert configuration_problems(values(number_gpus=1, gpu_model=None)) == [
        "gpu_model must be set when number_gpus is 1"
    ]


# ---- config.json without the weights: a directory, or the Hugging Face cache -----------------

MOE = {"model_type": "mixtral", "num_local_experts": 8}


def cache_with(hub, repo="acme/tiny-moe", config=MOE):
    """`hub` laid out as huggingface_hub's cache: refs/main names the snapshot holding the file."""
    folder = hub / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0123abcd")
    (folder / "snapshots" / "0123abcd").mkdir(parents=True)
    (folder / "snapshots" / "0123abcd" / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "location", ["/nonexistent/model", "./missing-model", "~/missing-model-4f2a"]
)
def test_a_path_that_is_no_directory_is_not_taken_for_a_hub_id(location):
    with pytest.raises(ModelConfigUnavailable) as missing:
        read_model_config(location, None)
    assert str(missing.value) == (
        f"no config.json for model {location!r}: none at {location}/config.json nor among the "
        f"shipped shapes; add a directory holding it to the actuator configuration's model_map "
        f"({{{location}: {{Vanilla: /path/to/model}}}}), or put the model's config.json there"
    )


def test_a_hub_id_is_read_from_hf_homes_cache(tmp_path):
    cache_with(tmp_path / "hf" / "hub")
    assert read_model_config("acme/tiny-moe", str(tmp_path / "hf")) == MOE


def test_without_hf_home_the_processes_own_cache_is_read(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "default-hub"))
    cache_with(tmp_path / "default-hub")
    assert read_model_config("acme/tiny-moe", None) == MOE
    with pytest.raises(ModelConfigUnavailable) as missing:
        read_model_config("acme/elsewhere", None)
    assert str(missing.value).startswith(
        "no config.json for model 'acme/elsewhere': none at the Hugging Face cache for "
        "acme/elsewhere nor among the shipped shapes; add a directory"
    )


def test_an_uncached_hub_model_names_the_cache_looked_in_and_how_to_fill_it(tmp_path):
    with pytest.raises(ModelConfigUnavailable) as missing:
        read_model_config("org/not-cached", str(tmp_path))
    assert str(missing.value).startswith(
        f"no config.json for model 'org/not-cached': none at {tmp_path / 'hub'} for "
        f"org/not-cached nor among the shipped shapes; add a directory"
    )


def test_neither_a_directory_nor_a_hub_id_is_looked_for_as_a_directory():
    with pytest.raises(
        ModelConfigUnavailable, match=r"^no config.json for model 'two words': none "
    ):
        read_model_config("two words", None)


def test_an_unreadable_config_names_its_file(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelConfigUnavailable, match=f"^cannot read {tmp_path / 'config.json'}: "):
        read_model_config(str(tmp_path), None)


def test_a_catalogue_model_found_nowhere_reads_its_shipped_shape_in_its_weights_format(tmp_path):
    """read_model_config passes the model's name and weights format to the shapes shipped with
    the package (catalog/model_shapes.yaml): a GPTQ checkpoint gets its quantization."""
    missing = str(tmp_path / "nowhere")
    vanilla = read_model_config(missing, None, model_name="granite-20b-v2")
    assert vanilla["model_type"] == "gpt_bigcode" and "quantization_config" not in vanilla
    gptq = read_model_config(
        missing, None, model_name="granite-20b-v2", weights_format="GPTQ-Quantized"
    )
    assert gptq["quantization_config"] == {"quant_method": "gptq", "bits": 4}
    with pytest.raises(ModelConfigUnavailable):
        read_model_config(missing, None)


@pytest.mark.parametrize(
    ("experts", "reason"),
    [
        (3, "the model's num_local_experts 3 is not divisible by fast_moe 2"),
        (
            None,
            "fast_moe 2 needs a Mixture of Experts model, but moe declares no num_local_experts",
        ),
    ],
)
def test_fast_moe_is_judged_by_the_experts_the_models_shape_reads(tmp_path, experts, reason):
    """Rule 7 through the measurement: the model's config.json (here a local directory) is read
    once, and the experts its shape counts decide before anything launches."""
    from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
    from ado_actuators.sfttrainer.contract.outcomes import Invalid
    from ado_actuators.sfttrainer.engine.measurement import measure

    config = {"model_type": "mixtral", "hidden_size": 8, "num_hidden_layers": 1}
    if experts:
        config["num_local_experts"] = experts
    (tmp_path / "config.json").write_text(json.dumps(config))
    params = SFTTrainerParameters(
        output_dir=str(tmp_path / "out"),
        model_map={"moe": {"Vanilla": str(tmp_path)}},
        hf_home=str(tmp_path / "hf"),
    )
    outcome = measure(
        {
            "model_name": "moe",
            "number_gpus": 2,
            "gpu_model": "NVIDIA-A100-SXM4-80GB",
            "batch_size": 2,
            "model_max_length": 512,
            "fast_moe": 2,
        },
        "finetune_full_benchmark-v1.0.0",
        params,
        label="moe",
    )
    assert isinstance(outcome, Invalid)
    assert outcome.reason == reason
    assert outcome.metadata == {"answered_by": "configuration_rule"}
