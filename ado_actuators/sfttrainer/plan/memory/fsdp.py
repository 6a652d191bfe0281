"""What FSDP adds to one device's memory beside its shard of the model states, counted once for
the formula (plan/memory/peak.py) and for the trace of a model's own code (plan/memory/traced.py,
whose single-device trace cannot hold it): the units it gathers and the input gradients its
frozen units hold through backward."""

from __future__ import annotations

from typing import Protocol

from ado_actuators.sfttrainer.plan.memory.bound import MemoryBound
from ado_actuators.sfttrainer.plan.model.architecture import DTYPE_BYTES
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration


class Checkpointing(Protocol):
    """What the release does with the checkpointing asked for (plan/memory/peak.ReleaseBehaviour)."""

    @property
    def checkpointing_honoured(self) -> bool: ...
    @property
    def checkpointed_by_model(self) -> bool: ...


FSDP_PREFETCHED_UNITS = 2
"""FSDP's default BACKWARD_PRE prefetch gathers the next unit while the current one runs. Under
LoRA the next unit is an adapter (PEFT's wrap policy makes each one a unit of its own): one
decoder layer is gathered at a time (benchmarks/memory_truth.py's FSDP rows)."""


KEPT_AFTER_FORWARD = ("SHARD_GRAD_OP", "HYBRID_SHARD_ZERO2")
"""Strategies that do not reshard a unit after its forward (torch's ShardingStrategy: ZeRO-2,
`reshard_after_forward=False`): every unit's parameters stay gathered from its forward to its
backward, so by the end of the forward the whole model is unsharded beside the device's shards.
That is what they are chosen for: no second all-gather in the backward."""


def casts_units(configuration: TrainingConfiguration) -> bool:
    """FSDP runs (accelerate launches more than one rank) under 16-bit mixed precision:
    accelerate then hands FSDP a mixed-precision policy whose param_dtype is autocast's, so
    every unit is gathered, and computes, in 16 bits whatever its shards keep (fp32 loaded, or
    upcast by accelerate). No whole-model 16-bit copy is made: autocast meets 16-bit weights."""
    return (
        configuration.parallelism.backend == "FSDP"
        and configuration.parallelism.gpus > 1
        and configuration.precision.mixed_precision
        and configuration.precision.autocast_dtype is not None
    )


def layer_dtype(configuration: TrainingConfiguration) -> str:
    """The dtype of a weight as the layers compute with it: autocast's under FSDP's mixed
    precision (`casts_units`), else the loaded one."""
    dtype = configuration.precision.autocast_dtype if casts_units(configuration) else None
    return dtype or configuration.precision.torch_dtype


def layer_weight_bytes(configuration: TrainingConfiguration) -> int:
    """Bytes of a weight as the layers compute with it (`layer_dtype`)."""
    return DTYPE_BYTES[layer_dtype(configuration)]


def gathered_layers(configuration: TrainingConfiguration, layers: int) -> int:
    """Decoder layers FSDP holds unsharded at once: all of them where the strategy keeps them
    from forward to backward, else the prefetched ones (FSDP_PREFETCHED_UNITS)."""
    if configuration.parallelism.fsdp_sharding_strategy in KEPT_AFTER_FORWARD:
        return layers
    return 1 if configuration.tuning.method == "lora" else FSDP_PREFETCHED_UNITS


def gathered_bytes(
    total: float,
    embeddings: float,
    layers: int,
    hidden: int,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
) -> float:
    """FSDP's unsharded parameters during forward and backward: the root unit (`embeddings`, the
    input embedding and an untied LM head, and the final norm: gathered for the whole step) and
    the decoder layers `gathered_layers` holds, each all-gathered whole into a buffer beside the
    device's own shard (benchmarks/memory_truth.py's FSDP rows: the shard stays), in the dtype
    the layers compute in (`layer_weight_bytes`)."""
    if configuration.parallelism.backend != "FSDP" or bound.shards < 2:
        return 0.0  # one device's share is all of it: nothing gathered
    width = layer_weight_bytes(configuration)
    root = embeddings + hidden
    layer = (total - root) / max(1, layers)
    return (root + gathered_layers(configuration, layers) * layer) * width


def held_input_gradient_bytes(
    layers: int,
    hidden: int,
    tokens: int,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    behaviour: Checkpointing,
) -> float:
    """What FSDP keeps through backward when its layer units hold only frozen weights (LoRA,
    prompt tuning) and checkpointing is reentrant: each unit's post-backward hook is registered
    on the detached input the recompute feeds the layer, and holds it, with the gradient that
    reaches it, until backward ends (torch's `_register_post_backward_reshard_only_hook`). By
    the last layer's backward, every other layer's input gradient is alive beside the inputs
    already counted: `tokens` of the device's micro-batch at the length the layers see
    (prompt tuning's virtual tokens too). Seen in fms-acceleration's A100 runs as ~0.93 GiB more
    per sample of 4,096 tokens on 2 and 4 GPUs than on 1 for Mistral-7B LoRA, and not for full
    fine-tuning, whose units train; benchmarks/fsdp_frozen_layers.py reproduces it on CPU. Only
    where the model's forward checkpoints each layer (the unit inside the checkpoint): a layer
    that checkpoints itself (transformers 4.52 on) recomputes inside its unit, whose hook then
    holds nothing (benchmarks/memory_truth.py's FSDP rows)."""
    if not (
        configuration.parallelism.backend == "FSDP"
        and bound.shards > 1
        and configuration.tuning.method != "none"
        and configuration.kernels.checkpointing == "reentrant"
        and behaviour.checkpointing_honoured
        and behaviour.checkpointed_by_model
    ):
        return 0.0
    width = layer_weight_bytes(configuration)
    return float((layers - 1) * tokens * hidden * width)
