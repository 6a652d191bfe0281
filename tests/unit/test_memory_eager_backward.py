"""What is alive at eager attention's softmax backward, and LoRA's fp32 inputs read by more
than one adapter (plan/memory/activations.py, peak.layer_bytes), held to hand counts of the
tensors a trace of transformers 4.55's code shows at that moment (issue 44)."""

from __future__ import annotations

import dataclasses

from layer_blocks import attending, trained

from ado_actuators.sfttrainer.contract.memory_trace import Attention
from ado_actuators.sfttrainer.plan.memory import activations as A
from ado_actuators.sfttrainer.plan.memory.peak import (
    Dimensions,
    ReleaseBehaviour,
    block_of,
    layer_bytes,
)
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    Precision,
    TrainingConfiguration,
    Tuning,
)

LORA = A.Block(
    hidden=64, q_width=64, kv_width=32, heads=4, intermediate=128, width=2,
    tuning=Tuning(method="lora", lora_r=8), kernels=Kernels(attention="sdpa"),
    adapted=("q_proj", "v_proj"),
)  # fmt: skip
FULL = dataclasses.replace(trained(LORA, "none"), adapted=())


def test_a_trained_layer_keeps_its_linears_inputs_before_and_after_the_attention():
    # q/k/v share the norm's output (2 x 64); o_proj's contiguous input (2 x 64), gate/up's
    # shared input (2 x 64) and down_proj's (2 x 128)
    assert A.linear_inputs(FULL) == (128, 128 + 128 + 256)
    assert A.linear_inputs_saved(FULL) == 640
    # a wider stream under autocast: each linear casts the norm's output itself
    wide = A.Block(**{**FULL.__dict__, "stream": 4, "autocast": True, "casts": "cached"})
    assert A.linear_inputs(wide) == (3 * 128, 128 + 2 * 128 + 256)
    flash = attending(FULL, "flash_attention_2")
    assert A.linear_inputs(flash) == (128, 128 + 256)  # flash-attn keeps o_proj's input
    assert A.linear_inputs(LORA) == (0, 0)


def test_the_copies_after_the_attention_are_freed_by_its_backward():
    saved = A.Block(**{**LORA.__dict__, "stream": 4, "casts": "saved", "autocast": True})
    # o_proj 64 x 64, gate and up 2 x 64 x 128, down 128 x 64, in 16 bits; q and v's
    # adapters run before the attention
    assert A.copies_after_attention(saved) == 2 * (4096 + 16384 + 8192)
    later = A.Block(**{**saved.__dict__, "adapted": ("o_proj", "down_proj")})
    # lora_A and lora_B of o_proj (8 x (64 + 64)) and of down_proj (8 x (128 + 64))
    assert A.copies_after_attention(later) == 2 * (4096 + 16384 + 8192) + 2 * (1024 + 1536)
    assert A.copies_after_attention(LORA) == 0.0


def test_a_layers_gradients_before_its_attention():
    # o_proj's, gate's and up's weights and the second norm's (down_proj's: counted apart)
    assert A.gradients_before_attention(FULL) == 4096 + 16384 + 64


def test_adapters_reading_one_fp32_input_keep_it_once():
    qkv = ("q_proj", "k_proj", "v_proj")
    fp32 = A.Block(**{**LORA.__dict__, "width": 4, "adapted": qkv, "lora_dropout": False})
    # the norm's output itself (4 x 64) once, and each lora_A's output (4 x 8)
    assert A.adapters_saved(fp32, {}) == 4 * 64 + 3 * 4 * 8
    # dropout makes each adapter a tensor of its own, and a one-byte mask
    dropped = A.Block(**{**fp32.__dict__, "lora_dropout": True})
    assert A.adapters_saved(dropped, {}) == 3 * (4 * 64 + 64 + 4 * 8)
    # a 16-bit input: each adapter casts it to fp32 itself
    half = A.Block(**{**fp32.__dict__, "width": 2})
    assert A.adapters_saved(half, {}) == 3 * (4 * 64 + 4 * 8)
    mlp = A.Block(**{**fp32.__dict__, "adapted": ("gate_proj", "up_proj", "down_proj")})
    assert A.adapters_saved(mlp, {}) == 4 * 64 + 4 * 128 + 3 * 4 * 8


def _reentrant(method: str, attention: Attention = "flash_attention_2") -> TrainingConfiguration:
    """Checkpointed by torch.utils.checkpoint's use_reentrant=True, 2 samples of 256 tokens."""
    kernels = Kernels(attention=attention, checkpointing="reentrant")
    batch = Batch(per_device_batch=2, model_max_length=256)
    return TrainingConfiguration(tuning=Tuning(method=method), kernels=kernels, batch=batch)


def test_the_softmax_backward_beside_the_reentrant_checkpoints_gradients():
    dims = Dimensions("llama", 2, 64, 4, 64, 32, 16, 128)
    reentrant = ReleaseBehaviour()
    tokens, held = 2 * 256, 2 * 64  # the recomputed output, 16 bits
    lora = block_of(dims, _reentrant("lora", "eager"), reentrant, ("q_proj", "v_proj"))
    layer = layer_bytes(dims, _reentrant("lora", "eager"), reentrant, ("q_proj", "v_proj"))
    # the layer's output gradient, held by the checkpoint, and the residual's: 2 x held
    expected = A.attention_backward(lora, 256) * tokens + 2 * held * tokens
    assert expected > (A.mlp_backward(lora) + held) * tokens
    assert layer["backward"] == expected
    # full fine-tuning: o_proj's, gate's, up's and the norm's gradients (bf16) are made
    full = block_of(dims, _reentrant("none", "eager"), reentrant)
    layer = layer_bytes(dims, _reentrant("none", "eager"), reentrant)
    gradients = 2 * (64 * 64 + 2 * 64 * 16 + 64)
    assert layer["backward"] == A.attention_backward(full, 256) * tokens + 2 * held * tokens + (
        gradients
    )
    # sdpa: the MLP's backward, and the held output
    sdpa = reentrant
    layer = layer_bytes(dims, _reentrant("lora"), sdpa, ("q_proj", "v_proj"))
    block = block_of(dims, _reentrant("lora"), sdpa, ("q_proj", "v_proj"))
    assert layer["backward"] == (A.mlp_backward(block) + held) * tokens


def test_prompt_tunings_fp32_embeddings_are_the_first_norms_copy():
    from ado_actuators.sfttrainer.plan.memory.peak import _forward_moments

    dims = Dimensions("llama", 2, 64, 4, 64, 32, 16, 128)
    plain = ReleaseBehaviour()
    zeros = dict.fromkeys(("inside", "returned"), 0.0)
    tokens = 2 * (8 + 8)  # the virtual tokens joined
    for dtype, width, embeddings in (("float32", 4, 0), ("bfloat16", 2, 1)):
        training = TrainingConfiguration(
            tuning=Tuning(method="pt"),
            precision=Precision(torch_dtype=dtype),
            kernels=Kernels(attention="flash_attention_2", checkpointing="none"),
            batch=Batch(per_device_batch=2, model_max_length=8),
        )
        layer = layer_bytes(dims, training, plain)
        assert layer["input"] == width * 64 * tokens
        moments = _forward_moments(dims, training, plain, layer, {}, 0.0, zeros)
        # the final norm's output, and the joined embeddings unless the first layer's norm
        # keeps them as its fp32 copy (fp32 weights: the same tensor)
        assert moments["loss"]["activations"] == layer["input"] * (1 + embeddings)


def test_down_projs_backward_and_its_copy():
    # the gradient arriving (2 x 64), down_proj's input gradient (2 x 128)
    assert A.down_backward(LORA) == 2 * 64 + 2 * 128
    # a wider stream: the arriving gradient fp32 (4 x 64), cast to 16 bits (2 x 64)
    wide = A.Block(**{**LORA.__dict__, "stream": 4, "casts": "saved", "autocast": True})
    assert A.down_backward(wide) == 4 * 64 + 2 * 64 + 2 * 128
    # its weight's 16-bit copy (128 x 64), freed before the product's backward
    assert A.down_copy(wide) == 2 * 128 * 64
    adapted = A.Block(**{**wide.__dict__, "adapted": ("down_proj",)})
    assert A.down_copy(adapted) == 2 * 128 * 64 + 2 * 8 * (128 + 64)
    assert A.down_copy(LORA) == 0.0
    moe = A.Block(**{**wide.__dict__, "moe": "mixtral", "experts": 2})
    assert A.down_backward(moe) == A.down_copy(moe) == 0.0


def test_the_layers_backward_is_down_projs_when_its_copy_outweighs_the_products():
    from ado_actuators.sfttrainer.plan.memory.peak import _layer_backward

    wide = A.Block(**{**LORA.__dict__, "stream": 4, "casts": "saved", "autocast": True})
    training = TrainingConfiguration(
        tuning=Tuning(method="lora"),
        precision=Precision(torch_dtype="float32"),
        kernels=Kernels(attention="flash_attention_2"),
    )
    # one token: the product's gradients (3 x 2 x 128) less the copy (16384) is below
    # down_proj's moment
    assert _layer_backward(wide, training, 1, 1, 0.0) == A.down_backward(wide)
    # many tokens: the product's
    mlp = A.mlp_backward(wide) * 1000 - A.down_copy(wide)
    assert _layer_backward(wide, training, 1, 1000, 0.0) == mlp


def test_granitemoes_experts_gradients_once_the_moes_kept_tensors_are_freed():
    granite = A.Block(
        **{**FULL.__dict__, "moe": "granitemoe", "experts": 4, "experts_per_token": 2}
    )
    # what the MoE keeps a token: 2 routes x (3 x 2 x 128 + 2 x 2 x 64 + 2), the router's
    # 8 x 2 + 4 x 2 + 16 x 2, the trained experts' and router's inputs 2 x 2 x (64 + 128) + 2 x 64
    assert A.moe_saved(granite) == 2 * 1026 + 56 + 896
    # three weight-sized tensors, the arriving gradient (2 x 64) and the experts' input
    # gradients (2 x 2 x 64, the gathered rows' width), the kept tensors but the gathered
    # rows freed
    assert A.experts_moment(granite, 1000, 1) == 3000 + (128 + 256) - (3004 - 256)
    assert A.experts_moment(granite, 1000, 10) == 3000 + 10 * (384 - 2748)
    lora = trained(granite, "lora")
    assert A.experts_moment(lora, 1000, 1) == 0.0
