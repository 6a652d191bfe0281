"""The host's time per layer and micro-batch: the eager ops the layer dispatches, counted from the
release, each at the published host cost of one eager op.

Every op (a kernel launch or a view) costs the host the same few microseconds whatever its size,
so a layer's host time follows what it runs, not the tokens: its forward and backward; the
weight gradients' ops where the base trains; each LoRA adapter's own ops; the forward again
under gradient checkpointing. The counts are the ops torch's dispatcher saw per Llama decoder
layer (transformers' LlamaDecoderLayer with SDPA, PEFT's LoRA Linear), counted by
benchmarks/host_ops.py with torch's profiler and each count's layers differenced out (torch
2.13, transformers 4.55.4, peft 0.19.1). Another architecture's layer is priced at the Llama
layer's count: its norms, projections and MLP are the same ops give or take a few.

Nothing here is fitted: at EAGER_OP_SECONDS the count gives a LoRA layer with reentrant
checkpointing, fms-acceleration's A100 setting, 3.6 ms, where a per-layer time fitted on that
table came to 3.97 ms; PEFT's L40S runs without checkpointing (benchmarks/data/
peft_method_comparison.csv) test what the count says there.
"""

from __future__ import annotations

from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration

EAGER_OP_SECONDS = 10e-6
"""Host time of one eager op with autograd, Python to cudaLaunchKernel: 5-25 us an op (Python,
pybind11, autograd's node, the dispatcher, the launch: the 'overhead' of horace.io/
brrr_intro.html, broken down layer by layer in jiahuanglin.xyz's lesson 'From PyTorch op to
kernel launch'). Most of a layer's ops are small ones, so the lower part of that range. Not
fitted."""
FORWARD_OPS = 56
"""A decoder layer's forward: two RMSNorms, the projections, rotary, SDPA, the MLP, the adds."""
BACKWARD_OPS = 93
"""Its backward with the layer's weights frozen: the input gradients only."""
WEIGHT_GRADIENT_OPS = 43
"""What the backward adds where the layer's weights train: each linear's weight gradient and
its accumulation."""
ADAPTER_FORWARD_OPS = 6
"""A LoRA-adapted linear's extra ops forward (PEFT's Linear: the input cast, A, B, scaling, add)."""
ADAPTER_BACKWARD_OPS = 23
"""Their backward: A's and B's input and weight gradients, the casts', the scaling's, the add's."""
RECOMPUTE_OPS = {"reentrant": 74, "non_reentrant": 71}
"""What gradient checkpointing adds to a layer without adapters: its forward again inside the
backward, and the checkpoint's own (5 in the forward; torch.utils.checkpoint's reentrant
Function 69 in the backward, its non-reentrant saved-tensor hooks 66)."""


def layer_ops(configuration: TrainingConfiguration, adapters_per_layer: int) -> int:
    """Eager ops one layer dispatches per micro-batch, forward and backward."""
    ops = (
        FORWARD_OPS
        + BACKWARD_OPS
        + adapters_per_layer * (ADAPTER_FORWARD_OPS + ADAPTER_BACKWARD_OPS)
    )
    if not configuration.tuning.base_frozen:
        ops += WEIGHT_GRADIENT_OPS
    checkpointing = configuration.kernels.checkpointing
    if checkpointing != "none":
        ops += RECOMPUTE_OPS[checkpointing] + adapters_per_layer * ADAPTER_FORWARD_OPS
    return ops


def host_seconds(
    layers: int, configuration: TrainingConfiguration, adapters_per_layer: int
) -> float:
    """The host's time per micro-batch over `layers` layers."""
    return layers * layer_ops(configuration, adapters_per_layer) * EAGER_OP_SECONDS


HOST_BOUND_SHARE = 0.3
"""From this share of a predicted step in what the host's ops add beside the device's work on
(plan/speed/step_time.exposed_host), the row says so. The fitted table's runs never passed 20 %
(fms-acceleration's A100 runs); tested on runs nothing was fitted on: PEFT's one-GPU LoRA runs
on an L40S (benchmarks/data/peft_method_comparison.csv) at 28-29 %, predicted 1-9 % too slow,
and Qwen's LoRA profile, one sample a micro-batch on one A100 (benchmarks/data/
qwen_finetune_profile.csv), at 29-82 %: from 16 % too slow (Qwen-14B, 256 tokens) to 16 % too
fast (Qwen-1.8B, 256 tokens)."""


def host_note(share: float) -> str:
    """What a row whose step is mostly the host's ops says of it; empty below HOST_BOUND_SHARE."""
    if share < HOST_BOUND_SHARE:
        return ""
    return (
        f"host-bound: the host's dispatch of eager ops adds {100 * share:.0f} % of this step "
        f"beside the GPU's work (counted ops at {EAGER_OP_SECONDS * 1e6:.0f} µs each, not "
        f"measured on this host); the fitted runs never passed 20 %, and public one-GPU LoRA "
        f"runs at 29-82 % were predicted from 16 % too slow to 16 % too fast: a faster host "
        f"shortens this step"
    )
