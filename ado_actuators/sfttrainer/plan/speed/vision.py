"""A vision-language model's image side in the step: the vision tower's and projector's matmul
FLOPs over each sample's tiles, for the passes the tuning method runs through them, and the
note that says how a vision row's tokens are counted.

What trains (fms-hf-tuning 3.2.2 loads the model with AutoModelForVision2Seq and freezes
nothing itself): full fine-tuning trains the tower and projector with the language model;
PEFT's LoRA adapts every module whose name ends with a target, the tower's attention
(`q_proj`, `k_proj`, `v_proj`, `out_proj`) and MLP (`fc1`, `fc2`) included, so a target among
those needs the activation gradients through the tower, except under reentrant checkpointing
(plan/model/training.tower_backward); prompt tuning, or LoRA targets the tower lacks, run its
forward only. Gradient checkpointing recomputes the tower's forward where
it runs a backward (transformers checkpoints the CLIP and SigLIP encoders' layers too).
"""

from __future__ import annotations

from ado_actuators.sfttrainer.plan.model.training import (
    TrainingConfiguration,
    VisionSample,
    tower_backward,
    untrained_tower_adapters,
    vision_sample_tokens,
)


def sample(configuration: TrainingConfiguration) -> VisionSample | None:
    """The configuration's sample as the language model sees it, None unless a vision dataset
    meets a vision-language model."""
    return vision_sample_tokens(configuration.dataset_id, configuration.shape)


def tower_passes(configuration: TrainingConfiguration) -> int:
    """The tower's passes, each its forward's FLOPs: forward, recompute, input gradients,
    weight gradients, as what trains needs them (plan/model/training.tower_backward)."""
    if not tower_backward(configuration):
        return 1
    recompute = 1 if configuration.kernels.gradient_checkpointing else 0
    return 2 + recompute + (1 if configuration.tuning.method == "none" else 0)


def flops_per_sample(configuration: TrainingConfiguration) -> float:
    """The tower's and projector's FLOPs for one sample's image, every pass; 0 for a text row."""
    image = sample(configuration)
    shape = configuration.shape
    if image is None or shape is None or shape.vision is None:
        return 0.0
    return shape.vision.tower_flops(image.tiles) * tower_passes(configuration)


def note(configuration: TrainingConfiguration) -> str | None:
    """How a vision row's tokens and image are counted; None for a text row."""
    image = sample(configuration)
    shape = configuration.shape
    if image is None or shape is None or shape.vision is None:
        return None
    vision, passes = shape.vision, tower_passes(configuration)
    return (
        f"{image.image_tokens} image tokens a sample (LLaVA-NeXT tiling of the "
        f"{configuration.dataset_id} image, config.json's image_grid_pinpoints, "
        f"{vision.image_size}-pixel tiles of {vision.patch_size}-pixel patches) + "
        f"{image.text_tokens} text tokens (the dataset's floor) = {image.total} a sample, "
        f"not cut to model_max_length (fms-hf-tuning's vision collator does not truncate); "
        f"text + image tokens count toward dataset_tokens_per_second; the vision tower runs "
        f"{image.tiles} tiles a sample, {passes} pass{'es' if passes > 1 else ''}"
        + (f"; {warning}" if (warning := untrained_tower_adapters(configuration)) else "")
    )
