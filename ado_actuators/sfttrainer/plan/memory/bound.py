"""A lower bound of the GPU memory one device needs to train an entity: pure, no torch.

What is counted is what must be resident at the optimizer step of any step after the first:
the weights, the gradients of the trainable parameters, and the optimizer's state for them,
divided over the devices the plan shards them over, plus an allowance for the CUDA context.
Activations, allocator fragmentation, FSDP's gathered layers, DDP's gradient buckets and
communication buffers are deliberately not counted: this is a bound, not an estimate, and it
must never exceed what a run that works really uses. Where fms-hf-tuning's behaviour leaves
a choice open, the smaller count is taken and the comment says why.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.catalog.models import GPTQ_QUANTIZED
from ado_actuators.sfttrainer.contract.units import GIB, MIB
from ado_actuators.sfttrainer.plan.model.architecture import (
    DTYPE_BYTES,
    ParameterCounts,
)
from ado_actuators.sfttrainer.plan.model.geometry import DATA_PARALLEL
from ado_actuators.sfttrainer.plan.model.optimizers import optimizer_state
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration

CUDA_CONTEXT_FLOOR_BYTES = 256 * MIB
"""The CUDA context and torch's kernels take 300-500 MiB of each device's memory on Ampere and
Hopper with lazy module loading (outside torch's allocator, so in nvidia-smi's figure but not
in max_memory_allocated); 256 MiB stays below every one of those. A floor, so the bound stays
a bound: what a process can allocate takes off the larger estimate instead
(metrics/gpu_memory.CUDA_CONTEXT_ESTIMATE_BYTES)."""

GPTQ_MIN_BITS = 2
"""The narrowest width GPTQ quantizes to: the width assumed for GPTQ-Quantized weights whose
config.json does not say (a smaller count than any checkpoint really has)."""


UNCOUNTED_STATE = "optimizer state of"
"""How a bound's note that leaves an optimizer's state out begins: the verdict repeats it."""


@dataclasses.dataclass(frozen=True)
class MemoryBound:
    """Bytes one device needs at least; `parts` are per device (already divided)."""

    parts: dict[str, float]
    shards: int
    sharding: str
    notes: tuple[str, ...] = ()
    gradients_whole: bool = False  # held unsharded between micro-batches (`gradients_whole`)

    @property
    def gradient_shards(self) -> int:
        """Over how many devices the gradients are divided while the step's micro-batches run."""
        return 1 if self.gradients_whole else self.shards

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    @property
    def gib(self) -> float:
        return self.total / GIB

    def describe(self) -> str:
        """e.g. `weights 6.74 + gradients 6.74 + optimizer_state 13.49 GiB (over 2 devices
        (FSDP FULL_SHARD)) + CUDA context 0.25 GiB`."""
        shared = " + ".join(
            f"{k} {v / GIB:.2f}" for k, v in self.parts.items() if k != "cuda_context"
        )
        sharding = self.sharding + (f", {WHOLE_GRADIENTS}" if self.gradients_whole else "")
        return (
            f"{shared} GiB ({sharding}) + CUDA context {self.parts['cuda_context'] / GIB:.2f} GiB"
        )

    def as_metadata(self) -> dict[str, Any]:
        return {
            "lower_bound_gib": round(self.gib, 3),
            "parts_gib": {k: round(v / GIB, 3) for k, v in self.parts.items()},
            "shards": self.shards,
            "sharding": self.sharding,
            "notes": list(self.notes),
        }


def weight_bits(configuration: TrainingConfiguration) -> int | None:
    """Bits per block weight of a pre-quantized checkpoint, from its config.json (None: not
    quantized); a GPTQ-Quantized one whose config.json does not say is read at GPTQ_MIN_BITS,
    the smaller count. A quantization the config.json states unreadably raises."""
    bits = configuration.shape.quantized_bits if configuration.shape else None
    if bits is None and configuration.weights_format == GPTQ_QUANTIZED:
        return GPTQ_MIN_BITS
    return bits


def trainable_parameters(counts: ParameterCounts, configuration: TrainingConfiguration) -> int:
    return configuration.tuning.count(counts)


def shards(configuration: TrainingConfiguration) -> tuple[int, str]:
    """Over how many devices the weights, gradients and optimizer state are divided."""
    gpus, nodes = max(1, configuration.parallelism.gpus), max(1, configuration.parallelism.nodes)
    if configuration.parallelism.fast_moe:
        # Expert parallelism places experts on different devices and FSDP shards the rest;
        # how the two combine depends on the plugin's version, so the largest divisor is
        # taken: every layout keeps at least a 1/number_gpus share on each device.
        return (
            gpus,
            f"over {gpus} devices, expert-parallel fast_moe {configuration.parallelism.fast_moe}",
        )
    if gpus == 1:
        return 1, "one device"
    if configuration.parallelism.backend == DATA_PARALLEL:
        # torch DataParallel keeps the model, gradients and optimizer state on device 0.
        return 1, f"whole on device 0 of {gpus} (DataParallel)"
    if configuration.parallelism.backend == "DDP":
        return 1, f"whole on each of {gpus} devices (DDP)"
    strategy = configuration.parallelism.fsdp_sharding_strategy
    if strategy == "NO_SHARD":
        return 1, f"whole on each of {gpus} devices (FSDP NO_SHARD)"
    if strategy.startswith("HYBRID_SHARD"):
        per_node = max(1, gpus // nodes)
        where = (
            "whole on the one device of each node"
            if per_node == 1
            else f"over the {per_node} devices of a node"
        )
        return per_node, f"{where} (FSDP {strategy})"
    # FULL_SHARD; SHARD_GRAD_OP keeps gathered parameters between forward and backward,
    # which only adds to its at-rest shards.
    return gpus, f"over {gpus} devices (FSDP {strategy})"


WHOLE_GRADIENTS = (
    "the gradients whole on each device: more than one micro-batch a step under FSDP's no_sync"
)


def gradients_whole(configuration: TrainingConfiguration) -> bool:
    """Whether the bound holds each device's gradients whole between a step's micro-batches
    (TrainingConfiguration.gradients_whole_between_micro_batches). Not under expert parallelism
    (fast_moe): each device keeps its own experts' gradients, which FSDP does not shard, and the
    bound keeps its smaller reading (`shards`); fms-acceleration's Mixtral ran full fine-tuning
    over 8 A100s at 16 micro-batches a step in 55 GiB, where its whole gradients alone take 87."""
    return (
        configuration.gradients_whole_between_micro_batches
        and not configuration.parallelism.fast_moe
    )


def memory_bound(
    counts: ParameterCounts, configuration: TrainingConfiguration, *, quantized: bool = True
) -> MemoryBound:
    """The bytes one device of the measurement needs at least (see the module docstring);
    `quantized=False`: as if the checkpoint's block weights were at the model's dtype (what a
    trace of its code holds, plan/memory/verdict.py)."""
    bits = weight_bits(configuration) if quantized else None
    width = DTYPE_BYTES[configuration.precision.torch_dtype]
    trainable = trainable_parameters(counts, configuration)
    notes = []
    if bits:
        # GPTQ/bnb scales and zero points are left out: the smaller count.
        weights = counts.quantizable * bits / 8
        weights += (counts.total - counts.quantizable) * width
        notes.append(f"block weights at {bits} bits")
    else:
        weights = counts.total * width
    if configuration.tuning.method != "none":
        # PEFT may keep adapters in float32 (autocast_adapter_dtype); the training dtype is
        # the smaller reading.
        weights += trainable * width
    optim = configuration.precision.optim
    optimizer = optimizer_state(optim)
    # layer-wise optimizers update each parameter in its backward: no gradient waits for a step
    gradients = trainable * width if optimizer.gradients_stored else 0
    state = 0.0
    if optimizer.unstated:
        notes.append(f"{UNCOUNTED_STATE} {optim} not counted: {optimizer.unstated}")
    elif optimizer.paged:
        # the driver can move it all to the host: no device must hold it
        notes.append(f"{UNCOUNTED_STATE} {optim} not counted: paged to the host when short")
    else:
        state = optimizer.state_bytes(trainable, width)
    divisor, sharding = shards(configuration)
    whole = gradients_whole(configuration) and divisor > 1
    parts = {
        "weights": weights / divisor,
        "gradients": gradients / (1 if whole else divisor),
        "optimizer_state": state / divisor,
        "cuda_context": float(CUDA_CONTEXT_FLOOR_BYTES),
    }
    return MemoryBound(
        parts=parts, shards=divisor, sharding=sharding, notes=tuple(notes), gradients_whole=whole
    )
