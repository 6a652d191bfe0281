"""The newer formula terms of plan/memory/activations.py against hand arithmetic, on a tiny
layer whose widths all differ (so a swapped width shows): h 6, q 8 (2 heads), kv 4, MLP 10,
bf16 (w 2), LoRA rank 3. Per-layer weight elements: q 48, k 24, v 24, o 48, gate 60, up 60,
down 60."""

from __future__ import annotations

import dataclasses

from layer_blocks import attending, trained

from ado_actuators.sfttrainer.plan.memory import activations as A
from ado_actuators.sfttrainer.plan.memory.peak import _layer_backward
from ado_actuators.sfttrainer.plan.model.training import Kernels, TrainingConfiguration, Tuning

KERNELS = Kernels(attention="flash_attention_2", checkpointing="non_reentrant")  # unless told

TINY = A.Block(
    hidden=6,
    q_width=8,
    kv_width=4,
    heads=2,
    intermediate=10,
    width=2,
    tuning=Tuning(method="none", lora_r=3),
    kernels=Kernels(attention="flash_attention_2"),
)
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SAVED = dataclasses.replace(TINY, casts="saved", autocast=True)
LORA = dataclasses.replace(trained(TINY, "lora"), adapted=ALL, autocast=True)
MOE = dataclasses.replace(TINY, moe="mixtral", experts=3, experts_per_token=2)
BIGCODE = dataclasses.replace(TINY, family="gpt_bigcode")


def test_copies_after_attention_are_o_proj_and_the_mlps_weights():
    # o 8 x 6 + gate and up 2 x 6 x 10 + down 10 x 6, 2 bytes each
    assert A.copies_after_attention(SAVED) == 2 * (48 + 120 + 60)
    assert A.copies_after_attention(dataclasses.replace(SAVED, casts="cached")) == 2 * 228
    assert A.copies_after_attention(dataclasses.replace(SAVED, width=4)) == 4 * 228
    # no copies: nothing counted, even under autocast
    assert A.copies_after_attention(TINY) == 0
    assert A.copies_after_attention(dataclasses.replace(SAVED, casts="none")) == 0


def test_copies_after_attention_count_every_expert_and_the_router():
    moe = dataclasses.replace(MOE, casts="saved")
    # o 48, 3 experts' gate and up (3 x 120) and down (3 x 60), the router 6 x 3
    assert A.copies_after_attention(moe) == 2 * (48 + 360 + 180 + 18)
    shared = dataclasses.replace(moe, moe="granitemoe", shared_intermediate=7)
    # and the shared expert's gate/up (2 x 6 x 7) and down (7 x 6)
    assert A.copies_after_attention(shared) == 2 * (48 + 360 + 180 + 18 + 84 + 42)
    bigcode = dataclasses.replace(BIGCODE, casts="saved")
    # c_proj 8 x 6, c_fc 6 x 10, the MLP's c_proj 10 x 6 (not c_attn)
    assert A.copies_after_attention(bigcode) == 2 * (48 + 60 + 60)


def test_copies_after_attention_count_the_later_adapters_under_autocast():
    # o's r x (8 + 6), gate's and up's r x (6 + 10), down's r x (10 + 6); not q's, k's or v's
    later = 3 * (14 + 16 + 16 + 16)
    assert A.copies_after_attention(LORA) == 2 * later
    assert A.copies_after_attention(dataclasses.replace(LORA, width=4)) == 4 * later
    only_o = dataclasses.replace(LORA, adapted=("q_proj", "o_proj"))
    assert A.copies_after_attention(only_o) == 2 * 3 * 14
    assert A.copies_after_attention(dataclasses.replace(LORA, adapted=("k_proj", "v_proj"))) == 0
    assert A.copies_after_attention(dataclasses.replace(LORA, autocast=False)) == 0
    assert A.copies_after_attention(trained(LORA, "none")) == 0
    both = dataclasses.replace(LORA, casts="saved")
    assert A.copies_after_attention(both) == 2 * (228 + later)


def test_gradients_before_attention_are_o_proj_the_mlps_first_linears_and_the_norm():
    # o 48, gate and up 120, the second norm's weight 6 (not q, k, v nor down)
    assert A.gradients_before_attention(TINY) == 48 + 120 + 6
    # 3 experts' gate and up (360) and the router (6 x 3)
    assert A.gradients_before_attention(MOE) == 48 + 360 + 18 + 6
    shared = dataclasses.replace(MOE, moe="granitemoe", shared_intermediate=7)
    assert A.gradients_before_attention(shared) == 48 + 360 + 18 + 84 + 6
    # c_proj 8 x 6, c_fc 6 x 10
    assert A.gradients_before_attention(BIGCODE) == 48 + 60 + 6


def test_down_copy_is_down_projs_weight_and_adapter():
    assert A.down_copy(SAVED) == 2 * 60
    assert A.down_copy(dataclasses.replace(SAVED, width=4)) == 4 * 60
    assert A.down_copy(TINY) == 0
    # its adapter: r x (10 + 6)
    assert A.down_copy(LORA) == 2 * 3 * 16
    assert A.down_copy(dataclasses.replace(LORA, casts="saved")) == 2 * (60 + 48)
    assert A.down_copy(dataclasses.replace(LORA, adapted=("up_proj",))) == 0
    assert A.down_copy(dataclasses.replace(LORA, autocast=False)) == 0
    assert A.down_copy(trained(LORA, "pt")) == 0
    # not gated MLPs
    assert A.down_copy(dataclasses.replace(MOE, casts="saved")) == 0
    assert A.down_copy(dataclasses.replace(BIGCODE, casts="saved")) == 0


def test_down_backward_is_the_output_gradient_its_cast_and_downs_input_gradient():
    # the output's gradient (2 x 6) and down's input gradient (2 x 10)
    assert A.down_backward(TINY) == 2 * 6 + 2 * 10
    # an fp32 stream: the gradient 4 x 6, its bf16 cast 2 x 6, down's input gradient 2 x 10
    assert A.down_backward(dataclasses.replace(TINY, stream=4)) == 4 * 6 + 2 * 6 + 2 * 10
    assert A.down_backward(dataclasses.replace(TINY, stream=2)) == 2 * 6 + 2 * 10
    assert A.down_backward(MOE) == 0
    assert A.down_backward(BIGCODE) == 0


def test_adapters_reading_one_fp32_input_without_dropout_keep_it_once():
    fp32 = dataclasses.replace(trained(TINY, "lora"), adapted=ALL, width=4, lora_dropout=False)
    # the first norm's output (4 x 6) once for q, k, v; o's input 4 x 8; the second norm's
    # (4 x 6) once for gate and up; down's 4 x 10; and each lora_A's fp32 output 4 x 3
    assert A.adapters_saved(fp32, {}) == 4 * (6 + 8 + 6 + 10) + 7 * 4 * 3
    # only q and o: no input shared, each its own
    assert A.adapters_saved(dataclasses.replace(fp32, adapted=("q_proj", "o_proj")), {}) == (
        4 * (6 + 8) + 2 * 4 * 3
    )
    # with dropout each adapter's input is its own tensor, and a one-byte mask
    dropped = dataclasses.replace(fp32, lora_dropout=True)
    assert (
        A.adapters_saved(dropped, {})
        == 4 * (3 * 6 + 8 + 2 * 6 + 10) + (3 * 6 + 8 + 2 * 6 + 10) + 7 * 4 * 3
    )
    # 16 bits under autocast: 16-bit copies, each adapter its own (never shared)
    half = dataclasses.replace(fp32, width=2, autocast=True)
    assert A.adapters_saved(half, {}) == 2 * (3 * 6 + 8 + 2 * 6 + 10) + 7 * 2 * 3
    # bf16 without autocast: each adapter casts the input to fp32 itself
    bf16 = dataclasses.replace(fp32, width=2)
    assert A.adapters_saved(bf16, {}) == 4 * (3 * 6 + 8 + 2 * 6 + 10) + 7 * 4 * 3
    assert A.adapters_saved(trained(fp32, "none"), {}) == 0


def test_eager_softmax_backward_frees_what_the_mlp_and_the_later_linears_kept():
    eager = attending(TINY, "eager")
    # per score the bf16 gradient and the fp32 output (2 + 4), 2 heads x 32; the arriving
    # gradient 2 x 6 and the value's gradient 2 x 8; less the MLP's three tensors (3 x 2 x 10),
    # the second norm's fp32 input, rsqrt and bf16 copy (4 x 6 + 4 + 2 x 6), o_proj's input
    # (2 x 8), gate/up's (2 x 6) and down's (2 x 10), and the expanded value (2 x 8)
    freed = 60 + 40 + (16 + 12 + 20) + 16
    assert A.attention_backward(eager, 32) == 2 * 32 * 6 + (12 + 16) - freed


def test_eager_softmax_forward_before_the_later_tensors_exist():
    eager = attending(TINY, "eager")
    # per score: the bf16 masked scores, the fp32 probabilities, the upcast (4 > the cast's 2)
    # = 10, over 2 heads x 16; and the residual 2 x 6
    assert A.attention_forward(eager, 16, keeping=False) == 32 * 10 + 12
    # keeping: less what the layer keeps, per score (q, expanded k and v 3 x 2 x 8 = 48 over
    # 32 scores, and the fp32 and bf16 scores 4 + 2), and less the later tensors: the MLP's
    # 60, the second norm's 40, o_proj's and the MLP's inputs 16 + 12 + 20
    per_score = 10 - (48 / 32 + 6)
    assert A.attention_forward(eager, 16, keeping=True) == 32 * per_score + 12 - (60 + 40 + 48)


def test_the_experts_moment_is_nothing_when_the_experts_do_not_train():
    moe = dataclasses.replace(trained(MOE, "lora"), moe="granitemoe", adapted=("q_proj",))
    assert A.experts_moment(moe, 1000.0, 4) == 0
    assert A.experts_moment(trained(MOE, "none"), 1000.0, 4) == 0


def test_a_layers_backward_peak_under_full_fine_tuning_with_eager_attention():
    eager = dataclasses.replace(attending(TINY, "eager"), casts="saved")
    training = TrainingConfiguration(kernels=KERNELS)
    # the softmax backward (2 x 32 x 6 + 28 - 164 = 248 per token, 3 tokens), less the copies
    # after the attention (2 x 228), plus those linears' bf16 gradients and the norm's
    # (2 x 174), plus the reentrant gradient and the residual's (2 x 5 per token)
    softmax = 248 * 3 - 2 * 228 + 2 * 174 + 2 * 5 * 3
    # beats down_proj's backward ((32 + 5) x 3) and the MLP's less down's copy
    assert _layer_backward(eager, training, 32, 3, 5.0) == softmax
    lora = TrainingConfiguration(kernels=KERNELS, tuning=Tuning(method="lora"))
    assert _layer_backward(eager, lora, 32, 3, 5.0) == softmax - 2 * 174


def test_a_layers_backward_when_the_mlp_frees_more_than_it_adds():
    moe = dataclasses.replace(
        trained(MOE, "lora"), moe="granitemoe", adapted=("q_proj",), shared_intermediate=30
    )
    # arriving 2 x 6, 2 experts' rows x 3 products x 2 x 10 = 120, less the expert outputs
    # (2 x 2 x 6 x 2 = 48) and the shared expert's (3 x 2 x 30 = 180): below 0, so nothing;
    # a MoE's down_proj is not counted apart: only the held output, 5 per token
    assert A.mlp_backward(moe) == 12 + 120 - 48 - 180
    training = TrainingConfiguration(kernels=KERNELS, tuning=Tuning(method="lora"))
    assert _layer_backward(moe, training, 32, 3, 5.0) == 5 * 3
