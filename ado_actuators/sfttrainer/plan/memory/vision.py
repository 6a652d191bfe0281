"""What a vision-language model's image side keeps for backward: the vision tower's layers and
the projector, per device, held from their forward (the first thing a step runs) until the
language model's backward has ended. Pure.

A tower layer (CLIP's, SigLIP's: LayerNorms, multi-head attention, a GELU MLP) keeps what a
GPTBigCode layer keeps (plan/memory/activations.bigcode_saved, family "vision"), per position
of each tile the tower encodes. What keeps anything follows what trains (transformers 4.55.4,
the release fms-hf-tuning 3.2.2 pins; PEFT 0.19):

- full fine-tuning trains the tower and the projector: everything is kept;
- LoRA adapts the tower's linears its target names match (`q_proj` and `v_proj` are the
  tower's names too): from the first adapted linear on, what an adapter's output reaches is
  kept; the projector, whose linears no catalogue target names, keeps its GELU's input;
- prompt tuning, LoRA targets the tower lacks, and LoRA under reentrant checkpointing
  (plan/model/training.tower_backward): its forward only, nothing kept.

Under gradient checkpointing (transformers checkpoints the encoders' layers too) each layer
keeps its input. The tower's own backward runs last, when every activation of the language
model is freed: it is not the step's peak while the tower keeps less than the language model's
layers (the trace, benchmarks/memory_truth.py, checks this).
"""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.plan.memory import activations
from ado_actuators.sfttrainer.plan.model.training import (
    TrainingConfiguration,
    tower_adapted,
    tower_backward,
    vision_sample_tokens,
)
from ado_actuators.sfttrainer.plan.model.vision import VisionShape

QUICK_GELU = "quick_gelu"
"""CLIP's MLP activation: `x * sigmoid(1.702 x)` keeps its input and the sigmoid's output."""


def features_need_grad(configuration: TrainingConfiguration) -> bool:
    """Whether the image's features, scattered into the language model's input, need a
    gradient under LoRA (the tower runs a backward): the first language layer's input then
    needs one, and that layer keeps what any other keeps."""
    sample = vision_sample_tokens(configuration.dataset_id, configuration.shape)
    lora = configuration.tuning.method == "lora"
    return sample is not None and lora and tower_backward(configuration)


def tower_block(
    vision: VisionShape, language: activations.Block, adapted: tuple[str, ...]
) -> activations.Block:
    """A tower layer as activations counts it: the language layer's widths and code paths
    (the tower runs in the same dtype, autocast and attention), the tower's shapes."""
    return dataclasses.replace(
        language,
        hidden=vision.hidden,
        q_width=vision.hidden,
        kv_width=vision.hidden,
        heads=vision.heads,
        intermediate=vision.intermediate,
        adapted=adapted,
        experts_per_token=1,
        qk_norm=False,
        moe=None,
        experts=1,
        shared_intermediate=0,
        family="vision",
        residual_dropout=False,
        activation_kept=2 if vision.activation == QUICK_GELU else 1,
    )


def tower_kept(
    configuration: TrainingConfiguration,
    language: activations.Block,
    *,
    checkpointed: bool,
) -> float:
    """Bytes per device the tower and projector keep for backward (0 for a text row)."""
    shape = configuration.shape
    sample = vision_sample_tokens(configuration.dataset_id, shape)
    if sample is None or shape is None or shape.vision is None:
        return 0.0
    vision = shape.vision
    full = configuration.tuning.method == "none"
    if not tower_backward(configuration):
        return 0.0
    block = tower_block(vision, language, tower_adapted(configuration))
    positions = configuration.batch.per_device_batch * sample.tiles * vision.positions
    layers: float
    if checkpointed:
        layers = vision.layers * block.residual * vision.hidden
    else:
        # attention runs over each tile's positions
        length = vision.positions
        first = activations.layer_saved(block, length, first=True, input_grads=full)
        layers = first + (vision.layers - 1) * activations.layer_saved(block, length)
    return (layers + _projector_kept(vision, block, full)) * positions


def _projector_kept(vision: VisionShape, block: activations.Block, full: bool) -> float:
    """Per position: the projector's GELU input; trained, its linears' inputs too (linear_1's
    is the concatenated feature layers, a tensor of its own when there are several; one
    layer's features are a view of a layer's input the tower keeps already)."""
    width, text = block.width, vision.text_hidden
    kept = width * text
    if full:
        concatenated = vision.feature_layers * vision.hidden if vision.feature_layers > 1 else 0
        kept += width * (text + concatenated)
    return kept
