"""LoRA's targets against the model's own linear layers (plan/model/lora_targets.py): a target
list that names none of them is invalid before anything launches, in the actuator and in the
preview alike, with the model's layers in the reason; one that names any of them trains."""

from __future__ import annotations

import json

import pytest

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.plan.model.lora_targets import lora_target_problem
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration

LORA = "finetune_lora_benchmark-v1.0.0"
BLOOM = {
    "model_type": "bloom",
    "architectures": ["BloomForCausalLM"],
    "vocab_size": 64,
    "hidden_size": 16,
    "n_layer": 2,
    "n_head": 2,
}
LLAMA = {
    "model_type": "llama",
    "vocab_size": 64,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
}
GPT_BIGCODE = {
    "model_type": "gpt_bigcode",
    "vocab_size": 64,
    "n_embd": 16,
    "n_layer": 2,
    "n_head": 2,
}


def configuration(model_name: str, config: dict, experiment: str = LORA) -> TrainingConfiguration:
    values = entity_values(
        {"model_name": model_name, "model_max_length": 64, "batch_size": 1, "number_gpus": 0}
    )
    return TrainingConfiguration.of(values, catalog_data().experiments[experiment], config)


def test_bloom_with_the_default_targets_is_refused_naming_its_layers():
    problem = lora_target_problem(configuration("my-bloom", BLOOM))
    assert problem is not None
    assert problem.startswith(
        "LoRA's target_modules q_proj, v_proj (the targets the catalogue gives models it does "
        "not list; default q_proj, v_proj) name no linear layer of my-bloom (model_type bloom)"
    )
    assert "its linear layers: dense, dense_4h_to_h, dense_h_to_4h, lm_head, query_key_value" in (
        problem
    )


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("my-llama", LLAMA),  # counted: q_proj and v_proj are its own
        ("granite-20b-v2", GPT_BIGCODE),  # the catalogue's c_attn, c_proj for it
        # the spec's list for it names dense_4h_to_4h, which BLOOM lacks: PEFT adapts the other
        ("hf-tiny-model-private/tiny-random-BloomForCausalLM", BLOOM),
    ],
)
def test_targets_that_name_any_layer_train(name, config):
    assert lora_target_problem(configuration(name, config)) is None


def test_only_lora_runs_and_models_whose_layers_are_known_are_judged():
    assert (
        lora_target_problem(configuration("my-bloom", BLOOM, "finetune_full_benchmark-v1.0.0"))
        is None
    )
    assert lora_target_problem(configuration("my-bloom", None)) is None
    vision = {"model_type": "llava", "text_config": BLOOM, "vision_config": {"model_type": "clip"}}
    assert lora_target_problem(configuration("my-llava", vision)) is None


def test_the_actuator_answers_it_invalid_without_launching(tmp_path):
    from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
    from ado_actuators.sfttrainer.contract.outcomes import Invalid
    from ado_actuators.sfttrainer.engine.measurement import measure

    (tmp_path / "config.json").write_text(json.dumps(BLOOM))
    params = SFTTrainerParameters(
        output_dir=str(tmp_path / "out"),
        model_map={"my-bloom": {"Vanilla": str(tmp_path)}},
        hf_home=str(tmp_path / "hf"),
    )
    entity = {"model_name": "my-bloom", "number_gpus": 0, "batch_size": 1, "model_max_length": 64}
    outcome = measure(entity, LORA, params, label="bloom")
    assert isinstance(outcome, Invalid)
    assert outcome.reason == lora_target_problem(configuration("my-bloom", BLOOM))
    assert outcome.metadata == {"answered_by": "configuration_rule"}
