"""A vision-language model on a vision dataset (issue 52): the sequence its language model
sees (text + image tokens, not cut to model_max_length), the tower and projector in the
parameter counts, the tower's passes per tuning method, and the preview row's note."""

from __future__ import annotations

import dataclasses

import pytest

from ado_actuators.sfttrainer.catalog import model_shapes
from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.plan.model.architecture import count_parameters
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration
from ado_actuators.sfttrainer.plan.speed import vision
from ado_actuators.sfttrainer.plan.speed.prediction import predict_speed

CATALOG = catalog_data()
GRANITE = "granite-vision-3.2-2b"
SQUARE = "vision-384x384-16384plus-entries-4096"
TALL = "vision-384x768-16384plus-entries-4096"


def configuration(
    experiment: str = "finetune_lora_benchmark-v1.0.0",
    model: str = GRANITE,
    dataset: str = SQUARE,
    length: int = 512,
) -> TrainingConfiguration:
    values = entity_values(
        {
            "model_name": model,
            "dataset_id": dataset,
            "model_max_length": length,
            "batch_size": 2,
            "number_gpus": 1,
            "gpu_model": "NVIDIA-H100-80GB-HBM3",
        }
    )
    found = model_shapes.shipped_shape(model)
    assert found is not None
    return TrainingConfiguration.of(values, CATALOG.experiment(experiment), found.config)


@pytest.mark.parametrize(("dataset", "image"), [(SQUARE, 1485), (TALL, 2241)])
@pytest.mark.parametrize("length", [512, 4096])
def test_the_sample_is_text_and_image_tokens_whatever_the_length(
    dataset: str, image: int, length: int
) -> None:
    batch = configuration(dataset=dataset, length=length).batch
    assert batch.sample_tokens == batch.model_max_length == 16384 + image


def test_a_text_dataset_on_a_vision_model_is_cut_as_before() -> None:
    batch = configuration(dataset="news-tokens-16384plus-entries-4096", length=512).batch
    assert batch.sample_tokens == batch.model_max_length == 512


def test_the_tower_and_projector_are_counted_and_lora_adapts_the_towers_targets() -> None:
    text = count_parameters(configuration(model="granite-3.1-2b").config or {})
    counts = count_parameters(configuration().config or {})
    # the transformers' model on the meta device (tests/unit/test_vision_tokens.py)
    assert counts.vision == 428_225_600 + 13_637_632
    assert counts.total - counts.vision == text.total + 2048  # one more vocabulary entry
    lora = configuration().tuning
    tower = 27 * lora.lora_r * 2 * (1152 + 1152)  # q_proj and v_proj of 27 SigLIP layers
    language = 40 * lora.lora_r * ((2048 + 2048) + (2048 + 512))
    assert lora.count(counts) == tower + language


def test_the_towers_passes_follow_what_trains() -> None:
    lora = configuration()
    checkpointing = 1 if lora.kernels.gradient_checkpointing else 0
    assert vision.tower_passes(lora) == 2 + checkpointing
    untouched = dataclasses.replace(
        lora, tuning=dataclasses.replace(lora.tuning, target_modules=("gate_proj",))
    )
    assert vision.tower_passes(untouched) == 1
    full = configuration("finetune_full_benchmark-v1.0.0")
    full_checkpointing = 1 if full.kernels.gradient_checkpointing else 0
    assert vision.tower_passes(full) == 3 + full_checkpointing
    assert vision.tower_passes(configuration("finetune_pt_benchmark-v1.0.0")) == 1
    reentrant = dataclasses.replace(
        lora, kernels=dataclasses.replace(lora.kernels, checkpointing="reentrant")
    )
    assert vision.tower_passes(reentrant) == 1  # its adapters get no gradient
    note = vision.note(reentrant)
    assert note and "get no gradient under reentrant checkpointing" in note


def test_the_prediction_prices_the_tower_and_says_how_tokens_count() -> None:
    lora = configuration()
    speed = predict_speed(lora)
    assert speed.step is not None
    assert speed.step.parts["vision"] > 0
    samples = lora.batch.per_device_batch * lora.batch.gradient_accumulation_steps
    assert speed.step.tokens_per_gpu == samples * (16384 + 1485)
    (note,) = [n for n in speed.notes if "image tokens" in n]
    assert note.startswith("1485 image tokens a sample")
    assert "text + image tokens count toward dataset_tokens_per_second" in note


def test_a_text_row_has_no_vision_part() -> None:
    speed = predict_speed(configuration(model="granite-3.1-2b"))
    assert speed.step is not None
    assert "vision" not in speed.step.parts
    assert not [n for n in speed.notes if "image tokens" in n]
