"""The newer formula terms of plan/memory/activations.py against hand arithmetic, on a tiny
layer whose widths all differ (so a swapped width shows): h 6, q 8 (2 heads), kv 4, MLP 10,
bf16 (w 2), LoRA rank 3. Per-layer weight elements: q 48, k 24, v 24, o 48, gate 60, up 60,
down 60."""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.plan.memory import activations as A

TINY = A.Block(
    hidden=6,
    q_width=8,
    kv_width=4,
    heads=2,
    intermediate=10,
    width=2,
    method="none",
    attention="flash_attention_2",
    lora_r=3,
)
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SAVED = dataclasses.replace(TINY, casts="saved", autocast=True)
LORA = dataclasses.replace(TINY, method="lora", adapted=ALL, autocast=True)
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
    assert A.copies_after_attention(dataclasses.replace(LORA, method="none")) == 0
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
    assert A.down_copy(dataclasses.replace(LORA, method="pt")) == 0
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
