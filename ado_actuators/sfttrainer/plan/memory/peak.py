"""The predicted peak of GPU memory per device, by parts, from config.json and the entity: pure.

Unlike the bound (plan/memory/bound.py), this is an estimate of what torch's allocator peaks at
(`torch.cuda.max_memory_allocated`), not a floor. A step has phases, and the peak is the
largest phase, not their sum:

- forward: the model states at rest, FSDP's gathered units, what every layer keeps for backward
  (under gradient checkpointing: every layer's input), and the logits and the loss at their
  largest;
- backward: the largest of its moments: the loss's backward (the logits' gradients); the first
  layer it reaches (under checkpointing, recomputed), with the MLP's gradients; the last layer
  it reaches, with every gradient but the embedding's (a hybrid whose first layer is a Mamba
  layer: also that layer's mixer's backward, after its MLP's, every gradient of the layer made
  but the mixer's in projection's);
- optimizer_step: weights, gradients, optimizer state, and the temporary torch's foreach AdamW
  allocates (one state-sized `_foreach_sqrt` of exp_avg_sq, per parameter group).

Every tensor is counted from the code that allocates it (plan/memory/activations.py; the logits per
transformers release, plan/memory/logits.py), and checked against a trace of that code
(benchmarks/memory_truth.py): no constant fitted to measurements sizes a tensor. What a CPU
trace cannot show (the CUDA context, cuBLAS's workspaces, the caching allocator's headroom) is
added when the prediction is compared with a device (plan/memory/verdict.py), fitted on public
GPU runs (benchmarks/memory_prediction.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.contract.units import GIB
from ado_actuators.sfttrainer.plan.memory import activations, fsdp, vision
from ado_actuators.sfttrainer.plan.memory.bound import (
    MemoryBound,
    trainable_parameters,
    weight_bits,
)
from ado_actuators.sfttrainer.plan.memory.logits import LossCode
from ado_actuators.sfttrainer.plan.model.architecture import (
    ADAPTER_BYTES,
    DTYPE_BYTES,
    ParameterCounts,
)
from ado_actuators.sfttrainer.plan.model.families.gpt_bigcode import DEFAULT_POSITIONS
from ado_actuators.sfttrainer.plan.model.families.registry import family_of
from ado_actuators.sfttrainer.plan.model.families.spec import Dispatch, Family, Layout
from ado_actuators.sfttrainer.plan.model.optimizers import OptimizerState, optimizer_state
from ado_actuators.sfttrainer.plan.model.shape import ModelShape
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration

ALLOCATOR_HEADROOM = 0.007
"""What the caching allocator holds beyond the allocated peak (cached blocks, fragmentation,
cuBLAS's workspaces), as a share of it, when the prediction is compared with a device: the
least any run that ran on fms-acceleration's A100 tables held (nvidia-smi's peak less the CUDA
context over torch's, 0.70 % for Llama-3-8B full fine-tuning at batch 4; 0.81 % with the Llama
runs left out). Fitted by benchmarks/memory_prediction.fit_headroom."""


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
    qk_norm: bool = False
    rotary: bool = True
    transformed_embedding: bool = False
    """The first layer's input is not the embedding's output: Granite multiplies it by
    embedding_multiplier, GPTBigCode adds the position embeddings."""
    experts: int = 1
    shared_intermediate: int = 0
    residual_dropout: bool = False  # GPTBigCode: resid_pdrop, embd_pdrop > 0
    buffers: int = 0  # bytes of buffers beside the parameters

    @classmethod
    def of(cls, model: ModelShape | dict[str, Any]) -> Dimensions:
        """From the model's shape (or its parsed config.json); KeyError naming a shape it lacks."""
        shape = model if isinstance(model, ModelShape) else ModelShape.of(model)
        family = shape.family
        dims = cls(
            model_type=shape.model_type,
            layers=shape.needed("layers"),
            hidden=shape.needed("hidden"),
            heads=shape.needed("heads"),
            q_width=shape.q_width,
            kv_width=shape.kv_width,
            intermediate=shape.intermediate,
            vocab=shape.needed("vocab"),
            transformed_embedding=bool(family and family.transformed_embedding),
        )
        if family and family.layout == "gpt_bigcode":
            # the model's causal mask: a bool [positions, positions] buffer
            buffers = (shape.positions or DEFAULT_POSITIONS) ** 2
            return dataclasses.replace(
                dims, rotary=False, residual_dropout=shape.residual_dropout, buffers=buffers
            )
        return dataclasses.replace(
            dims,
            experts_per_token=shape.experts_per_token,
            qk_norm=bool(family and family.qk_norm),
            experts=shape.experts,
            shared_intermediate=shape.shared_intermediate,
        )

    @property
    def family(self) -> Family | None:
        return family_of(self.model_type)

    @property
    def layout(self) -> Layout:
        """The layer's code (plan/memory/activations.py's Block.family): Llama's for any
        family counted otherwise."""
        family = self.family
        return family.layout if family else "llama"

    @property
    def moe(self) -> Dispatch | None:
        family = self.family
        return family.moe if family else None


@dataclasses.dataclass(frozen=True)
class ReleaseBehaviour:
    """What the pinned transformers, TRL and accelerate releases do with a configuration
    (plan/memory/verdict.behaviour_of): the configuration says what the entity asks for, these
    what the code it runs then allocates, which the configuration alone cannot say."""

    loss: LossCode | None = None
    fused_loss: str | None = None  # None | "in_place" | "chunked" (plan/memory/logits.LossCode)
    fsdp_upcast: bool = False  # mixed precision under FSDP: accelerate upcasts to fp32
    logits_copy: bool = False  # TRL >= 0.15 copies the logits for its token accuracy
    lora_dropout: bool = True
    # the release's layers honour gradient checkpointing (transformers 4.55's GPTBigCode does not)
    checkpointing_honoured: bool = True
    checkpointed_by_model: bool = False
    """The model's forward checkpoints each layer (transformers before 4.52): an FSDP unit then
    runs inside the checkpoint (plan/memory/logits.read_checkpointing's "model")."""


def checkpointed(configuration: TrainingConfiguration, behaviour: ReleaseBehaviour) -> bool:
    """The layers are checkpointed: asked for, and honoured by the release's layers."""
    return configuration.kernels.gradient_checkpointing and behaviour.checkpointing_honoured


def reentrant(configuration: TrainingConfiguration, behaviour: ReleaseBehaviour) -> bool:
    """Checkpointed by torch.utils.checkpoint's use_reentrant=True."""
    return checkpointed(configuration, behaviour) and configuration.kernels.checkpointing == (
        "reentrant"
    )


def input_hook(configuration: TrainingConfiguration) -> bool:
    """TRL's input-gradient hook (PEFT under reentrant checkpointing), installed from the
    arguments: also where the release's layers then ignore checkpointing."""
    return configuration.kernels.checkpointing == "reentrant"


@dataclasses.dataclass(frozen=True)
class PeakPrediction:
    """Bytes per device in each phase, by part; the peak is the largest phase."""

    phases: dict[str, dict[str, float]]
    moments: dict[str, str] = dataclasses.field(default_factory=dict)
    """Per phase, the moment its peak is at (e.g. backward: "loss")."""
    candidates: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    """Per phase, every moment considered and its total (bytes)."""
    source: str = "formula"  # formula (plan/memory/activations.py) | trace (plan/memory/traced.py)
    notes: tuple[str, ...] = ()
    paged: float = 0.0
    """A paged optimizer's state (plan/model/optimizers.py): outside torch's allocated peak,
    resident while the device has room for it, on the host when it has not."""

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
            "moments": dict(self.moments),
            "moments_gib": {
                phase: {name: round(total / GIB, 3) for name, total in totals.items()}
                for phase, totals in self.candidates.items()
            },
            "parts_from": self.source,
            "notes": list(self.notes),
            **({"paged_optimizer_state_gib": round(self.paged / GIB, 3)} if self.paged else {}),
        }


AUTOCAST_BYTES = 2
"""Autocast computes in 16 bits (bfloat16 or float16)."""


def widths(configuration: TrainingConfiguration) -> tuple[int, int, str]:
    """(the bytes of a linear's output, of the residual stream, what keeps autocast's weight
    copies: activations.Block's width, stream and casts). Under autocast over weights of
    another dtype every linear computes in 16 bits while the residual stream stays fp32 (fp32
    weights; 16-bit weights of the other kind promote to fp32 at the first residual sum), and
    autocast casts every weight: fp32 weights that train are cached."""
    if fsdp.casts_units(configuration):
        # the layers meet FSDP's 16-bit gathered units, as a 16-bit model's layers meet their
        # weights: nothing for autocast to cast or cache, the stream in 16 bits
        return AUTOCAST_BYTES, AUTOCAST_BYTES, "none"
    model = DTYPE_BYTES[configuration.precision.torch_dtype]
    dtype = configuration.precision.autocast_dtype or (
        configuration.precision.torch_dtype if model == AUTOCAST_BYTES else None
    )
    if not configuration.precision.mixed_precision or configuration.precision.torch_dtype == dtype:
        return model, model, "none"
    cached = (
        configuration.precision.torch_dtype == "float32" and configuration.tuning.method == "none"
    )
    return AUTOCAST_BYTES, activations.FP32, "cached" if cached else "saved"


def block_of(
    dims: Dimensions,
    configuration: TrainingConfiguration,
    behaviour: ReleaseBehaviour,
    adapted: tuple[str, ...] = (),
) -> activations.Block:
    """A decoder layer as plan/memory/activations.py counts it."""
    width, stream, casts = widths(configuration)
    return activations.Block(
        hidden=dims.hidden,
        q_width=dims.q_width,
        kv_width=dims.kv_width,
        heads=dims.heads,
        intermediate=dims.intermediate,
        width=width,
        stream=stream,
        dtype_width=fsdp.layer_weight_bytes(configuration),
        casts=casts,
        tuning=configuration.tuning,
        kernels=configuration.kernels,
        adapted=adapted if configuration.tuning.method == "lora" else (),
        lora_dropout=behaviour.lora_dropout,
        experts_per_token=dims.experts_per_token,
        autocast=configuration.precision.mixed_precision,
        qk_norm=dims.qk_norm,
        # the family's code dispatches to its experts however many it has: a one-expert
        # Mixtral or GraniteMoE still runs its router and experts (benchmarks/memory_truth.py's
        # one-expert row), not a dense MLP
        moe=dims.moe,
        experts=dims.experts,
        shared_intermediate=dims.shared_intermediate,
        family=dims.layout,
        residual_dropout=dims.residual_dropout,
    )


def input_grads(configuration: TrainingConfiguration, behaviour: ReleaseBehaviour) -> bool:
    """Whether the first layer's input needs a gradient: the embedding trains (full
    fine-tuning), prompt tuning's virtual tokens are joined to it, TRL installs the
    input-gradient hook (PEFT under reentrant checkpointing), or an adapted vision tower's
    features are scattered into it."""
    return (
        configuration.tuning.method != "lora"
        or reentrant(configuration, behaviour)
        or vision.features_need_grad(configuration)
    )


def layer_bytes(
    dims: Dimensions,
    configuration: TrainingConfiguration,
    behaviour: ReleaseBehaviour,
    adapted: tuple[str, ...] = (),
) -> dict[str, float]:
    """Per layer, for the device's batch: what the first and any other layer keep, what a
    layer's backward adds, and a checkpointed layer's input."""
    block = block_of(dims, configuration, behaviour, adapted)
    length = configuration.model_length
    tokens = configuration.batch.per_device_batch * length
    grad_in = input_grads(configuration, behaviour)
    first = activations.layer_saved(block, length, True, grad_in)
    held = 0.0
    if reentrant(configuration, behaviour):
        held = block.residual * dims.hidden  # the recomputed output, held through backward
    backward = _layer_backward(block, configuration, length, tokens, held)
    hooked = configuration.tuning.method != "none" and input_hook(configuration)
    # the embedding's output is in its weight's dtype (an embedding is no autocast op), of the
    # samples' tokens alone (prompt tuning joins its virtual tokens to it after)
    model = fsdp.layer_weight_bytes(configuration)
    real = model * dims.hidden * configuration.batch.per_device_batch
    real *= configuration.batch.model_max_length
    # the select's backward is in the weights' dtype, whatever autocast computes in
    expert_weights = dims.experts * 2 * dims.intermediate * dims.hidden * model
    return {
        **_copies(dims, block, checkpointed(configuration, behaviour), grad_in),
        "first": first * tokens,
        "other": activations.layer_saved(block, length) * tokens,
        "backward": max(backward, activations.experts_moment(block, expert_weights, tokens)),
        "forward": activations.layer_forward(
            block, not checkpointed(configuration, behaviour), length
        )
        * tokens,
        "recomputed": activations.layer_forward(block, True, length) * tokens,
        # eager attention's additive mask, [batch, 1, s, s] in the model's dtype: alive through
        # the forward, and through backward as every checkpointed layer's input
        "mask": (block.kernels.attention == "eager" and block.family == "llama")
        * block.mask_width
        * tokens
        * length,
        "input": block.residual * dims.hidden * tokens,
        # the first norm's fp32 copy of an fp32 input is the input itself: a recomputed
        # layer's norm keeps the checkpointed input, already counted
        "shared_first": _norm_keeps_input(block, model, grad_in) * tokens,
        "shared_other": _norm_keeps_input(block, block.residual, True) * tokens,
        # rotary cos and sin, (1, s, head_dim) each, kept by every layer once, in the
        # embedding output's dtype (`cos.to(x.dtype)`, computed with autocast off)
        "rotary": 2 * length * (dims.q_width // max(1, dims.heads)) * model * dims.rotary,
        # TRL's input-gradient hook makes the embedding's output a leaf that needs a gradient:
        # autograd holds it through backward (prompt tuning joins the virtual tokens to it and
        # Granite scales it, so it is not the first layer's input). Its gradient comes only
        # when the first layer's backward has ended, its recomputed tensors freed: never at a
        # layer's peak (the one- and two-layer rows of benchmarks/memory_truth.py)
        "embedded": real
        if hooked and (configuration.tuning.method == "pt" or dims.transformed_embedding)
        else 0.0,
    }


def _layer_backward(
    block: activations.Block,
    configuration: TrainingConfiguration,
    length: int,
    tokens: int,
    held: float,
) -> float:
    """What a layer's backward adds at its largest (bytes; `held`: per token, the recomputed
    output reentrant checkpointing holds): down_proj's backward, the MLP's once down_proj's
    weight copy is freed, or eager attention's softmax backward."""
    down = (activations.down_backward(block) + held) * tokens
    # the MLP's (what it frees may outweigh what it adds: none, then)
    mlp = (max(activations.mlp_backward(block), 0.0) + held) * tokens
    backward = max(down, mlp - activations.down_copy(block))
    softmax = activations.attention_backward(block, length) * tokens
    if softmax:
        # eager attention's softmax backward, o_proj's and the MLP's weight copies freed and,
        # under full fine-tuning, their gradients (but down_proj's: the moments count it) made
        softmax -= activations.copies_after_attention(block)
        if configuration.tuning.method == "none":
            grads = activations.gradients_before_attention(block)
            softmax += fsdp.layer_weight_bytes(configuration) * grads
        # reentrant: the gradient at the layer's output stays an argument of the checkpoint's
        # backward while the recomputed layer's own runs, beside the residual's gradient the
        # attention's backward reads (a sum made in the MLP's backward)
        backward = max(backward, softmax + 2 * held * tokens)
    return backward


def _norm_keeps_input(block: activations.Block, input_width: int, grad_in: bool) -> float:
    """Bytes per token of a layer's input its first RMSNorm keeps as its fp32 copy
    (`hidden_states.to(torch.float32)` of an fp32 tensor returns it): the input's width, when
    the input is fp32 and the norm keeps anything."""
    fused = block.kernels.fast_kernels.fast_rms_layernorm
    keeps = input_width == activations.FP32 and block.family == "llama" and not fused
    return (
        activations.FP32 * block.hidden if keeps and activations.norm_saved(block, grad_in) else 0.0
    )


def _copies(
    dims: Dimensions, block: activations.Block, checkpointed: bool, grad_in: bool
) -> dict[str, float]:
    """Autocast's 16-bit weight copies (activations.weight_copies), bytes, not per token: the
    first layer's and any other's, what the layers keep through the forward (their saved
    copies; none under checkpointing), what the autocast cache adds inside autocast under
    checkpointing (every trained fp32 weight's copy), and the LM head's (kept for its input's
    gradient, which the final norm's output always needs)."""
    first = activations.weight_copies(block, grad_in)
    other = activations.weight_copies(block, True)
    kept = first + (dims.layers - 1) * other
    inside = 0.0
    if checkpointed:
        # the checkpointed forward keeps no copy; the cache keeps its own till autocast exits
        kept, inside = 0.0, dims.layers * activations.cached_copies(block)
    head = block.width * dims.vocab * dims.hidden if block.casts != "none" else 0.0
    return {
        "copies_first": first,
        "copies_other": other,
        "copies_kept": kept,
        "copies_inside": inside,
        "copies_head": head,
    }


def head_bytes(
    dims: Dimensions, configuration: TrainingConfiguration, behaviour: ReleaseBehaviour
) -> float:
    """What the final norm, the LM head and the loss's target keep for backward: the norm's
    fp32 input (its output needs a gradient under every method), the LM head's input when it
    trains, the token ids the embedding keeps when it trains, the int64 labels."""
    width = fsdp.layer_weight_bytes(configuration)
    full = configuration.tuning.method == "none"
    if dims.layout == "gpt_bigcode":
        # LayerNorm: its input, a mean and an rstd in the dtype; the embedding dropout's mask;
        # the LM head's input and both embeddings' ids when they train
        per_token = width * dims.hidden + 2 * width + 8
        if dims.residual_dropout and input_grads(configuration, behaviour):
            per_token += activations.MASK * dims.hidden  # kept when the embeddings need a gradient
        per_token += width * dims.hidden + 16 if full else 0
        return per_token * configuration.batch.per_device_batch * configuration.model_length
    compute, stream, _ = widths(configuration)
    per_token = activations.FP32 * dims.hidden + activations.FP32 + 8
    if configuration.kernels.fast_kernels.fast_rms_layernorm:
        per_token = stream * dims.hidden + activations.FP32 + 8
    if full:
        # the norm's output in the stream's dtype, the LM head's input as autocast casts it
        per_token += (stream + compute) * dims.hidden + 8
    return per_token * configuration.batch.per_device_batch * configuration.model_length


def logits_bytes(
    dims: Dimensions, configuration: TrainingConfiguration, behaviour: ReleaseBehaviour
) -> dict[str, float]:
    """The logits and the loss at their largest, forward and backward, and of the backward's
    the part kept from the forward (the log-softmax): [tokens, vocab] times the release's
    bytes (plan/memory/logits.py)."""
    if behaviour.loss is None:
        return dict.fromkeys(("inside", "returned", "backward", "kept"), 0.0)
    elements = configuration.batch.per_device_batch * configuration.model_length * dims.vocab
    width = widths(configuration)[0]  # the LM head's output: 16 bits under autocast
    code, fused, autocast = (
        behaviour.loss,
        behaviour.fused_loss,
        configuration.precision.mixed_precision,
    )
    return {
        "inside": elements * code.inside_bytes(width, fused, autocast),
        "returned": elements * code.returned_bytes(width, fused, autocast, behaviour.logits_copy),
        "backward": elements * code.backward_bytes(width, fused),
        "kept": elements * code.kept_bytes(width, fused, autocast),
    }


def model_states(
    counts: ParameterCounts,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    behaviour: ReleaseBehaviour,
    buffers: int = 0,
) -> tuple[dict[str, float], list[str]]:
    """Weights, gradients, optimizer state and foreach AdamW's temporary on one device: the
    bound's, with PEFT's fp32 adapters, and accelerate's fp32 upcast of FSDP's trainable flat
    parameters under mixed precision."""
    weights, gradients = bound.parts["weights"], bound.parts["gradients"]
    optimizer = optimizer_state(configuration.precision.optim)
    # the state at the optimizer's own dtype (bitsandbytes' 8- and 32-bit) follows no
    # parameter's dtype: only the rest (zeros_like(param)) is scaled with the parameters below
    fixed = _fixed_state(counts, configuration, bound, optimizer)
    state = bound.parts["optimizer_state"] - fixed
    notes = []
    width = DTYPE_BYTES[configuration.precision.torch_dtype]
    if configuration.tuning.method != "none" and width < ADAPTER_BYTES:
        # the bound counts the adapters in the model's dtype (its smaller reading)
        scale = ADAPTER_BYTES / width
        weights += (scale - 1) * gradients
        gradients, state = gradients * scale, state * scale
    if upcast_by_fsdp(configuration, behaviour):
        # accelerate upcasts FSDP's flat parameters to fp32 under mixed precision when they
        # train: gradients and AdamW's state (zeros_like) become fp32 too. Under PEFT the
        # adapters are units of their own (peft's fsdp_auto_wrap_policy), already fp32. FSDP
        # runs wherever accelerate launches more than one rank, sharded or not (NO_SHARD,
        # HYBRID_SHARD with a GPU a node); one GPU's trainer runs alone (plan/launch/launch_plan.py).
        if configuration.tuning.method == "none":
            scale = ADAPTER_BYTES / width
            weights, gradients, state = weights * scale, gradients * scale, state * scale
        notes.append("FSDP under mixed precision: trainable parameters upcast to fp32")
    # foreach AdamW's `_foreach_sqrt(exp_avg_sq)`: one state tensor per parameter of a group,
    # the decay group (every trainable parameter but norms and biases) the largest
    norms = counts.norms / max(1, counts.total) if configuration.tuning.method == "none" else 0.0
    temporaries = state * optimizer.temporary_share() * (1 - norms)
    parts = {
        "weights": weights + buffers,
        "gradients": gradients,
        "optimizer_state": state + fixed,
        "optimizer_temporaries": temporaries,
    }
    return parts, notes


def upcast_by_fsdp(configuration: TrainingConfiguration, behaviour: ReleaseBehaviour) -> bool:
    """accelerate upcasts FSDP's trained flat parameters to fp32 (`model_states`): under mixed
    precision, where FSDP runs (more than one device), over weights that are not quantized."""
    return (
        behaviour.fsdp_upcast
        and configuration.parallelism.gpus > 1
        and not weight_bits(configuration)
    )


def _fixed_state(
    counts: ParameterCounts,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    optimizer: OptimizerState,
) -> float:
    """The bound's optimizer state at the optimizer's own dtype, on one device (none where the
    bound counts none: paged or unstated)."""
    if not bound.parts["optimizer_state"]:
        return 0.0
    return optimizer.fixed_bytes * trainable_parameters(counts, configuration) / bound.shards


def paged_state(
    counts: ParameterCounts, configuration: TrainingConfiguration, bound: MemoryBound
) -> float:
    """Bytes per device of a paged optimizer's state: unified memory outside torch's allocator,
    which the driver moves to the host when the device runs short (0: not paged)."""
    optimizer = optimizer_state(configuration.precision.optim)
    if not optimizer.paged:
        return 0.0
    trainable = trainable_parameters(counts, configuration)
    return optimizer.state_bytes(trainable, DTYPE_BYTES[configuration.precision.torch_dtype]) / (
        bound.shards
    )


def head_gradients(
    counts: ParameterCounts, configuration: TrainingConfiguration, bound: MemoryBound
) -> float:
    """Gradients allocated before the first layer's backward: the LM head's (the embedding's,
    when tied) and the final norm's, under full fine-tuning."""
    if configuration.tuning.method != "none":
        return 0.0
    head = (counts.lm_head or counts.embedding) + counts.hidden_size
    return bound.parts["gradients"] * head / max(1, counts.total)


def _final_norm_moment(
    counts: ParameterCounts,
    dims: Dimensions,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    behaviour: ReleaseBehaviour,
    layer: dict[str, float],
    base: dict[str, float],
) -> dict[str, dict[str, float]]:
    """The final RMSNorm's backward, before any layer's: everything the layers keep, the
    norm's fp32 input, and its backward's five fp32 hidden-wide tensors at once (the cast's
    gradient, the products with rsqrt and with the input, pow's gradient and their sum; traced,
    benchmarks/memory_truth.py's small rows). Above the first layer's backward when that
    layer's MLP is narrow or LoRA leaves its MLP alone. LayerNorm (GPTBigCode) and the fused
    kernel run other backwards: not counted."""
    if dims.layout == "gpt_bigcode" or configuration.kernels.fast_kernels.fast_rms_layernorm:
        return {}
    tokens = configuration.batch.per_device_batch * configuration.model_length
    kept = (
        _kept(dims, checkpointed(configuration, behaviour), layer)
        + activations.FP32 * dims.hidden * tokens
    )
    return {
        "final norm": {
            **base,
            # the LM head's, unless accumulation's are all there already
            "gradients": base["gradients"] or head_gradients(counts, configuration, bound),
            "activations": kept,
            "autocast_copies": layer["copies_kept"],
            "backward_transients": 5 * activations.FP32 * dims.hidden * tokens,
        }
    }


def predict_peak(
    counts: ParameterCounts,
    dims: Dimensions,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    behaviour: ReleaseBehaviour,
    adapted: tuple[str, ...] = (),
    layer: dict[str, float] | None = None,
) -> PeakPrediction:
    """The peak of `configuration` on one device, as the releases run it (`behaviour`);
    `bound` gives the model states as the certain-OOM bound counts them (the same sharding),
    without its CUDA context, which torch's peak does not include. `layer`: what layer_bytes
    gives, where the layers differ (a hybrid's, plan/memory/hybrid.py)."""
    states, upcast_notes = model_states(counts, configuration, bound, behaviour, dims.buffers)
    notes = _notes(bound, configuration, behaviour, upcast_notes)
    base = _at_rest(counts, dims, configuration, bound, states)
    layer = layer or layer_bytes(dims, configuration, behaviour, adapted)
    kept = _kept(dims, checkpointed(configuration, behaviour), layer)
    kept += head_bytes(dims, configuration, behaviour)
    logits = logits_bytes(dims, configuration, behaviour)
    forwards = _forward_moments(dims, configuration, behaviour, layer, base, kept, logits)
    largest = max(forwards, key=lambda name: sum(forwards[name].values()))
    forward = forwards[largest]
    moments = {
        "loss": {
            **base,
            "activations": kept,
            "autocast_copies": layer["copies_kept"] + layer["copies_head"],
            "logits": logits["kept"],
            "logits_gradients": logits["backward"] - logits["kept"],
        },
        **_layer_moments(counts, dims, configuration, bound, behaviour, layer, base, states),
        **_final_norm_moment(counts, dims, configuration, bound, behaviour, layer, base),
    }
    _drop_empty_copies(forwards, moments)
    _with_the_tower(forwards, moments, _tower_kept(dims, configuration, behaviour))
    moment = max(moments, key=lambda name: sum(moments[name].values()))
    step = {k: states[k] for k in ("weights", "gradients", "optimizer_state")}
    # the step's last backward has reduced whole gradients to their shards by the update
    step["gradients"] *= bound.gradient_shards / bound.shards
    step["optimizer_temporaries"] = states["optimizer_temporaries"]
    stepped = optimizer_state(configuration.precision.optim).step
    return PeakPrediction(
        phases={"forward": forward, "backward": moments[moment], "optimizer_step": step},
        moments={"forward": largest, "backward": moment, "optimizer_step": stepped},
        candidates={
            "forward": {name: sum(parts.values()) for name, parts in forwards.items()},
            "backward": {name: sum(parts.values()) for name, parts in moments.items()},
        },
        notes=tuple(notes),
        paged=paged_state(counts, configuration, bound),
    )


def _tower_kept(
    dims: Dimensions, configuration: TrainingConfiguration, behaviour: ReleaseBehaviour
) -> float:
    """What a vision-language model's tower and projector keep (plan/memory/vision.py)."""
    return vision.tower_kept(
        configuration,
        block_of(dims, configuration, behaviour),
        checkpointed=checkpointed(configuration, behaviour),
    )


def _with_the_tower(
    forwards: dict[str, dict[str, float]], moments: dict[str, dict[str, float]], kept: float
) -> None:
    """The tower runs first and its backward last: what it keeps is alive at every moment of
    the language model's forward and backward."""
    if not kept:
        return
    for parts in (*forwards.values(), *moments.values()):
        parts["vision_tower"] = kept


def _at_rest(
    counts: ParameterCounts,
    dims: Dimensions,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    states: dict[str, float],
) -> dict[str, float]:
    """What every forward and backward moment holds beside its activations: the weights, the
    optimizer state (from the second step on), gradients accumulated over micro-batches, and
    FSDP's gathered units."""
    accumulating = (
        states["gradients"] if configuration.batch.gradient_accumulation_steps > 1 else 0.0
    )
    return {
        "weights": states["weights"],
        "optimizer_state": states["optimizer_state"],
        "gradients": accumulating,
        "fsdp_gathered": fsdp.gathered_bytes(
            counts.total,
            counts.embedding + counts.lm_head,
            dims.layers,
            dims.hidden,
            configuration,
            bound,
        ),
    }


def _notes(
    bound: MemoryBound,
    configuration: TrainingConfiguration,
    behaviour: ReleaseBehaviour,
    upcast_notes: list[str],
) -> list[str]:
    """What the prediction could not count, or counted otherwise than the entity asked."""
    notes = [*bound.notes, *upcast_notes]
    if behaviour.loss is None and behaviour.fused_loss != "chunked":
        notes.append("logits not counted: the transformers release's loss is not on record")
    if configuration.kernels.gradient_checkpointing and not behaviour.checkpointing_honoured:
        notes.append(
            "gradient checkpointing asked for, but this transformers release's layers of the "
            "family ignore it (plan/memory/logits.read_checkpointing): predicted without it"
        )
    return notes


def _drop_empty_copies(*groups: dict[str, dict[str, float]]) -> None:
    """Autocast's copies are a part only where autocast makes any (every forward and backward
    moment names them)."""
    for group in groups:
        for parts in group.values():
            if not parts["autocast_copies"]:
                del parts["autocast_copies"]


def _forward_moments(
    dims: Dimensions,
    configuration: TrainingConfiguration,
    behaviour: ReleaseBehaviour,
    layer: dict[str, float],
    base: dict[str, float],
    kept: float,
    logits: dict[str, float],
) -> dict[str, dict[str, float]]:
    """The forward's moments: the loss inside the model, the logits after it returned, and
    the last layer's forward at its largest."""
    # held through the loss: the final norm's output by the model's output (kept anyway as the
    # LM head's input when that trains); under prompt tuning, the joined input embeddings by
    # PEFT's forward (unless they are fp32 and the first layer's norm keeps them as its fp32
    # copy, counted with what that layer keeps)
    held = 0.0 if configuration.tuning.method == "none" else layer["input"]
    if configuration.tuning.method == "pt":
        shared = 0.0 if checkpointed(configuration, behaviour) else layer["shared_first"]
        held += layer["input"] - shared
    # the model's own eager mask, kept by no layer without checkpointing: inside its forward
    mask = 0.0 if checkpointed(configuration, behaviour) else layer["mask"]
    copies = layer["copies_kept"] + layer["copies_head"]
    return {
        "loss": {
            **base,
            "activations": kept + held + mask,
            "autocast_copies": copies + layer["copies_inside"],
            "logits": logits["inside"],
        },
        # after the model returned (the final norm's output freed, the autocast cache cleared)
        "returned logits": {
            **base,
            "activations": kept,
            "autocast_copies": copies,
            "logits": logits["returned"],
        },
        "last layer": {
            **base,
            "activations": _kept(dims, checkpointed(configuration, behaviour), layer) + mask,
            "autocast_copies": layer["copies_kept"] + layer["copies_inside"],
            "forward_transients": layer["forward"],
        },
    }


def _kept(dims: Dimensions, checkpointed: bool, layer: dict[str, float]) -> float:
    """What the layers keep through the forward: every layer's input under checkpointing,
    everything each layer saves without."""
    if checkpointed:
        inputs = dims.layers * layer["input"] + layer["mask"]
        return inputs + layer["rotary"] + layer["embedded"]
    return layer["first"] + (dims.layers - 1) * layer["other"] + layer["rotary"] + layer["embedded"]


def _gradients_in_layers(
    counts: ParameterCounts,
    dims: Dimensions,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    base: dict[str, float],
    states: dict[str, float],
) -> tuple[float, float]:
    """The gradients alive at the first layer's MLP backward beyond `base`'s (the LM head's
    and, under full fine-tuning, that layer's down_proj's), and at the last layer's (all but
    that layer's other weights' and, when untied, the embedding's)."""
    full = configuration.tuning.method == "none"
    grown = head_gradients(counts, configuration, bound) * (not base["gradients"])
    # down_proj's weight gradient, allocated before the product's gradients: whole under FSDP
    # (a unit's gradients exist unsharded until its reduce-scatter; already whole under no_sync)
    unsharded = bound.gradient_shards if configuration.parallelism.backend == "FSDP" else 1
    down = states["gradients"] * dims.hidden * dims.intermediate / max(1, counts.total) * unsharded
    if full and not base["gradients"]:
        grown += down
    every = states["gradients"]
    if full:
        root = counts.embedding + counts.lm_head + dims.hidden
        layer_params = (counts.total - root) / max(1, dims.layers)
        later = layer_params - dims.hidden * dims.intermediate * dims.experts_per_token
        later += counts.embedding if counts.lm_head else 0
        every -= states["gradients"] * later / max(1, counts.total)
        every += down * (1 - 1 / unsharded)
    return grown, every


def _gradients_at_mixer(
    counts: ParameterCounts,
    configuration: TrainingConfiguration,
    base: dict[str, float],
    states: dict[str, float],
    pending: float,
) -> float:
    """The gradients alive at the model's first layer's mixer backward (a hybrid's Mamba layer,
    plan/memory/hybrid.py): under full fine-tuning all but `pending` parameters' (what that
    backward has not reached yet) and, when untied, the embedding's; its MLP's are all made."""
    every = states["gradients"]
    if configuration.tuning.method == "none":
        later = pending + (counts.embedding if counts.lm_head else 0)
        every -= states["gradients"] * later / max(1, counts.total)
    return max(base["gradients"], every)


def _kept_in_layers(
    dims: Dimensions,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    behaviour: ReleaseBehaviour,
    layer: dict[str, float],
) -> tuple[dict[str, float], dict[str, float]]:
    """What is kept at the backward of the first layer it reaches and of the last: under
    checkpointing every layer's input and the recomputed layer's tensors (FSDP's held input
    gradients at the last), without it what every layer (the last: the model's first) keeps."""
    top, bottom = ("first", "first") if dims.layers == 1 else ("other", "first")
    if not checkpointed(configuration, behaviour):
        top_kept = {
            "activations": _kept(dims, False, layer),
            "autocast_copies": layer["copies_kept"],
        }
        bottom_kept = {
            "activations": layer[bottom] + layer["rotary"],
            "autocast_copies": layer["copies_first"],
        }
        return top_kept, bottom_kept
    inputs = dims.layers * layer["input"]
    tokens = configuration.batch.per_device_batch * configuration.model_length
    held = fsdp.held_input_gradient_bytes(
        dims.layers, dims.hidden, tokens, configuration, bound, behaviour
    )
    extra = layer["rotary"] + layer["embedded"] + layer["mask"]
    # the recomputed layer's copies: the cache is cleared when its recompute's autocast exits,
    # what its matmuls keep stays
    top_kept = {
        "activations": inputs + extra,
        "recompute": layer[top] - layer[f"shared_{top}"],
        "autocast_copies": layer[f"copies_{top}"],
    }
    bottom_kept = {
        "activations": (dims.layers if held else 1) * layer["input"] + extra,
        "recompute": layer[bottom] - layer[f"shared_{bottom}"],
        "autocast_copies": layer[f"copies_{bottom}"],
    }
    if held:
        bottom_kept["fsdp_held_input_gradients"] = held
    return top_kept, bottom_kept


def _layer_moments(
    counts: ParameterCounts,
    dims: Dimensions,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    behaviour: ReleaseBehaviour,
    layer: dict[str, float],
    base: dict[str, float],
    states: dict[str, float],
) -> dict[str, dict[str, float]]:
    """The backward's moments in the layers: the first layer it reaches (the model's last)
    and the last it reaches (the model's first), each at its MLP's backward."""
    grown, every = _gradients_in_layers(counts, dims, configuration, bound, base, states)
    top_kept, bottom_kept = _kept_in_layers(dims, configuration, bound, behaviour, layer)
    transient = {"backward_transients": layer["backward"]}
    moments = {
        "first layer": {
            **base,
            "gradients": base["gradients"] + grown,
            **top_kept,
            **transient,
        },
        "last layer": {
            **base,
            "gradients": max(base["gradients"], every),
            **bottom_kept,
            **transient,
        },
    }
    if "mixer_backward" in layer:
        # a hybrid whose first layer is a Mamba layer: its mixer's backward comes after its
        # MLP's, every gradient of that layer but the mixer's `mixer_pending` made by then
        moments["last layer, mixer"] = {
            **base,
            "gradients": _gradients_at_mixer(
                counts, configuration, base, states, layer["mixer_pending"]
            ),
            **bottom_kept,
            "backward_transients": layer["mixer_backward"],
        }
    if checkpointed(configuration, behaviour):
        # recomputing the first layer it reaches, its output's gradient already there
        moments["first layer, recomputed"] = {
            **base,
            **top_kept,
            "forward_transients": layer["recomputed"] + layer["input"],
        }
    return moments
