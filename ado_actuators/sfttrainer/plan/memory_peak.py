"""The predicted peak of GPU memory per device, by parts, from config.json and the entity: pure.

Unlike the bound (memory_bound.py), this is an estimate of what torch's allocator peaks at
(`torch.cuda.max_memory_allocated`), not a floor. A step has phases, and the peak is the
largest phase, not their sum:

- forward and backward: the model states at rest, FSDP's gathered units, the activations
  autograd keeps (under gradient checkpointing: every layer's input, plus one layer recomputed),
  and the logits and the loss at their peak;
- the optimizer step: weights, gradients, optimizer state, and the temporaries torch's foreach
  AdamW allocates (one state-sized copy: `_foreach_sqrt` of exp_avg_sq).

Every constant fitted to published runs is a field of `Fitted`, and FITTED holds the values
fitted on all of fms-acceleration's A100 runs; `benchmarks/memory_bound.py` prints the
prediction against fms-acceleration's A100 runs with those constants fitted on the other model
families (leave one family out).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.plan.architecture import ParameterCounts, language_config
from ado_actuators.sfttrainer.plan.logits_memory import LossCode
from ado_actuators.sfttrainer.plan.memory_bound import (
    DTYPE_BYTES,
    GIB,
    PROMPT_TUNING_VIRTUAL_TOKENS,
    MemoryBound,
    Training,
)


@dataclasses.dataclass(frozen=True)
class Fitted:
    """The prediction's two fitted constants (benchmarks/memory_bound.py fits and judges them)."""

    activations: float = 1.0
    """Scale on the per-layer activations counted from the saved tensors (allocator rounding,
    autograd's own buffers, tensors the count misses)."""
    recompute: float = 2.0
    """Layers' worth of activations alive while one checkpointed layer is recomputed and its
    backward runs: the recomputed layer, and the gradients of its activations."""
    logits: float = 1.0
    """Scale on the logits and loss tensors counted from the release's loss code (the
    cross-entropy kernels' own workspaces, copies the count misses)."""


FITTED = Fitted(activations=0.8, recompute=2.0, logits=1.05)
"""Fitted on every fms-acceleration A100 run with a torch peak (benchmarks/memory_bound.py:
median |error| 1.1 % over 244 runs; each family judged with the others' fit: 0.7-6.9 %, except
santacoder's LoRA, under by half)."""
ALLOCATOR_HEADROOM = 0.05
"""What the caching allocator reserves beyond the allocated peak (fragmentation, rounding), as
a share of it, when the prediction is compared with a device: the largest a run that ran on the
public A100 data allows is 6.6 %, so no run that ran is called out of memory."""

FSDP_PREFETCHED_UNITS = 2
"""FSDP's default BACKWARD_PRE prefetch gathers the next unit while the current one runs."""
DROPOUT_MASK_BYTES = 1
"""fms-hf-tuning's LoRA default lora_dropout 0.05: dropout keeps a copy of each adapted input
and its mask, a byte per element."""


@dataclasses.dataclass(frozen=True)
class Dimensions:
    """The shapes the activations and logits scale with, from config.json."""

    model_type: str
    layers: int
    hidden: int
    heads: int
    q_width: int
    kv_width: int
    intermediate: int
    vocab: int
    experts_per_token: int = 1

    @classmethod
    def of(cls, config: dict[str, Any]) -> Dimensions:
        config = language_config(config)
        model_type = str(config.get("model_type"))
        if model_type == "gpt_bigcode":
            hidden, heads = config["n_embd"], config["n_head"]
            return cls(
                model_type,
                config["n_layer"],
                hidden,
                heads,
                hidden,
                hidden // heads if config.get("multi_query", True) else hidden,
                config.get("n_inner") or 4 * hidden,
                config["vocab_size"],
            )
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        head_dim = config.get("head_dim") or hidden // heads
        kv = config.get("num_key_value_heads") or heads
        return cls(
            model_type=model_type,
            layers=config["num_hidden_layers"],
            hidden=hidden,
            heads=heads,
            q_width=heads * head_dim,
            kv_width=kv * head_dim,
            intermediate=config["intermediate_size"],
            vocab=config["vocab_size"],
            experts_per_token=config.get("num_experts_per_tok") or 1,
        )


@dataclasses.dataclass(frozen=True)
class Workload:
    """What of the entity beyond `Training` decides the activations and the logits."""

    per_device_batch: int
    sequence_length: int
    gradient_checkpointing: bool = True
    reentrant_checkpointing: bool = False  # torch.utils.checkpoint's use_reentrant=True
    flash_attention: bool = True
    gradient_accumulation_steps: int = 1
    loss: LossCode | None = None
    fused_loss: str | None = None  # None | "in_place" | "chunked" (logits_memory.LossCode)
    fast_rms_layernorm: bool = False
    autocast: bool = False  # bf16/fp16 mixed precision: autocast, outputs converted to fp32
    fsdp_upcast: bool = False  # mixed precision under FSDP: accelerate upcasts to fp32

    @property
    def tokens(self) -> int:
        return self.per_device_batch * self.sequence_length


@dataclasses.dataclass(frozen=True)
class PeakPrediction:
    """Bytes per device in each phase, by part; the peak is the largest phase."""

    phases: dict[str, dict[str, float]]
    fitted: Fitted = FITTED
    notes: tuple[str, ...] = ()

    @property
    def phase(self) -> str:
        return max(self.phases, key=lambda name: sum(self.phases[name].values()))

    @property
    def total(self) -> float:
        return sum(self.phases[self.phase].values())

    @property
    def gib(self) -> float:
        return self.total / GIB

    def as_metadata(self) -> dict[str, Any]:
        return {
            "predicted_gib": round(self.gib, 3),
            "peak_phase": self.phase,
            "phases_gib": {
                name: {k: round(v / GIB, 3) for k, v in parts.items()}
                for name, parts in self.phases.items()
            },
            "fitted": dataclasses.asdict(self.fitted),
            "notes": list(self.notes),
        }


def _norm_bytes(dims: Dimensions, trains_norms: bool, fused: bool) -> int:
    """Per token, what one RMSNorm keeps for backward. Eager: the fp32 copy of its input (for
    the variance's gradient) and, when its weight trains, the normalized input in the model's
    dtype; a fused kernel keeps the input and a per-row scale."""
    if fused or dims.model_type == "gpt_bigcode":  # LayerNorm's kernel keeps its input
        return 2 * dims.hidden
    return 4 * dims.hidden + (2 * dims.hidden if trains_norms else 0)


def layer_activation_bytes(
    dims: Dimensions,
    training: Training,
    workload: Workload,
    adapted: tuple[str, ...] = (),
    fitted: Fitted = FITTED,
) -> float:
    """Bytes one decoder layer keeps for backward per token, without checkpointing.

    Counted from the tensors autograd saves in a Llama-style block in the model's dtype: the two
    norms, the attention's q, k, v and output (flash attention's saved tensors; the rotary
    embedding's outputs are those q and k), and the MLP's gate, activation and up outputs (and
    the product down_proj reads, when its weight trains). A frozen linear keeps nothing for its
    weight's gradient; a LoRA-adapted one keeps the dropout copy of its input and its mask.
    """
    width = DTYPE_BYTES[training.torch_dtype]
    full = training.peft_method == "none"
    h, q, kv, inter = dims.hidden, dims.q_width, dims.kv_width, dims.intermediate
    norms = 2 * _norm_bytes(dims, full, workload.fast_rms_layernorm)
    attention = width * (2 * q + 2 * kv)
    if not workload.flash_attention:
        # eager/math attention keeps the [heads, s, s] probabilities per sequence: fp32 from
        # the softmax and the dtype copy the value matmul reads
        attention += dims.heads * workload.sequence_length * (4 + width)
    if dims.model_type == "gpt_bigcode":
        mlp = width * 2 * inter  # GELU's input and output
    else:
        mlp = width * (3 + (1 if full else 0)) * inter
    mlp *= dims.experts_per_token
    adapters = 0.0
    if training.peft_method == "lora":
        # every target reads the hidden state but these two
        inputs = {"o_proj": q, "down_proj": inter}
        per_input = width + DROPOUT_MASK_BYTES
        adapters = sum(
            per_input * inputs.get(name, h) + width * training.lora_r for name in adapted
        )
    return fitted.activations * (norms + attention + mlp + adapters)


def activation_bytes(
    dims: Dimensions,
    training: Training,
    workload: Workload,
    adapted: tuple[str, ...] = (),
    fitted: Fitted = FITTED,
) -> dict[str, float]:
    per_layer = layer_activation_bytes(dims, training, workload, adapted, fitted) * workload.tokens
    if workload.gradient_checkpointing:
        width = DTYPE_BYTES[training.torch_dtype]
        inputs = dims.layers * workload.tokens * dims.hidden * width
        return {"checkpointed_inputs": float(inputs), "recompute": fitted.recompute * per_layer}
    return {"activations": dims.layers * per_layer}


def logits_bytes(
    dims: Dimensions, training: Training, workload: Workload, fitted: Fitted = FITTED
) -> float:
    """The logits and the loss at their peak: [tokens, vocab] times the release's bytes
    (prompt tuning's virtual tokens ride along in every sequence)."""
    if workload.loss is None:
        return 0.0
    tokens = workload.tokens
    if training.peft_method == "pt":
        tokens += workload.per_device_batch * PROMPT_TUNING_VIRTUAL_TOKENS
    width = DTYPE_BYTES[training.torch_dtype]
    per_logit = workload.loss.bytes_per_logit(
        width, workload.fused_loss, autocast=workload.autocast
    )
    return fitted.logits * tokens * dims.vocab * per_logit


def held_input_gradient_bytes(
    dims: Dimensions, training: Training, bound: MemoryBound, workload: Workload
) -> float:
    """What FSDP keeps through backward when its layer units hold only frozen weights (LoRA,
    prompt tuning) and checkpointing is reentrant: each unit's post-backward hook is registered
    on the detached input the recompute feeds the layer, and holds it, with the gradient that
    reaches it, until backward ends (torch's `_register_post_backward_reshard_only_hook`). By
    the last layer's backward, every other layer's input gradient is alive beside the inputs
    already counted. Seen in fms-acceleration's A100 runs as ~0.93 GiB more per sample of 4,096
    tokens on 2 and 4 GPUs than on 1 for Mistral-7B LoRA, and not for full fine-tuning, whose
    units train; benchmarks/fsdp_frozen_layers.py reproduces it on CPU."""
    if not (
        training.distributed_backend == "FSDP"
        and bound.shards > 1
        and training.peft_method != "none"
        and workload.gradient_checkpointing
        and workload.reentrant_checkpointing
    ):
        return 0.0
    width = DTYPE_BYTES[training.torch_dtype]
    return float((dims.layers - 1) * workload.tokens * dims.hidden * width)


def gathered_bytes(
    counts: ParameterCounts, dims: Dimensions, bound: MemoryBound, training: Training
) -> float:
    """FSDP's unsharded parameters during forward and backward: the root unit (embedding, LM
    head, final norm: gathered for the whole step) and the prefetched decoder layers."""
    if training.distributed_backend != "FSDP":  # one device's share is all of it: nothing gathered
        return 0.0
    width = DTYPE_BYTES[training.torch_dtype]
    root = counts.embedding + counts.lm_head + dims.hidden
    layer = (counts.total - root) / max(1, dims.layers)
    unsharded = (root + FSDP_PREFETCHED_UNITS * layer) * width
    return unsharded * (1 - 1 / bound.shards)


def predict_peak(
    counts: ParameterCounts,
    dims: Dimensions,
    training: Training,
    bound: MemoryBound,
    workload: Workload,
    adapted: tuple[str, ...] = (),
    fitted: Fitted = FITTED,
) -> PeakPrediction:
    """The peak of `workload` on one device; `bound` gives the model states as the certain-OOM
    bound counts them (the same sharding), without its CUDA context, which torch's peak does
    not include."""
    weights, gradients = bound.parts["weights"], bound.parts["gradients"]
    state = bound.parts["optimizer_state"]
    notes = list(bound.notes)
    if workload.loss is None and workload.fused_loss != "chunked":
        notes.append("logits not counted: the transformers release's loss is not on record")
    if workload.fsdp_upcast and bound.shards > 1 and not training.quantized_bits:
        # accelerate upcasts FSDP's flat parameters to fp32 under mixed precision when they
        # train: gradients and AdamW's state (zeros_like) become fp32 too. Under PEFT the
        # adapters are units of their own (peft's fsdp_auto_wrap_policy, which the trainer
        # installs), so the layers' frozen flat parameters stay in the model's dtype.
        scale = 4 / DTYPE_BYTES[training.torch_dtype]
        if training.peft_method == "none":
            weights = weights * scale
        gradients, state = gradients * scale, state * scale
        notes.append("FSDP under mixed precision: trainable parameters upcast to fp32")
    at_rest = {"weights": weights, "optimizer_state": state}
    # Gradients are freed after each step (zero_grad sets them to None) and grow through the
    # backward pass; with accumulation they stay from the first micro-batch on.
    accumulating = gradients if workload.gradient_accumulation_steps > 1 else 0.0
    during = {
        **at_rest,
        "gradients": accumulating,
        "fsdp_gathered": gathered_bytes(counts, dims, bound, training),
    }
    activations = activation_bytes(dims, training, workload, adapted, fitted)
    recompute = activations.pop("recompute", None)
    # The logits live from the LM head through the loss's backward, before any layer is
    # recomputed; a recomputed layer lives after them. Never both at once.
    phases = {
        "loss": {
            **during,
            **activations,
            "logits_and_loss": logits_bytes(dims, training, workload, fitted),
        }
    }
    if recompute is not None:
        phases["backward"] = {**during, **activations, "recompute": recompute}
        held = held_input_gradient_bytes(dims, training, bound, workload)
        if held:
            phases["backward"]["fsdp_held_input_gradients"] = held
    # one state-sized temporary (of AdamW's two) in torch's foreach AdamW
    phases["optimizer_step"] = {
        **at_rest,
        "gradients": gradients,
        "optimizer_temporaries": state / 2,
    }
    return PeakPrediction(phases=phases, fitted=fitted, notes=tuple(notes))
