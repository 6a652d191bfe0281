"""What a vision-language model's tower and projector keep (plan/memory/vision.py), by what
trains: the rules the trace showed (benchmarks/memory_truth.py's vision rows)."""

from __future__ import annotations

import dataclasses

import pytest

from ado_actuators.sfttrainer.catalog.model_shapes import shipped_shapes
from ado_actuators.sfttrainer.plan.memory import vision
from ado_actuators.sfttrainer.plan.memory.peak import Dimensions, ReleaseBehaviour, block_of
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    TrainingConfiguration,
    Tuning,
    tower_adapted,
    tower_backward,
    untrained_tower_adapters,
)

TALL = "vision-384x768-16384plus-entries-4096"
TEXT = "news-tokens-16384plus-entries-4096"


def configuration(
    method: str, checkpointing: str = "none", dataset: str = TALL, targets=("q_proj", "v_proj")
):
    config = shipped_shapes()["granite-vision-3.2-2b"]["config"]
    return TrainingConfiguration(
        tuning=Tuning(method=method, target_modules=targets if method == "lora" else ()),
        batch=Batch(per_device_batch=1, model_max_length=4096),
        kernels=Kernels(checkpointing=checkpointing),
        dataset_id=dataset,
        config=config,
    )


def kept(found: TrainingConfiguration) -> float:
    behaviour = ReleaseBehaviour()
    dims = Dimensions.of(found.shape)
    checkpointed = found.kernels.gradient_checkpointing
    return vision.tower_kept(
        found,
        block_of(dims, found, behaviour),
        checkpointed=checkpointed,
    )


def test_lora_adapts_the_towers_own_q_and_v_and_trains_them_unless_reentrant():
    assert tower_adapted(configuration("lora")) == ("q_proj", "v_proj")
    assert tower_adapted(configuration("lora", targets=("gate_proj",))) == ()
    assert tower_adapted(configuration("none")) == ()
    assert tower_backward(configuration("lora", "non_reentrant"))
    assert not tower_backward(configuration("lora", "reentrant"))
    assert tower_backward(configuration("none", "reentrant"))
    assert untrained_tower_adapters(configuration("lora", "non_reentrant")) is None
    warning = untrained_tower_adapters(configuration("lora", "reentrant"))
    assert warning and "q_proj, v_proj" in warning and "no gradient" in warning


def test_full_fine_tuning_keeps_most_and_checkpointing_keeps_each_layers_input():
    full, lora = kept(configuration("none")), kept(configuration("lora"))
    checkpointed = kept(configuration("none", "non_reentrant"))
    assert full > lora > checkpointed > 0
    shape = configuration("none").shape.vision
    positions = 3 * shape.positions  # the tall image: two tiles and the base image
    layer_inputs = shape.layers * 2 * shape.hidden  # bf16
    projector = 2 * (2 * shape.text_hidden + shape.feature_layers * shape.hidden)
    assert checkpointed == pytest.approx(positions * (layer_inputs + projector))


@pytest.mark.parametrize(
    "found",
    [
        configuration("pt"),
        configuration("lora", targets=("gate_proj",)),
        # TRL's hook is on the language model's embedding: no checkpointed tower layer gets an
        # input that needs a gradient, and reentrant checkpointing records nothing
        configuration("lora", "reentrant"),
        # a text dataset: no image
        configuration("none", dataset=TEXT),
    ],
    ids=["prompt tuning", "LoRA off the tower", "LoRA, reentrant", "text"],
)
def test_a_tower_that_runs_its_forward_only_keeps_nothing(found):
    assert kept(found) == 0.0


def test_an_adapted_towers_features_make_the_first_language_layer_keep_everything():
    assert vision.features_need_grad(configuration("lora"))
    assert not vision.features_need_grad(configuration("lora", "reentrant"))
    assert not vision.features_need_grad(configuration("lora", targets=("gate_proj",)))
    no_image = dataclasses.replace(configuration("lora"), dataset_id=TEXT)
    assert not vision.features_need_grad(no_image)


@pytest.mark.parametrize(
    ("name", "wide"),
    [
        ("q_proj", False),
        ("k_proj", False),
        ("v_proj", False),
        ("out_proj", False),
        ("fc1", False),
        ("fc2", True),
    ],
)
def test_each_tower_linears_adapter_keeps_its_input_in_fp32_its_mask_and_its_rank(name, wide):
    """A tower layer (every input needing a gradient) with one LoRA adapter: the adapter keeps
    its input cast to fp32 (the hidden width; fc2's, the MLP's), dropout's one-byte mask and
    lora_A's fp32 output of r per position, beside what the layer keeps without it."""
    from ado_actuators.sfttrainer.plan.memory import activations

    found = configuration("lora", targets=(name,))
    shape = found.shape.vision
    plain = vision.tower_block(
        shape, block_of(Dimensions.of(found.shape), found, ReleaseBehaviour()), ()
    )
    adapted = dataclasses.replace(plain, adapted=(name,))
    width = shape.intermediate if wide else shape.hidden
    extra = activations.bigcode_saved(adapted) - activations.bigcode_saved(plain)
    assert extra == 4 * width + 1 * width + 4 * found.tuning.lora_r
