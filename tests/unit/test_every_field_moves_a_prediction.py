"""Every entity field that changes the step changes a prediction (issue 50, part 3): each field
of catalog/entity.FIELDS is set to each other value it can take on three configurations (full
fine-tuning and LoRA of Llama-3.1-8B, LoRA of Mixtral-8x7B, over four A100s) and must move the
predicted memory (at any moment of the step) or the predicted tokens/s on at least one, unless it is listed in
CANNOT_MATTER with the reason. A field that moves a prediction may not be listed: the list only
holds what the step cannot see; NOT_FOLLOWED_YET what the step sees but no prediction follows
yet, each with what is missing."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from model_configs import LLAMA_31_8B, MIXTRAL_8X7B
from training_configuration import configuration_of

from ado_actuators.sfttrainer.catalog.entity import FIELDS, Domain, entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.units import GIB
from ado_actuators.sfttrainer.plan.memory.verdict import assess
from ado_actuators.sfttrainer.plan.speed.prediction import predict_speed

BASE = {
    "model_name": "llama3.1-8b",
    "model_max_length": 2048,
    "batch_size": 8,
    "number_gpus": 4,
    "gpu_model": "NVIDIA-A100-SXM4-80GB",
    "dataset_id": "news-tokens-16384plus-entries-4096",
    "fms_hf_tuning_version": "3.2.2",
}
CONFIGURATIONS = (
    ("finetune_full_benchmark-v1.0.0", LLAMA_31_8B),
    ("finetune_lora_benchmark-v1.0.0", LLAMA_31_8B),
    ("finetune_lora_benchmark-v1.0.0", MIXTRAL_8X7B),
)

OTHER_VALUES: dict[str, tuple[Any, ...]] = {
    "model_name": ("mistral-7b-v0.1",),
    "model_max_length": (4096,),
    "batch_size": (16,),
    "number_gpus": (8,),
    "gradient_accumulation_steps": (1, 8),
    "number_nodes": (2,),
    "r": (64,),
    "lora_alpha": (64,),
    "fast_moe": (2,),
    "max_steps": (10,),
    "num_train_epochs": (2.0,),
    "stop_after_seconds": (60.0,),
    "auto_stop_max_seconds": (200.0,),
}
"""Other values of the fields whose domain is a range or open."""

CANNOT_MATTER = {
    "model_name": "names the model whose config.json the predictions read (given here)",
    "max_steps": "when the measurement stops, not what a step does",
    "num_train_epochs": "when the measurement stops, not what a step does",
    "stop_after_seconds": "when the measurement stops, not what a step does",
    "auto_stop_method": "when the measurement stops, not what a step does",
    "auto_stop_max_seconds": "when the measurement stops, not what a step does",
    "lora_alpha": "LoRA's output scale: the same tensors and the same FLOPs at any value",
    "fsdp_state_dict_type": "how a checkpoint is saved; a measurement saves none",
    "fsdp_use_orig_params": "FSDP's flat parameters hold the same bytes either way",
    "enable_roce": "picks the NIC NCCL uses across nodes; the network speed is the actuator "
    "parameter inter_node_gbps",
    "accelerate_config_fsdp_transformer_layer_cls_to_wrap": "the decoder layer is the unit "
    "whatever it is named; a class the model lacks fails at launch",
    "dataset_text_field": "which column holds the text; the tokens are the dataset's",
    "dataset_image_field": "which column holds the images of a vision dataset",
    "remove_unused_columns": "whether the trainer drops the dataset's other columns before "
    "batching; the model sees the same tensors",
    "dataset_kwargs_skip_prepare_dataset": "whether TRL prepares the dataset again; the model "
    "sees the same tensors",
}

NOT_FOLLOWED_YET: dict[str, str] = {}
"""Fields that change the step but no prediction follows yet, each with what is missing: a
field leaves this list when a prediction follows it (the test below fails until it does)."""


def other_values(name: str) -> tuple[Any, ...]:
    field = FIELDS[name]
    if field.values is not None:
        return tuple(v for v in field.values if v != BASE.get(name, field.default))
    if field.domain is Domain.BINARY:
        return (not field.default,)
    return OTHER_VALUES[name]


@functools.cache
def predictions(experiment: str, model: str, field: str, value: Any) -> tuple[Any, Any]:
    """(the predicted GiB of every moment of the step, the predicted tokens/s per GPU) with `field` at `value`
    (hashable: lists as tuples); None where one is not predicted."""
    config = LLAMA_31_8B if model == "llama" else MIXTRAL_8X7B
    entity = dict(BASE)
    if field:
        entity[field] = list(value) if isinstance(value, tuple) else value
    definition = catalog_data().experiment(experiment)
    configuration = configuration_of(entity_values(entity), definition, config)
    memory = assess(configuration, hf_home="/nonexistent", enabled=True).prediction
    speed = predict_speed(configuration)
    moments = None
    if memory is not None:  # every moment's total, not only the peak's: a field may move one
        moments = tuple(
            sorted(
                (phase, moment, round(total / GIB, 6))
                for phase, totals in memory.candidates.items()
                for moment, total in totals.items()
            )
        )
    return moments, round(speed.tokens_per_second_per_gpu, 3) if speed.step else None


def moves(name: str) -> bool:
    for experiment, config in CONFIGURATIONS:
        model = "llama" if config is LLAMA_31_8B else "mixtral"
        base = predictions(experiment, model, "", None)
        for value in other_values(name):
            hashable = tuple(value) if isinstance(value, list) else value
            if predictions(experiment, model, name, hashable) != base:
                return True
    return False


def test_the_base_configurations_are_predicted():
    for experiment, config in CONFIGURATIONS:
        model = "llama" if config is LLAMA_31_8B else "mixtral"
        assert None not in predictions(experiment, model, "", None), (experiment, model)


@pytest.mark.parametrize("name", sorted(set(FIELDS) - set(CANNOT_MATTER) - set(NOT_FOLLOWED_YET)))
def test_each_field_that_shapes_the_step_moves_memory_or_speed(name):
    assert moves(name), f"{name}: no value moves the predicted peak or tokens/s"


@pytest.mark.parametrize("name", sorted(CANNOT_MATTER))
def test_a_field_listed_as_unable_to_matter_moves_nothing(name):
    assert name in FIELDS, f"{name} is no longer a field"
    assert not moves(name), f"{name} moves a prediction: take it off CANNOT_MATTER"


@pytest.mark.parametrize("name", sorted(NOT_FOLLOWED_YET))
def test_a_field_no_prediction_follows_yet_is_listed_until_one_does(name):
    assert name in FIELDS and name not in CANNOT_MATTER
    assert not moves(name), f"{name} now moves a prediction: take it off NOT_FOLLOWED_YET"
