"""What a decoder layer keeps and adds (plan/memory/activations.py), term by term against hand
arithmetic: per token, h 64, 4 heads of 16 (q 64), 2 kv heads (kv 32), MLP 128, bf16 (w 2).
benchmarks/memory_truth.py checks the same terms against traces of the models' own code."""

from __future__ import annotations

import dataclasses

import pytest
from layer_blocks import attending, trained

from ado_actuators.sfttrainer.plan.memory import activations as A
from ado_actuators.sfttrainer.plan.model.training import FastKernels, Kernels, Tuning

FULL = A.Block(
    hidden=64,
    q_width=64,
    kv_width=32,
    heads=4,
    intermediate=128,
    width=2,
    tuning=Tuning(method="none"),
    kernels=Kernels(attention="flash_attention_2"),
)
LORA = dataclasses.replace(trained(FULL, "lora", lora_r=8), adapted=("q_proj", "v_proj"))
PT = trained(FULL, "pt")


def test_an_rmsnorm_keeps_its_fp32_input_its_rsqrt_and_when_it_trains_its_dtype_copy():
    assert A.norm_saved(FULL, True) == 4 * 64 + 4 + 2 * 64
    assert A.norm_saved(LORA, True) == 4 * 64 + 4
    assert A.norm_saved(LORA, False) == 0  # LoRA's first layer: nothing needs a gradient
    assert A.norm_saved(FULL, False) == 4 * 64 + 4 + 2 * 64  # its weight still trains
    fast = FastKernels(fast_rms_layernorm=True)
    fused = dataclasses.replace(LORA, kernels=dataclasses.replace(LORA.kernels, fast_kernels=fast))
    assert A.norm_saved(fused, True) == 2 * 64 + 4


def test_attention_keeps_what_each_implementation_saves():
    grads = (True, True, True)
    # flash: q, k, v, output (2 x (2 x 64 + 2 x 32)) and softmax_lse (4 heads x fp32)
    assert A.attention_saved(FULL, grads, 16) == 2 * (2 * 64 + 2 * 32) + 4 * 4
    assert A.attention_saved(attending(FULL, "sdpa"), grads, 16) == 400
    eager = attending(FULL, "eager")
    # q, expanded k, expanded v (3 x 2 x 64), scores fp32 and bf16 (4 heads x 16 x (4 + 2))
    assert A.attention_saved(eager, grads, 16) == 3 * 128 + 4 * 16 * 6
    # q needs no gradient: the expanded k is not kept; v none: the bf16 scores are not
    assert A.attention_saved(eager, (False, True, False), 16) == 2 * 128 + 4 * 16 * 4
    assert A.attention_saved(eager, (False, True, True), 16) == 2 * 128 + 4 * 16 * 6
    # only v needs one (LoRA on v alone, the first layer): the scores' 16-bit copy for v's
    # gradient, neither the fp32 softmax (the scores need none) nor q, k or v
    assert A.attention_saved(eager, (False, False, True), 16) == 4 * 16 * 2
    # nothing needs a gradient (LoRA's first layer, no adapter on q, k or v): nothing recorded
    for attention in ("eager", "sdpa", "flash_attention_2"):
        none = attending(FULL, attention)
        assert A.attention_saved(none, (False, False, False), 16) == 0
    fp32 = dataclasses.replace(eager, width=4)  # the fp32 softmax is the dtype's
    assert A.attention_saved(fp32, grads, 16) == 3 * 256 + 4 * 16 * 4


def test_qwen3_normalises_q_and_k_per_head():
    qk = dataclasses.replace(LORA, qk_norm=True)
    # fp32 q (4 x 64) and k (4 x 32), an fp32 rsqrt per head (4 q heads, 2 kv heads)
    assert A.qk_norm_saved(qk, (True, True, True)) == 4 * 64 + 4 * 4 + 4 * 32 + 4 * 2
    assert A.qk_norm_saved(qk, (False, True, True)) == 4 * 32 + 4 * 2
    full = dataclasses.replace(FULL, qk_norm=True)  # and the dtype copies
    assert A.qk_norm_saved(full, (False, False, False)) == 6 * 64 + 16 + 6 * 32 + 8
    assert A.qk_norm_saved(LORA, (True, True, True)) == 0


def test_trained_linears_keep_their_inputs_once_per_shared_input():
    # q/k/v's input (2 x 64), gate/up's (2 x 64) and down's (2 x 128); o_proj reads the output
    # flash-attn keeps
    assert A.linear_inputs_saved(FULL) == 2 * 64 + 2 * (64 + 128)
    sdpa = attending(FULL, "sdpa")
    assert A.linear_inputs_saved(sdpa) == A.linear_inputs_saved(FULL) + 2 * 64
    assert A.linear_inputs_saved(LORA) == 0
    moe = dataclasses.replace(FULL, moe="mixtral", experts=4, experts_per_token=2)
    assert A.linear_inputs_saved(moe) == 2 * 64  # the experts' inputs are moe_saved's


def test_a_gated_mlp_keeps_three_intermediate_tensors():
    assert A.mlp_saved(LORA) == 3 * 2 * 128
    assert A.mlp_saved(FULL) == 3 * 2 * 128


def test_experts_keep_the_mlp_per_routed_token_and_the_routers_tensors():
    mixtral = dataclasses.replace(LORA, moe="mixtral", experts=4, experts_per_token=2)
    per_route = 3 * 2 * 128 + 2 * 2 * 64 + 2
    router = 4 * 4 + 8 * 2 + 4 + 4 * 2 + 8 * 2
    assert A.moe_saved(mixtral) == 2 * per_route + router
    granite = dataclasses.replace(mixtral, moe="granitemoe")
    assert A.moe_saved(granite) == 2 * per_route + 8 * 2 + 4 * 2 + 16 * 2
    shared = dataclasses.replace(granite, shared_intermediate=32)
    assert A.moe_saved(shared) == A.moe_saved(granite) + 3 * 2 * 32
    full = dataclasses.replace(trained(shared, "none"), adapted=())
    inputs = 2 * 2 * (64 + 128) + 2 * 64 + 2 * 32  # what the trained linears keep
    assert A.moe_saved(full) == A.moe_saved(shared) + inputs
    assert A.mlp_saved(mixtral) == A.moe_saved(mixtral)


def test_a_lora_adapter_keeps_its_fp32_dropout_output_its_mask_and_lora_as_output():
    # q_proj and v_proj read the hidden state: (4 + 1) x 64 + 4 x 8 each
    assert A.adapters_saved(LORA, {}) == 2 * (5 * 64 + 32)
    assert A.adapters_saved(LORA, {"q_proj": False}) == 2 * (5 * 64 + 32) - 64
    no_dropout = dataclasses.replace(LORA, lora_dropout=False)
    assert A.adapters_saved(no_dropout, {}) == 2 * (4 * 64 + 32)
    autocast = dataclasses.replace(LORA, autocast=True)  # 16-bit copies under autocast
    assert A.adapters_saved(autocast, {}) == 2 * (3 * 64 + 16)
    wide = dataclasses.replace(LORA, q_width=96, adapted=("o_proj", "down_proj", "w2"))
    assert [A.adapter_input_width(wide, n) for n in ("o_proj", "down_proj", "w2", "x")] == [
        96,
        128,
        128,
        64,
    ]
    experts = dataclasses.replace(LORA, adapted=("w1",), experts_per_token=3)
    assert A.adapters_saved(experts, {}) == 3 * (5 * 64 + 32)
    assert A.adapters_saved(FULL, {}) == 0


def test_a_layer_keeps_the_sum_of_its_parts_and_the_first_lora_layer_less():
    # norms 2 x 388, attention 400, the trained inputs 512, the MLP 768
    assert A.layer_saved(FULL, 16) == 776 + 400 + 512 + 768
    # LoRA's first layer: its first norm keeps nothing, q/v's adapters no mask
    first = A.layer_saved(LORA, 16, first=True, input_grads=False)
    assert A.layer_saved(LORA, 16) - first == A.norm_saved(LORA, True) + 2 * 64
    assert A.layer_saved(LORA, 16, first=True, input_grads=True) == A.layer_saved(LORA, 16)
    assert A.layer_saved(PT, 16, first=True, input_grads=True) == 2 * 260 + 400 + 768


def test_a_layers_backward_adds_its_output_gradient_and_the_mlps_three_gradients():
    assert A.layer_backward(LORA) == 2 * 64 + 3 * 2 * 128
    assert A.layer_backward(FULL) == 2 * 64 + 2 * 2 * 128  # down_proj's kept input is freed
    mixtral = dataclasses.replace(LORA, moe="mixtral", experts=4, experts_per_token=2)
    assert A.layer_backward(mixtral) == 2 * 64 + 0.5 * 3 * 2 * 128
    granite = dataclasses.replace(mixtral, moe="granitemoe", shared_intermediate=32)
    assert A.layer_backward(granite) == 2 * 64 + 2 * 3 * 2 * 128 - 2 * 2 * 64 * 2 - 3 * 2 * 32
    bigcode = dataclasses.replace(LORA, family="gpt_bigcode")
    assert A.layer_backward(bigcode) == 2 * 64 + 2 * 2 * 128
    assert A.layer_backward(trained(bigcode, "none")) == 2 * 64 + 2 * 128


def test_a_layers_forward_at_its_largest():
    assert A.layer_forward(FULL, keeping=True) == 2 * 64
    assert A.layer_forward(PT, keeping=True) == 2 * 64 + 2 * (64 + 128)
    assert A.layer_forward(PT, keeping=False) == 2 * 2 * 64 + 4 * 2 * 128
    granite = dataclasses.replace(PT, moe="granitemoe", experts=4, experts_per_token=2)
    assert A.layer_forward(granite, keeping=False) == 2 * 2 * 64 + 2 * 2 * (64 + 4 * 128)
    # at the scatter back: the residual, the second norm's output and the zeros (3 x 2 x 64),
    # the gated product (2 experts x 2 x 128) and the gathered rows (2 x 2 x 64)
    assert A.layer_forward(granite, keeping=True) == 3 * 2 * 64 + 2 * 2 * 128 + 2 * 2 * 64
    # an fp32 stream under autocast: the residual, norm output, zeros and gathered rows fp32
    wide = dataclasses.replace(granite, stream=4, autocast=True)
    assert A.layer_forward(wide, keeping=True) == 3 * 4 * 64 + 2 * 2 * 128 + 2 * 4 * 64
    # full fine-tuning keeps the experts' inputs (gathered rows, product) and the router's
    # (the norm's output): the residual and the zeros are left
    full = trained(granite, "none")
    assert A.layer_forward(full, keeping=True) == 2 * 2 * 64
    # a wider stream: only the product is the experts' kept input itself
    wide_full = dataclasses.replace(full, stream=4, autocast=True, casts="cached")
    assert A.layer_forward(wide_full, keeping=True) == 3 * 4 * 64 + 2 * 4 * 64
    mixtral = dataclasses.replace(granite, moe="mixtral")
    assert A.layer_forward(mixtral, keeping=True) == 3 * 2 * 64 + 0.5 * 2 * 64
    assert A.layer_forward(mixtral, keeping=False) == 3 * 2 * 64 + 0.5 * 2 * (64 + 4 * 128)
    bigcode = dataclasses.replace(PT, family="gpt_bigcode")
    assert A.layer_forward(bigcode, keeping=True) == 2 * 64
    assert A.layer_forward(bigcode, keeping=False) == 2 * 2 * 64 + 2 * 2 * 128


def test_an_adapters_forward_holds_its_fp32_input_and_its_outputs():
    # v_proj (64 -> 32): the residual and the norm's output beside q's and k's projections
    # (2 x (64 + 64 + 64 + 32)), the fp32 input (4 x 64), (8 + 2) x 32 out
    v_only = dataclasses.replace(LORA, adapted=("v_proj",))
    assert A.adapter_forward(v_only) == 2 * (64 + 64 + 64 + 32) + 4 * 64 + 10 * 32
    # down_proj (128 -> 64): the residual, the MLP's input and the product it reads
    down = dataclasses.replace(LORA, adapted=("down_proj",))
    assert A.adapter_forward(down) == 2 * (64 + 64 + 128) + 4 * 128 + 10 * 64
    assert A.adapter_forward(FULL) == 0
    bigcode = dataclasses.replace(LORA, family="gpt_bigcode", adapted=("c_proj",))
    # the MLP's c_proj (128 -> 64) reads GELU's output, which nobody keeps
    assert A.adapter_forward(bigcode) == 2 * (64 + 64 + 128) + 4 * 128 + 10 * 64
    assert A.layer_forward(down, keeping=True) == A.adapter_forward(down)


def test_parallel_experts_accumulate_their_weight_gradient_through_whole_tensors():
    granite = dataclasses.replace(FULL, moe="granitemoe", experts=4, experts_per_token=2)
    assert A.experts_backward(granite, 1000.0) == 3000.0
    assert A.experts_backward(trained(granite, "lora"), 1000.0) == 0
    assert A.experts_backward(dataclasses.replace(granite, moe="mixtral"), 1000.0) == 0


@pytest.mark.parametrize("attention", ["flash_attention_2", "sdpa"])
def test_a_gpt_bigcode_layer(attention):
    full = dataclasses.replace(
        attending(FULL, attention), family="gpt_bigcode", residual_dropout=True
    )
    # two LayerNorms (2 x (2 x 64 + 2 x 2)), c_attn's fused output 2 x (64 + 64), the output and
    # lse (2 x 64 + 16), GELU's input (2 x 128), the trained inputs 2 x (2 x 64 + 128), the two
    # residual dropouts' masks
    flash = 2 * 132 + 256 + 128 + 16 + 256 + 512 + 128
    expected = flash + (2 * 64 if attention == "sdpa" else 0)
    assert A.bigcode_saved(full) == expected
    assert A.layer_saved(full, 16) == expected
    lora = dataclasses.replace(trained(full, "lora"), adapted=("c_attn", "c_proj"))
    # c_attn's and attention c_proj's (5 x 64 + 32 each), the MLP c_proj's (5 x 128 + 32)
    adapters = 2 * (5 * 64 + 32) + (5 * 128 + 32)
    assert A.bigcode_saved(lora) == expected - 512 + adapters
    # the first layer: nothing needs c_attn's input gradient, no mask there, no first norm
    first = A.needs(lora, grad_in=False)
    assert A.bigcode_saved(lora) - A.bigcode_saved(lora, first) == 132 + 64
    assert A.layer_saved(lora, 16, first=True, input_grads=False) == A.bigcode_saved(lora, first)


NARROW = dataclasses.replace(LORA, intermediate=16)
"""An MLP narrower than the hidden state: an adapter's forward, not the MLP's, is the layer's
largest even beyond everything the layer keeps (MLP 16: mlp_saved 3 x 2 x 16 = 96)."""


@pytest.mark.parametrize(
    ("name", "held"),
    [
        # 2 x (residual + norm output [+ q, kv before it]) + 4 x 64 fp32 input + 10 x out, less
        # the second norm (4 x 64 + 4) and the MLP (96) the layer keeps later, and after q/k/v
        # the attention's q, k, v, output and lse (2 x (2 x 64 + 2 x 32) + 4 x 4)
        ("q_proj", 2 * 128 + 256 + 10 * 64 - (260 + 96 + 400)),
        ("k_proj", 2 * 192 + 256 + 10 * 32 - (260 + 96 + 400)),
        ("v_proj", 2 * 224 + 256 + 10 * 32 - (260 + 96 + 400)),
        ("o_proj", 2 * 128 + 4 * 64 + 10 * 64 - (260 + 96)),
        # kept after gate_proj: its own output (a cast of the sum, made after it), SiLU's and
        # up_proj's; after up_proj its own output; nothing after down_proj (which holds the
        # residual, the MLP's input and the product beside its own)
        ("gate_proj", 2 * 128 + 256 + 10 * 16 - 3 * 2 * 16),
        ("up_proj", 2 * 128 + 256 + 10 * 16 - 2 * 16),
        ("down_proj", 2 * (64 + 64 + 16) + 4 * 16 + 10 * 64),
    ],
)
def test_an_adapters_forward_beyond_what_the_layer_keeps_less_what_it_keeps_later(name, held):
    block = dataclasses.replace(NARROW, adapted=(name,))
    assert A.adapter_forward(block, keeping=True) == held
    # the layer's largest: this or the MLP's (2 x 64 + 2 x (64 + 16))
    assert A.layer_forward(block, keeping=True) == max(held, 2 * 64 + 2 * 80)


def test_eager_attention_is_kept_after_q_k_v_without_its_scores():
    eager = dataclasses.replace(attending(NARROW, "eager"), adapted=("q_proj",))
    # q, the expanded k and v (3 x 2 x 64); the scores' [heads, s] depend on the length
    assert A.adapter_forward(eager, keeping=True) == 2 * 128 + 256 + 640 - (260 + 96 + 384)


def test_targets_a_layer_does_not_have_hold_nothing_in_its_forward():
    q_only = dataclasses.replace(NARROW, adapted=("q_proj",))
    foreign = dataclasses.replace(NARROW, adapted=("q_proj", "c_proj", "lm_head"))
    assert A.adapter_forward(foreign) == A.adapter_forward(q_only)
    assert A.adapter_forward(foreign, keeping=True) == A.adapter_forward(q_only, keeping=True)
    assert A.adapter_forward(dataclasses.replace(NARROW, adapted=())) == 0


def test_a_gpt_bigcode_adapters_forward_beyond_what_the_layer_keeps():
    bigcode = dataclasses.replace(NARROW, family="gpt_bigcode")
    c_attn = dataclasses.replace(bigcode, adapted=("c_attn",))
    # c_attn (64 -> 64 + 2 x 32): the residual and the norm's output, 4 x 64 in, 10 x 128 out;
    # kept later: GELU's input (2 x 16), the second LayerNorm's (2 x 64 + 2 x 2), the attention
    assert A.adapter_forward(c_attn, keeping=True) == 2 * 128 + 256 + 1280 - (32 + 132 + 400)
    c_fc = dataclasses.replace(bigcode, adapted=("c_fc",))
    # kept later: its own output (GELU's input), and with residual dropout the MLP's mask
    assert A.adapter_forward(c_fc, keeping=True) == 2 * 128 + 256 + 10 * 16 - 2 * 16
    masked = dataclasses.replace(c_fc, residual_dropout=True)
    assert A.adapter_forward(masked, keeping=True) == 2 * 128 + 256 + 10 * 16 - 2 * 16 - 64
    # c_proj adapts the attention's (kept later: the MLP's) and the MLP's (GELU's output beside)
    c_proj = dataclasses.replace(bigcode, adapted=("c_proj",))
    attention_c_proj = 2 * 128 + 256 + 640 - (32 + 132)
    mlp_c_proj = 2 * (64 + 64 + 16) + 4 * 16 + 640
    assert A.adapter_forward(c_proj, keeping=True) == max(attention_c_proj, mlp_c_proj)
    # a wider MLP: the MLP's c_proj is the largest, less the residual mask kept after it
    wide = dataclasses.replace(c_proj, intermediate=128, residual_dropout=True)
    assert A.adapter_forward(wide, keeping=True) == 2 * (64 + 64 + 128) + 4 * 128 + 640 - 64


def test_a_layer_other_than_the_first_always_needs_its_input_gradient():
    # input_grads is about the first layer's input alone; the default layer is not the first
    assert A.layer_saved(LORA, 16, input_grads=False) == A.layer_saved(LORA, 16)
    # and the first's input needs one unless told otherwise
    assert A.layer_saved(LORA, 16, first=True) == A.layer_saved(LORA, 16)
    assert A.layer_saved(LORA, 16, first=True) > A.layer_saved(LORA, 16, True, False)


def test_a_qwen3_layer_keeps_its_q_and_k_norms_for_what_needs_a_gradient():
    qk = dataclasses.replace(LORA, qk_norm=True, adapted=("q_proj", "k_proj"))
    # the first layer under LoRA on q and k: q and k need gradients, v not (k's norm counts)
    first = A.layer_saved(qk, 16, first=True, input_grads=False)
    plain = dataclasses.replace(qk, qk_norm=False)
    assert first - A.layer_saved(plain, 16, True, False) == 4 * 64 + 4 * 4 + 4 * 32 + 4 * 2
    assert A.qk_norm_saved(qk, (True, True, False)) == 4 * 64 + 4 * 4 + 4 * 32 + 4 * 2
    # a single head: one rsqrt per token for q and one for k
    one_head = dataclasses.replace(qk, heads=1, kv_width=64)
    assert A.qk_norm_saved(one_head, (True, True, True)) == 4 * 64 + 4 + 4 * 64 + 4


def test_eager_attention_keeps_q_for_ks_gradient_in_loras_first_layer():
    # LoRA on q and k: in the first layer q and k need gradients (their adapters), v not
    eager = dataclasses.replace(attending(LORA, "eager"), adapted=("q_proj", "k_proj"))
    first = A.layer_saved(eager, 16, first=True, input_grads=False)
    attention = A.attention_saved(eager, (True, True, False), 16)
    assert attention == 3 * 128 + 4 * 16 * 4
    adapters = 2 * (4 * 64 + 32)  # no masks: the norm's output needs no gradient
    assert first == A.norm_saved(eager, True) + attention + 768 + adapters


def test_experts_copy_only_their_own_adapters():
    # Mixtral's experts (w1, w2, w3) run once per routed token; q_proj's adapter once
    mixtral = dataclasses.replace(LORA, moe="mixtral", experts=4, experts_per_token=2)
    assert A.adapters_saved(mixtral, {}) == A.adapters_saved(LORA, {})


def test_a_gpt_bigcode_layer_without_residual_dropout_keeps_no_masks():
    with_masks = dataclasses.replace(FULL, family="gpt_bigcode", residual_dropout=True)
    without = dataclasses.replace(with_masks, residual_dropout=False)
    assert A.bigcode_saved(with_masks) - A.bigcode_saved(without) == 2 * 64
    lora = dataclasses.replace(trained(without, "lora"), adapted=("c_attn", "c_proj"))
    autocast = dataclasses.replace(lora, autocast=True)
    # the adapters keep autocast's 16-bit copies: (4 - 2) x (64 + 64 + 128) in, (4 - 2) x 8 out
    assert A.bigcode_saved(lora) - A.bigcode_saved(autocast) == 2 * 256 + 3 * 2 * 8


def test_in_loras_first_layer_only_what_an_adapters_output_reaches_needs_a_gradient():
    def first(*adapted, family="llama"):
        return A.needs(dataclasses.replace(LORA, adapted=adapted, family=family), grad_in=False)

    nothing = A.Needs(False, (False, False, False), False, False, False, False, False)
    assert first("down_proj") == nothing  # its output is the layer's: nothing before it
    assert first("gate_proj") == dataclasses.replace(nothing, gate=True, product=True)
    assert first("up_proj") == dataclasses.replace(nothing, up=True, product=True)
    after_attention = A.Needs(False, (False, False, False), False, True, True, True, True)
    assert first("o_proj") == after_attention
    assert first("k_proj") == A.Needs(False, (False, True, False), True, True, True, True, True)
    assert first("q_proj", "v_proj").qkv == (True, False, True)
    everything = A.Needs(True, (True, True, True), True, True, True, True, True)
    assert A.needs(LORA, grad_in=True) == everything
    assert A.needs(FULL, grad_in=False) == everything  # every weight trains
    # GPTBigCode: c_attn is q, k and v; c_proj the attention's output; c_fc gate and up
    assert first("c_fc", family="gpt_bigcode") == dataclasses.replace(
        nothing, gate=True, up=True, product=True
    )
    assert first("c_proj", family="gpt_bigcode") == after_attention
    assert first("c_attn", family="gpt_bigcode") == dataclasses.replace(everything, hidden=False)


def test_a_gated_mlp_keeps_what_its_factors_gradients_read():
    # SiLU keeps gate's output, the product up's output for SiLU's gradient and SiLU's for up's
    assert A.mlp_saved(LORA, gate=True, up=False) == 2 * 2 * 128
    assert A.mlp_saved(LORA, gate=False, up=True) == 2 * 128
    assert A.mlp_saved(LORA, gate=False, up=False) == 0


def test_an_adapters_dropout_keeps_its_mask_when_its_input_needs_a_gradient():
    found = A.Needs(False, (False, False, False), True, True, False, False, True)
    assert A.adapter_input_needs(found) == {
        "q_proj": False,
        "k_proj": False,
        "v_proj": False,
        "o_proj": True,
        "gate_proj": True,
        "up_proj": True,
        "w1": True,
        "w3": True,
        "down_proj": True,
        "w2": True,
    }
    found = A.Needs(True, (True, True, True), False, False, True, True, False)
    assert [A.adapter_input_needs(found)[n] for n in ("q_proj", "o_proj", "w3", "w2")] == [
        True,
        False,
        False,
        False,
    ]


@pytest.mark.parametrize(
    ("adapted", "kept"),
    [
        # each adapter: its fp32 dropout output (4 x its input) and lora_A's output (4 x 8),
        # its mask only where its input needs a gradient; then what the MLP keeps (2 x 128 each)
        (("gate_proj",), 4 * 64 + 32 + 2 * 2 * 128),
        (("up_proj",), 4 * 64 + 32 + 2 * 128),
        (("down_proj",), 4 * 128 + 32),
        (("gate_proj", "up_proj"), 2 * (4 * 64 + 32) + 3 * 2 * 128),
        (("up_proj", "down_proj"), 4 * 64 + 32 + 2 * 128 + 5 * 128 + 32),
        # o_proj: the attention's output needs no gradient (no mask), the second norm keeps
        # its fp32 input and rsqrt, the whole MLP
        (("o_proj",), 4 * 64 + 32 + (4 * 64 + 4) + 3 * 2 * 128),
    ],
)
def test_loras_first_layer_keeps_only_what_its_adapters_reach(adapted, kept):
    # measured against autograd's saved tensors (torch.autograd.graph.saved_tensors_hooks) on
    # a Llama of hidden 512: gate 7712, up 4896, down 5664, o_proj 12580 bytes per token
    block = dataclasses.replace(LORA, adapted=adapted)
    assert A.layer_saved(block, 16, first=True, input_grads=False) == kept


def test_a_gpt_bigcode_first_layer_keeps_only_what_its_adapters_reach():
    bigcode = dataclasses.replace(LORA, family="gpt_bigcode", residual_dropout=True)
    # no adapter of its own (a name GPTBigCode lacks): the first layer keeps nothing, as a
    # Llama's first layer without adapters does
    assert A.layer_saved(dataclasses.replace(bigcode, adapted=("q_proj",)), 16, True, False) == 0
    assert A.layer_saved(dataclasses.replace(LORA, adapted=()), 16, True, False) == 0
    c_fc = dataclasses.replace(bigcode, adapted=("c_fc",))
    # GELU's input and the MLP's residual mask (2 x 128 + 64), c_fc's adapter (4 x 64 + 32)
    assert A.layer_saved(c_fc, 16, True, False) == 2 * 128 + 64 + 4 * 64 + 32
    c_proj = dataclasses.replace(bigcode, adapted=("c_proj",))
    # both residual masks (2 x 64), the second LayerNorm (2 x 64 + 4), GELU's input; the
    # attention's c_proj adapter without its mask, the MLP's with (5 x 128 + 32)
    expected = 2 * 64 + 132 + 256 + (4 * 64 + 32) + (5 * 128 + 32)
    assert A.layer_saved(c_proj, 16, True, False) == expected
