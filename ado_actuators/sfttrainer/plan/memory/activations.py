"""What one decoder layer keeps for backward, and what its backward adds, per token: counted by
hand from the tensors autograd saves in the blocks the hand-written counter knows (Llama-like:
Llama, Mistral, Granite, Qwen2/3; their MoE kin: Mixtral, GraniteMoE; GPTBigCode). Pure.

Every term is a tensor of transformers 4.55's code (and PEFT 0.19's LoRA, flash-attn 2's
FlashAttnFunc, torch's autograd formulas) and is checked against a trace of that code
(`benchmarks/memory_truth.py`, plan/memory/trace/step.py): no term is scaled to fit a measurement.
Widths: `w` bytes a model-dtype element, fp32 4, a dropout mask 1.
"""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.plan.model.training import Kernels, Tuning

FP32 = 4
MASK = 1
"""CUDA's dropout (native_dropout) keeps a one-byte mask per element for backward."""

ATTENTION_INPUTS = {"o_proj": "q", "down_proj": "intermediate", "w2": "intermediate"}
"""The linears that read something other than the hidden state (q: the attention's output)."""


@dataclasses.dataclass(frozen=True)
class Block:
    """A decoder layer's shapes (from Dimensions) and the widths its tensors take; what trains
    and which kernels run are the configuration's own parts, held whole, so that a layer and
    the entity it was built from cannot disagree on them."""

    hidden: int
    q_width: int
    kv_width: int
    heads: int
    intermediate: int
    width: int  # bytes of the model's dtype
    tuning: Tuning
    kernels: Kernels
    adapted: tuple[str, ...] = ()
    lora_dropout: bool = True
    experts_per_token: int = 1
    qk_norm: bool = False  # Qwen3's q_norm and k_norm: an RMSNorm over each head of q and k
    autocast: bool = False  # 16-bit mixed precision (accelerate's autocast)
    moe: str | None = None  # "mixtral" | "granitemoe": how the experts are dispatched
    experts: int = 1
    shared_intermediate: int = 0  # GraniteMoeShared's always-on expert
    family: str = "llama"  # llama (the Llama-like blocks) | gpt_bigcode | vision
    activation_kept: int = 1
    """Tensors of the intermediate width the LayerNorm families' MLP activation keeps: GELU its
    input; CLIP's quick_gelu (`x * sigmoid(1.702 x)`) its input and the sigmoid's output."""
    residual_dropout: bool = False  # GPTBigCode's resid_pdrop > 0
    stream: int = 0
    """Bytes of the residual stream where autocast computes in 16 bits over other weights
    (fp32, or a 16-bit dtype autocast does not run in: the sum of two 16-bit dtypes promotes to
    fp32); 0: `width`. `width` is then autocast's 16 bits, the width of every linear's output."""
    dtype_width: int = 0
    """Bytes of the model's dtype (eager attention's additive mask is built in it); 0: the
    residual stream's."""
    casts: str = "none"
    """What keeps autocast's 16-bit copies of the weights (`weight_copies`): "none" (autocast
    runs in the weights' own dtype, or is off), "saved" (each linear's copy is kept by its
    matmul when the linear's input needs a gradient), "cached" (fp32 weights that train: the
    autocast cache keeps every copy until autocast exits)."""

    @property
    def trains_weights(self) -> bool:
        return self.tuning.method == "none"

    @property
    def residual(self) -> int:
        """Bytes of an element of the residual stream (the layers' inputs and outputs)."""
        return self.stream or self.width

    @property
    def mask_width(self) -> int:
        return self.dtype_width or self.residual

    @property
    def recast(self) -> bool:
        """Whether each linear casts its input to autocast's 16 bits itself: the norm's output
        is in the residual stream's wider dtype, so q, k and v (gate and up) each keep a copy
        of their own where they would share one."""
        return self.residual != self.width


@dataclasses.dataclass(frozen=True)
class Needs:
    """Which of a layer's tensors need a gradient. Autograd records an operation, and keeps
    what its backward reads, only when one of its inputs needs a gradient: every layer but the
    first gets its input's, so everything in it does; in LoRA's first layer (the embedding
    frozen) only what an adapter's output reaches does."""

    hidden: bool  # the layer's input and the first norm's output
    qkv: tuple[bool, bool, bool]  # the projections' outputs (GPTBigCode: c_attn's, all three)
    attention: bool  # the attention's output, o_proj's input (GPTBigCode: c_proj's)
    mlp: bool  # the residual after the attention and the second norm's output
    gate: bool  # gate_proj's output (GPTBigCode: c_fc's)
    up: bool  # up_proj's output (GPTBigCode: c_fc's)
    product: bool  # down_proj's input (GPTBigCode: GELU's output, the MLP c_proj's)


LAYER_LINEARS = {
    # the linears whose output is each of Needs' tensors: q, k, v, the attention's output
    # projection, then the MLP's gate and up
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"),
    "gpt_bigcode": ("c_attn", "c_attn", "c_attn", "c_proj", "c_fc", "c_fc"),
    # a vision tower's encoder layer (CLIP's, SigLIP's): LayerNorms, MHA, a GELU MLP
    "vision": ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc1"),
}
LAYER_NORM_FAMILIES = ("gpt_bigcode", "vision")
"""Layers of LayerNorms and a GELU MLP (bigcode_saved counts them)."""


def needs(block: Block, grad_in: bool) -> Needs:
    """What needs a gradient in a layer whose input needs one or not (`grad_in`): what the
    input reaches, and what an adapter's output (its lora_B trains) reaches. A trained
    weight's output always needs one. Mixtral's experts (w1, w2, w3) are counted as needing
    theirs (moe_saved keeps the whole MLP)."""
    every = grad_in or block.trains_weights
    adapted = set(block.adapted)  # LoRA's alone
    q, k, v, out, gate, up = (name in adapted for name in LAYER_LINEARS[block.family])
    qkv = (every or q, every or k, every or v)
    attention = any(qkv)
    mlp = attention or out
    return Needs(every, qkv, attention, mlp, mlp or gate, mlp or up, mlp or gate or up)


def norm_saved(block: Block, grad_in: bool) -> float:
    """LlamaRMSNorm: pow and rsqrt keep the fp32 copy of the input and the per-token rsqrt;
    `weight * x.to(dtype)` keeps x in the dtype when the weight trains. Nothing when neither
    the input nor the weight needs a gradient (LoRA's first layer). A fused kernel (unsloth's
    fast_rms_layernorm) keeps the input and the per-token inverse."""
    if not (grad_in or block.trains_weights):
        return 0.0
    if block.kernels.fast_kernels.fast_rms_layernorm:
        return block.residual * block.hidden + FP32
    # `hidden_states.to(input_dtype)`: the residual stream's dtype (fp32 under autocast over
    # fp32 weights, where the cast is the fp32 tensor itself)
    kept = block.residual * block.hidden if block.trains_weights else 0
    return FP32 * block.hidden + FP32 + kept


def attention_saved(block: Block, grads: tuple[bool, bool, bool], length: int) -> float:
    """What attention keeps, per token, by implementation (q, k, v already rotated):

    - flash-attn 2 (transformers hands it views): q, k, v, its output, softmax_lse (fp32 per
      head) and a 16-byte rng_state per call;
    - sdpa (flash or memory-efficient kernel): contiguous copies of q, k, v (transformers
      calls .contiguous() on the rotated, transposed views), the output and the lse;
    - eager: the GQA-expanded key and value (repeat_kv copies), the query, the fp32 softmax and
      its dtype copy ([heads, s] per token), each kept by a matmul when the other factor needs a
      gradient (`grads`: whether q, k, v need one);
    - none of them when neither q, k nor v needs a gradient.
    """
    w, q, kv = block.width, block.q_width, block.kv_width
    if not any(grads):  # LoRA's first layer with no adapter before it: nothing recorded
        return 0.0
    if block.kernels.attention == "eager":
        grad_q, grad_k, grad_v = grads
        scores = block.heads * length
        # the softmax keeps its fp32 output when the scores need a gradient (q's or k's)
        fp32_softmax = FP32 if w != FP32 and (grad_q or grad_k) else 0
        return (
            (w * q if grad_k else 0)  # q, for k's gradient
            + (w * q if grad_q else 0)  # expanded k, for q's gradient
            + (w * q if grad_q or grad_k else 0)  # expanded v, for the scores' gradient
            + scores * ((w if grad_v else 0) + fp32_softmax)
        )
    lse = FP32 * block.heads
    return w * (2 * q + 2 * kv) + lse


def qk_norm_saved(block: Block, grads: tuple[bool, bool, bool]) -> float:
    """Qwen3's per-head RMSNorm of q and of k, as `norm_saved` per head: the fp32 copy, an fp32
    rsqrt per head, and the dtype copy when the weights train."""
    if not block.qk_norm:
        return 0.0
    head_dim = block.q_width // max(1, block.heads)
    total = 0.0
    for width, grad in ((block.q_width, grads[0]), (block.kv_width, grads[1])):
        if grad or block.trains_weights:
            total += FP32 * width + FP32 * (width // head_dim)
            total += block.width * width if block.trains_weights else 0
    return total


def linear_inputs_saved(block: Block) -> float:
    """Inputs a trained linear keeps for its weight's gradient (full fine-tuning): q/k/v share
    the norm's output, gate/up the next norm's, down_proj its product; o_proj reads the
    attention's output, which flash-attn already keeps, and a contiguous copy of it otherwise."""
    return sum(linear_inputs(block))


def linear_inputs(block: Block) -> tuple[float, float]:
    """`linear_inputs_saved` in two: q/k/v's inputs, and those of the linears after the
    attention (o_proj's and the MLP's), whose backward has run, and freed them, by the time
    the attention's runs."""
    if not block.trains_weights:
        return 0.0, 0.0
    w, h = block.width, block.hidden
    o_proj = 0 if block.kernels.attention == "flash_attention_2" else w * block.q_width
    # autocast's cast of a wider norm output is each linear's own (F.linear casts its input)
    qkv, gate_up = (3, 2) if block.recast else (1, 1)
    mlp = 0 if block.moe else w * (gate_up * h + block.intermediate)  # moe_saved: the experts'
    return qkv * w * h, o_proj + mlp


def mlp_saved(block: Block, gate: bool = True, up: bool = True) -> float:
    """A gated MLP: SiLU keeps its input (gate's output) when gate's output needs a gradient;
    the product keeps up's output for SiLU's gradient and SiLU's output for up's (`gate`, `up`:
    whether gate's and up's outputs need one). Each token's k experts do the same on their
    share (`moe_saved`, counted whole)."""
    if block.moe:
        return moe_saved(block)
    return block.width * block.intermediate * (2 * gate + up)


def moe_saved(block: Block) -> float:
    """A mixture of experts per token: for each of its k experts, the gated MLP's three
    tensors, the expert's output and its product with the routing weight (the weight's
    multiplication keeps one, the scatter back the other), the weight itself; and the router's:

    - Mixtral (a loop over experts): the softmax over all experts (fp32), the top-k indices,
      their sum and a copy of the top-k weights (fp32), each expert's token indices (int64);
    - GraniteMoE (ParallelExperts, fused): the top-k indices, their fp32 softmax, and two
      int64 orderings of the routed rows.

    Under full fine-tuning each expert's linears keep their inputs too (the gathered hidden
    state and the product), and the router its input. GraniteMoeShared's shared expert is one
    gated MLP more."""
    w, h, i, k = block.width, block.hidden, block.intermediate, block.experts_per_token
    per_route = 3 * w * i + 2 * w * h + w
    if block.moe == "mixtral":
        router = FP32 * block.experts + 8 * k + FP32 + FP32 * k + 8 * k
    else:
        router = 8 * k + FP32 * k + 16 * k
    trained = k * w * (h + i) + w * h if block.trains_weights else 0
    shared = 3 * w * block.shared_intermediate
    if shared and block.trains_weights:
        shared += w * block.shared_intermediate  # its output linear's input
    return k * per_route + router + trained + shared


def adapter_input_width(block: Block, name: str) -> int:
    which = ATTENTION_INPUTS.get(name)
    if which == "q":
        return block.q_width
    if which == "intermediate":
        return block.intermediate
    return block.hidden


def adapter_input_needs(found: Needs) -> dict[str, bool]:
    """Whether each adapted linear's input needs a gradient (its dropout then keeps a mask)."""
    hidden, mlp = found.hidden, found.mlp
    return {
        **dict.fromkeys(("q_proj", "k_proj", "v_proj"), hidden),
        "o_proj": found.attention,
        **dict.fromkeys(("gate_proj", "up_proj", "w1", "w3"), mlp),
        **dict.fromkeys(("down_proj", "w2"), found.product),
    }


def adapters_saved(block: Block, grad_in: dict[str, bool]) -> float:
    """PEFT LoRA (fp32 adapters): the input cast to fp32 goes through dropout, whose output
    lora_A keeps (fp32) and whose mask dropout keeps when the input needs a gradient; lora_B
    keeps lora_A's fp32 output (r per token). Under 16-bit autocast lora_A and lora_B run in 16
    bits: they keep autocast's 16-bit copies instead."""
    if block.tuning.method != "lora":
        return 0.0
    kept = 2 if block.autocast else FP32
    # an fp32 input's cast to fp32 is the input itself, and without dropout lora_A reads it:
    # the adapters of linears that read the same tensor (q, k, v; gate, up) keep it once
    shared = block.width == FP32 and not block.autocast and not block.lora_dropout
    seen: set[str] = set()
    total = 0.0
    for name in block.adapted:
        width = adapter_input_width(block, name)
        mask = MASK * width if (block.lora_dropout and grad_in.get(name, True)) else 0
        copies = block.experts_per_token if name.startswith("w") else 1
        source = SHARED_INPUTS.get(name, name)
        repeated = shared and source in seen
        seen.add(source)
        total += copies * (kept * width * (not repeated) + mask + kept * block.tuning.lora_r)
    return total


SHARED_INPUTS = {
    **dict.fromkeys(("q_proj", "k_proj", "v_proj"), "first norm"),
    **dict.fromkeys(("gate_proj", "up_proj"), "second norm"),
}
"""The linears that read one tensor (each other linear reads its own)."""


def layer_saved(block: Block, length: int, first: bool = False, input_grads: bool = True) -> float:
    """Bytes one layer keeps for backward per token. `first`: the first layer, whose input
    (the embedding's output) needs no gradient unless `input_grads` (full fine-tuning, prompt
    tuning, or the input-gradient hook reentrant checkpointing installs under PEFT): then
    it keeps only what its adapters' outputs reach (`needs`)."""
    found = needs(block, input_grads or not first)
    if block.family in LAYER_NORM_FAMILIES:
        return bigcode_saved(block, found)
    return (
        norm_saved(block, found.hidden)
        + norm_saved(block, found.mlp)
        + attention_saved(block, found.qkv, length)
        + qk_norm_saved(block, found.qkv)
        + linear_inputs_saved(block)
        + mlp_saved(block, found.gate, found.up)
        + adapters_saved(block, adapter_input_needs(found))
    )


def softmax_widths(block: Block) -> tuple[int, int, int]:
    """Eager attention's softmax, bytes per score (transformers' eager_attention_forward,
    `softmax(scores + mask, dtype=float32).to(query.dtype)`): the masked scores (the matmul's
    16-bit output plus the mask in the model's dtype: fp32 where the model is), their fp32
    upcast (none when already fp32), and the probabilities' cast back to the query's dtype
    (none when the query is fp32: rotary's fp32 cos and sin promote it under autocast over
    fp32 weights, and the model's own dtype without autocast)."""
    masked = max(block.width, block.mask_width)
    upcast = FP32 if masked != FP32 else 0
    query = max(block.width, block.dtype_width or block.residual)
    return masked, upcast, (query if query != FP32 else 0)


def attention_forward(block: Block, length: int, keeping: bool) -> float:
    """What eager attention's softmax holds per token at its largest, when the cast back runs:
    the masked scores (still named by the code), the fp32 probabilities and their cast (or,
    at the softmax, the upcast in place of the cast), and the residual. `keeping`: counted
    beyond what the layer keeps (the probabilities and their cast, `attention_saved`), less
    what it keeps only after the attention (the second norm's, the MLP's, o_proj's and the
    MLP's inputs when they train), not made yet."""
    if block.kernels.attention != "eager" or block.family != "llama":
        return 0.0
    masked, upcast, copy = softmax_widths(block)
    scores = block.heads * length
    held: float = masked + FP32 + max(upcast, copy)
    later = 0.0
    if keeping:
        held -= attention_saved(block, (True,) * 3, length) / max(1, scores)
        later = mlp_saved(block) + norm_saved(block, True) + linear_inputs(block)[1]
    return scores * max(held, 0) + block.residual * block.hidden - later


def attention_backward(block: Block, length: int) -> float:
    """Eager attention's softmax backward per token: the probabilities' gradient (matmul's,
    the width it read them at), its fp32 upcast and the softmax-backward output (fp32), beside
    the gradient arriving at the layer; by then the MLP's kept tensors are freed."""
    if block.kernels.attention != "eager" or block.family != "llama":
        return 0.0
    # the second matmul read the probabilities at the compute width (autocast's cast, or the
    # query's dtype): their gradient is that wide, and the copy it kept is freed by now. A
    # 16-bit gradient's fp32 upcast, then softmax-backward's fp32 output beside the upcast:
    # max(2 + 4, 4 + 4) less the freed 16-bit copy, 6 = 2 + 4; an fp32 gradient needs no
    # upcast: the gradient and the output, 4 + 4. Either way the gradient's width and 4.
    per_score = block.width + FP32
    # the MLP's tensors, the second norm's, what trained linears after the attention kept
    # (o_proj's and the MLP's inputs): their backward has run; and the expanded value, which
    # only the probabilities' gradient read (the second matmul's backward, just run)
    freed = mlp_saved(block) + norm_saved(block, True) + linear_inputs(block)[1]
    freed += block.width * block.q_width
    arriving = block.residual * block.hidden + block.width * block.q_width
    return block.heads * length * per_score + arriving - freed


def layer_backward(block: Block, length: int = 0) -> float:
    """The larger of the MLP's backward (`mlp_backward`) and eager attention's softmax
    backward (`attention_backward`), per token."""
    return max(mlp_backward(block), attention_backward(block, length))


def mlp_backward(block: Block) -> float:
    """What a layer's backward adds per token at its largest, beyond the tensors it kept: the
    gradient arriving at its output, and, in the MLP's backward (the first it runs), the
    gradient of the product (down_proj's input) with the gradients of both its factors. A
    trained down_proj's kept input is freed by then (autograd frees a node's saved tensors
    once it has run)."""
    if block.family == "gpt_bigcode":
        # GELU's backward: the gradient at c_proj's input beside GELU's input gradient
        products = 2 - (1 if block.trains_weights else 0)
        return block.width * block.hidden + products * block.width * block.intermediate
    products = 3 - (1 if block.trains_weights else 0)
    rows = 1.0
    if block.moe == "mixtral":  # a loop: one expert's share of the routed rows at a time
        rows = block.experts_per_token / block.experts
    elif block.moe:  # ParallelExperts: every expert's rows at once
        rows = block.experts_per_token
    freed = 0.0
    if block.moe == "granitemoe":
        # the k expert outputs and their weighting, kept for the weighting's and the
        # scatter's backward, are freed before the product's gradients exist; so is the shared
        # expert's (computed after the routed ones, its backward runs first)
        freed = 2 * block.width * block.hidden * block.experts_per_token
        freed += 3 * block.width * block.shared_intermediate
    # the gradient arriving at the layer's output is the residual stream's dtype
    arriving = block.residual * block.hidden
    return arriving + rows * products * block.width * block.intermediate - freed


def down_backward(block: Block) -> float:
    """A gated MLP's down_proj backward, per token, beyond what the layer keeps: the gradient
    arriving at the layer's output, its cast to autocast's 16 bits where the stream is wider
    (the matmul's gradient is in its output's dtype), and down_proj's input gradient. Its
    weight copy is still alive (`down_copy`); the factors' gradients not yet made. Other MLPs:
    not counted apart (0)."""
    if block.family != "llama" or block.moe:
        return 0.0
    cast = block.width * block.hidden if block.recast else 0
    return block.residual * block.hidden + cast + block.width * block.intermediate


def down_copy(block: Block) -> float:
    """Bytes of down_proj's autocast copies (its weight's, and its adapter's under LoRA), freed
    once its backward has run, before the MLP's product's (not per token; gated MLPs only)."""
    if block.family != "llama" or block.moe:
        return 0.0
    weight = block.intermediate * block.hidden if block.casts != "none" else 0
    adapter = 0
    if block.autocast and block.tuning.method == "lora" and "down_proj" in block.adapted:
        adapter = block.tuning.lora_r * (block.intermediate + block.hidden)
    return block.width * (weight + adapter)


def layer_forward(block: Block, keeping: bool, length: int = 0) -> float:
    """What a layer's forward holds per token at its largest. `keeping` (without
    checkpointing): beyond everything the layer keeps, counted whole; otherwise (a checkpointed
    layer's forward keeps nothing) all it holds then. The moment is the MLP's:

    - a gated MLP: the residual and the MLP's input, gate's, up's and SiLU's outputs and their
      product;
    - GraniteMoE's ParallelExperts, joining the k experts' input_linear outputs: the gathered
      rows, every expert's output and their join (2 x intermediate wide), before the SiLU, the
      expert outputs and their weighting exist;
    - Mixtral's loop: the output it scatters into, one expert's share at a time.
    """
    return max(
        _mlp_forward(block, keeping),
        adapter_forward(block, keeping),
        attention_forward(block, length, keeping),
    )


def _mlp_forward(block: Block, keeping: bool) -> float:
    w, h, i, k = block.width, block.hidden, block.intermediate, block.experts_per_token
    share = k / block.experts  # Block.moe is set only with two experts or more
    if block.family == "gpt_bigcode":  # c_fc's and GELU's outputs
        return w * h if keeping else 2 * w * h + 2 * w * i
    if block.moe == "granitemoe":
        if keeping:
            return _granitemoe_scatter(block)
        return 2 * w * h + k * w * (h + 4 * i)
    if block.moe == "mixtral":
        return 3 * w * h + share * w * (h + (0 if keeping else 4 * i))
    if keeping:
        return w * h + (0 if block.trains_weights else w * (h + i))
    return 2 * w * h + 4 * w * i


def _granitemoe_scatter(block: Block) -> float:
    """GraniteMoE's MoE forward at its scatter back (`zeros.index_add`), per token, beyond
    what the layer keeps: the residual, the second norm's output, the gathered rows and the
    gated product (locals of the forward, alive to its end), and the zeros the sum starts
    from; the residual stream's dtype but the product's. What trained weights keep of them
    (the experts' inputs, the router's) is counted in `moe_saved`."""
    w, s, h, i = block.width, block.residual, block.hidden, block.intermediate
    k = block.experts_per_token
    alive = 3 * s * h + k * w * i + k * s * h
    if block.trains_weights:
        alive -= k * w * i  # the product is output_linear's kept input itself
        if not block.recast:
            # so are the gathered rows and the norm's output, the experts' and the router's
            # inputs; a wider stream's are cast copies of their own (moe_saved's)
            alive -= k * w * h + w * h
    return alive


ADAPTER_CONTEXT = {
    # what else of the layer is alive, not kept, while an adapter runs (beyond its input):
    # the residual, the norm's output (q/k/v: and the projections before it; down_proj: and
    # the product it reads)
    "q_proj": ("hidden",),
    "k_proj": ("hidden", "q"),
    "v_proj": ("hidden", "q", "kv"),
    "c_attn": ("hidden",),
    "o_proj": ("hidden",),
    "gate_proj": ("hidden",),
    "up_proj": ("hidden",),
    "down_proj": ("hidden", "intermediate"),
}


def adapter_forward(block: Block, keeping: bool = False) -> float:
    """PEFT LoRA's forward holds, at `result + lora_B(lora_A(dropout(x))) * scaling`: the
    base layer's result (dtype), lora_B's output and its scaled copy (fp32, or their sum) and
    the input's fp32 cast (the local `x`), n in and o out wide: 4n + (8 + w) o per token; with
    the layer's residual and its input when that is not kept (GPTBigCode's MLP c_proj reads
    GELU's output). `keeping`: counted beyond everything the layer keeps, less what the layer
    has not kept yet at that point (an attention adapter runs before the MLP's tensors)."""
    if block.tuning.method != "lora":
        return 0.0
    w, h = block.width, block.hidden
    widths = {
        "hidden": h,
        "q": block.q_width,
        "kv": block.kv_width,
        "intermediate": block.intermediate,
    }
    largest = 0.0
    for name, n, o in _adapted_shapes(block):
        context = sum(widths[part] for part in ADAPTER_CONTEXT.get(name, ("hidden",)))
        if n == block.intermediate and block.family == "gpt_bigcode":
            context += n  # GELU's output, the adapter's input, kept by nobody
        held: float = w * (h + context) + FP32 * n + (8 + w) * o
        if keeping:
            held -= _kept_after(block, name, n)
        largest = max(largest, held)
    return largest


def _kept_after(block: Block, name: str, width: int) -> float:
    """What the layer keeps after the adapter `name` (`width` in) has run, its own output
    among it (the cast of the sum, made after the moment counted): the MLP's tensors and the
    second norm's (GPTBigCode's LayerNorm: its input, a mean and an rstd); after q, k, v or
    c_attn also the attention's. Eager attention's scores ([heads, s] per token) are left out:
    the length is not known here, and leaving them out can only over-count the adapter."""
    w, i = block.width, block.intermediate
    mask = MASK * block.hidden if block.residual_dropout else 0.0
    if name == "gate_proj":
        return 3 * w * i  # its own output (a cast of the sum, made after it), SiLU's, up's
    if name == "up_proj":
        return w * i  # its own output
    if name == "c_fc":
        return w * i + mask  # its own output (GELU's input), the MLP's residual mask
    if width == i:  # down_proj, the MLP's c_proj: the MLP's residual mask
        return mask
    if block.family == "llama":
        after = mlp_saved(block) + norm_saved(block, True)
    else:
        after = w * i + w * block.hidden + 2 * w  # GELU's input, the second LayerNorm's
    if name in ("q_proj", "k_proj", "v_proj", "c_attn"):
        after += attention_saved(block, (True,) * 3, 0)  # q, k and v need gradients
    return after


def _adapted_shapes(block: Block) -> list[tuple[str, int, int]]:
    """(name, in, out) of each adapted linear of a layer."""
    h, q, kv, i = block.hidden, block.q_width, block.kv_width, block.intermediate
    shapes = {
        "q_proj": [(h, q)],
        "k_proj": [(h, kv)],
        "v_proj": [(h, kv)],
        "o_proj": [(q, h)],
        "gate_proj": [(h, i)],
        "up_proj": [(h, i)],
        "down_proj": [(i, h)],
        "c_attn": [(h, h + 2 * kv)],
        "c_proj": [(h, h), (i, h)] if block.family == "gpt_bigcode" else [],
        "c_fc": [(h, i)],
    }
    return [(name, n, o) for name in block.adapted for n, o in shapes.get(name, [])]


def experts_backward(block: Block, expert_weights: float) -> float:
    """GraniteMoE's ParallelExperts take each expert's weight as `weight[i]`: the backward of
    that select is a zero-filled tensor of the whole [experts, out, in] weight, accumulated
    into the gradient: under full fine-tuning, three weight-sized tensors at once (the
    select's, the running sum and its next value). `expert_weights`: bytes of input_linear's
    weight on the device."""
    if block.moe != "granitemoe" or not block.trains_weights:
        return 0.0
    return 3 * expert_weights


def experts_moment(block: Block, expert_weights: float, tokens: int) -> float:
    """GraniteMoE's experts' weight gradients (`experts_backward`, the last of the MoE's
    backward) beside the gradient arriving at the layer and the experts' input gradients,
    when everything else the MoE kept is freed, its backward run: bytes beyond what the
    layer keeps (0 when the experts do not train)."""
    weights = experts_backward(block, expert_weights)
    if not weights:
        return 0.0
    gathered = block.experts_per_token * block.width * block.hidden
    alive = block.residual * block.hidden + gathered  # the arriving gradient, the inputs'
    return weights + (alive - (moe_saved(block) - gathered)) * tokens


def bigcode_saved(block: Block, found: Needs | None = None) -> float:
    """A GPTBigCode layer (LayerNorms, fused multi-query c_attn, a GELU MLP, residual dropout)
    per token, each tensor kept only when what reads it needs a gradient (`found`; by default
    everything): each LayerNorm keeps its input and a mean and rstd per token in the dtype; the
    attention keeps c_attn's fused output (q, k and v are views of it) under flash-attn, its
    output and softmax_lse; GELU keeps its input; each residual dropout keeps its mask; trained
    linears keep their inputs (attention's c_proj reads the kept attention output); an
    adapter's dropout keeps its mask when the adapter's input needs a gradient."""
    found = found or needs(block, True)
    w, h, i = block.width, block.hidden, block.intermediate
    norm = w * h + 2 * w
    attention = w * (h + 2 * block.kv_width) + w * h + FP32 * block.heads
    if block.kernels.attention != "flash_attention_2":
        attention += w * h  # contiguous copies of the views, then c_proj's contiguous input
    trained = w * (2 * h + i) if block.trains_weights else 0.0  # c_attn's, c_fc's, c_proj's inputs
    mask = MASK * h if block.residual_dropout else 0.0
    inputs_need = (found.hidden, found.attention, found.mlp, found.product)
    adapters = 0.0
    if block.tuning.method == "lora":
        kept = 2 if block.autocast else FP32
        for width, grad in _bigcode_adapter_inputs(block, inputs_need):
            adapters += kept * width + MASK * width * grad + kept * block.tuning.lora_r
    return (
        norm * found.hidden
        + attention * found.attention
        + (norm + mask) * found.mlp  # the mask after c_proj, the second LayerNorm
        + (block.activation_kept * w * i + mask) * found.product
        + trained
        + adapters
    )


def _bigcode_adapter_inputs(
    block: Block, inputs_need: tuple[bool, bool, bool, bool]
) -> list[tuple[int, bool]]:
    """(input width, whether the input needs a gradient) of each adapted linear: c_attn reads
    the first norm's output, the attention's c_proj its output, c_fc the second norm's, the
    MLP's c_proj GELU's output (`inputs_need`, in that order). `c_proj` names both output
    projections, and a LoRA target of that name adapts both."""
    first, attention, mlp, product = inputs_need
    h, i = block.hidden, block.intermediate
    widths = {"c_attn": [(h, first)], "c_proj": [(h, attention), (i, product)], "c_fc": [(h, mlp)]}
    if block.family == "vision":
        widths = {
            **{name: [(h, first)] for name in ("q_proj", "k_proj", "v_proj")},
            "out_proj": [(h, attention)],
            "fc1": [(h, mlp)],
            "fc2": [(i, product)],
        }
    return [pair for name in block.adapted for pair in widths.get(name, [])]


def layer_linears(block: Block) -> list[tuple[int, str]]:
    """(weight elements, which of Needs' tensors its input is) of each linear of a layer:
    q, k, v read the first norm's output ("hidden"), the attention's output projection the
    attention's output ("attention"), the MLP's first linears and a router the second norm's
    ("mlp"), the MLP's last linear its product ("product"). Experts are all counted (balanced
    routing runs every one of them)."""
    h, q, kv, i = block.hidden, block.q_width, block.kv_width, block.intermediate
    if block.family == "gpt_bigcode":
        return [
            (h * (q + 2 * kv), "hidden"),
            (q * h, "attention"),
            (h * i, "mlp"),
            (i * h, "product"),
        ]
    found = [(h * q, "hidden"), (h * kv, "hidden"), (h * kv, "hidden"), (q * h, "attention")]
    experts = block.experts if block.moe else 1
    found += [(experts * 2 * h * i, "mlp"), (experts * i * h, "product")]
    if block.moe:
        found.append((h * block.experts, "mlp"))  # the router
    if block.shared_intermediate:
        found += [
            (2 * h * block.shared_intermediate, "mlp"),
            (block.shared_intermediate * h, "product"),
        ]
    return found


def weight_copies(block: Block, grad_in: bool) -> float:
    """Bytes of autocast's 16-bit weight copies one layer keeps for backward (not per token):
    F.linear under autocast casts its weight (torch's `cached_cast`), and the matmul keeps the
    copy for its input's gradient. A frozen weight's copy (or one not fp32) is made afresh at
    every call and kept only when the linear's input needs a gradient (`needs`); a trained
    fp32 weight's, kept by the autocast cache while autocast runs, is also kept by its matmul
    (every input needs a gradient when the weights train). PEFT's fp32 adapters are trained
    leaves: their copies are cached and kept under any weights' dtype."""
    total = 0.0
    if block.casts != "none":
        found = needs(block, grad_in)
        reaches = {
            "hidden": found.hidden,
            "attention": found.attention,
            "mlp": found.mlp,
            "product": found.product,
        }
        total += sum(n for n, tensor in layer_linears(block) if reaches[tensor])
    return block.width * total + _adapter_copies(block)


def copies_after_attention(block: Block) -> float:
    """Bytes of the copies `weight_copies` counts for the linears after the attention (o_proj,
    the MLP's, their adapters'): freed by the time the attention's backward runs, their own
    backward done (not per token)."""
    linears = 0.0
    if block.casts != "none":
        linears = sum(n for n, tensor in layer_linears(block) if tensor != "hidden")
    adapters = 0.0
    if block.autocast and block.tuning.method == "lora":
        before = ("q_proj", "k_proj", "v_proj")
        later = [(n, o) for name, n, o in _adapted_shapes(block) if name not in before]
        adapters = sum(block.tuning.lora_r * (n + o) for n, o in later)
    return block.width * (linears + adapters)


def gradients_before_attention(block: Block) -> float:
    """Elements of a layer's weight gradients its backward has made by the time it reaches the
    attention, beyond down_proj's: o_proj's, the MLP's first linears' (and a router's), the
    second norm's."""
    after = sum(n for n, tensor in layer_linears(block) if tensor in ("attention", "mlp"))
    return after + block.hidden


def cached_copies(block: Block) -> float:
    """Bytes of one layer's copies the autocast cache keeps until autocast exits (the end of
    the model's forward), whether or not anything else keeps them: torch caches the casts of
    leaf fp32 tensors that require a gradient (trained fp32 weights, PEFT's adapters)."""
    cached = sum(n for n, _ in layer_linears(block)) if block.casts == "cached" else 0
    return block.width * cached + _adapter_copies(block)


def _adapter_copies(block: Block) -> float:
    """PEFT's fp32 lora_A and lora_B, cast to 16 bits under autocast whatever the weights'
    dtype."""
    if not (block.autocast and block.tuning.method == "lora"):
        return 0.0
    return block.width * sum(block.tuning.lora_r * (n + o) for _, n, o in _adapted_shapes(block))
