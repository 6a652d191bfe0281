"""Autocast over weights of another dtype, eager attention's softmax, and the attention a
release runs by default (plan/memory/activations.py, peak.py, logits.py), held to hand counts
of the code that allocates each tensor."""

from __future__ import annotations

import dataclasses

from layer_blocks import attending, trained
from training_configuration import sized

from ado_actuators.sfttrainer.contract.memory_trace import Attention
from ado_actuators.sfttrainer.plan.memory import activations as A
from ado_actuators.sfttrainer.plan.memory import logits
from ado_actuators.sfttrainer.plan.memory.peak import ReleaseBehaviour, widths
from ado_actuators.sfttrainer.plan.model import releases
from ado_actuators.sfttrainer.plan.model.training import (
    Checkpointing,
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


def _training(
    dtype: str,
    method: str = "lora",
    mixed: bool = False,
    autocast: str | None = None,
    attention: Attention = "flash_attention_2",
    checkpointing: Checkpointing = "non_reentrant",
) -> TrainingConfiguration:
    """`mixed`: under autocast, in `autocast`'s dtype (None: the weights' own where 16-bit)."""
    return TrainingConfiguration(
        tuning=Tuning(method=method),
        kernels=Kernels(attention=attention, checkpointing=checkpointing),
        precision=Precision(torch_dtype=dtype, mixed_precision=mixed, autocast_dtype=autocast),
    )


def test_autocast_over_fp32_weights_computes_in_16_bits_beside_an_fp32_stream():
    assert widths(_training("float32", mixed=True)) == (2, 4, "saved")
    assert widths(_training("float32", "none", mixed=True)) == (2, 4, "cached")
    assert widths(_training("bfloat16", mixed=True)) == (2, 2, "none")
    # 16-bit weights mix in their own dtype unless told otherwise; bf16 over fp16 casts
    assert widths(_training("float16", mixed=True)) == (2, 2, "none")
    other = _training("float16", mixed=True, autocast="bfloat16")
    assert widths(other) == (2, 4, "saved")
    assert widths(_training("float32")) == (4, 4, "none")


def test_a_frozen_linear_keeps_its_copy_only_when_its_input_needs_a_gradient():
    saved = A.Block(**{**LORA.__dict__, "stream": 4, "casts": "saved", "autocast": True})
    linears = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128
    adapters = 8 * (64 + 64) + 8 * (64 + 32)
    assert A.weight_copies(saved, True) == 2 * linears + 2 * adapters
    # the first layer: only what the adapters' outputs reach (o_proj on) needs a gradient
    assert A.weight_copies(saved, False) == 2 * (linears - 64 * 64 - 2 * 64 * 32) + 2 * adapters
    assert A.cached_copies(saved) == 2 * adapters
    cached = dataclasses.replace(trained(saved, "none"), adapted=(), casts="cached")
    assert A.cached_copies(cached) == A.weight_copies(cached, False) == 2 * linears
    assert A.weight_copies(LORA, True) == 0.0


def test_each_linear_casts_a_wider_norm_output_itself():
    full = dataclasses.replace(trained(LORA, "none"), adapted=())
    wide = A.Block(**{**full.__dict__, "stream": 4, "casts": "cached", "autocast": True})
    assert A.linear_inputs_saved(wide) - A.linear_inputs_saved(full) == 3 * 2 * 64
    assert A.norm_saved(wide, True) - A.norm_saved(full, True) == 2 * 64


def test_eager_softmax_widths_follow_the_mask_and_the_query():
    eager = attending(LORA, "eager")
    assert A.softmax_widths(eager) == (2, 4, 2)  # bf16 scores, their upcast, the cast back
    fp32 = A.Block(**{**eager.__dict__, "width": 4})
    assert A.softmax_widths(fp32) == (4, 0, 0)
    mixed = A.Block(**{**eager.__dict__, "stream": 4, "dtype_width": 4, "autocast": True})
    assert A.softmax_widths(mixed) == (4, 0, 0)  # fp32 mask and query: no upcast, no cast
    # the expanded value (2 x 64 a token) is freed by the softmax's backward
    assert A.attention_backward(eager, 16) == (
        4 * 16 * 6 + 2 * 64 + 2 * 64 - A.mlp_saved(eager) - A.norm_saved(eager, True) - 2 * 64
    )
    assert A.attention_forward(LORA, 16, True) == 0.0
    assert A.layer_forward(eager, False, 512) > A.layer_forward(LORA, False, 512)


def test_fp32_logits_are_not_upcast_again():
    code = logits.LossCode(upcast="loss", shifts="labels")
    assert code.inside_bytes(4, None, False) == 4 + 4
    assert code.inside_bytes(2, None, False) == 2 + 4 + 4


def test_the_default_attention_is_read_from_the_release():
    assert logits.read_attention("class P(PreTrainedModel):\n    _supports_sdpa = True\n") == "sdpa"
    assert (
        logits.read_attention("class P(PreTrainedModel):\n    _supports_sdpa = False\n") == "eager"
    )
    assert logits.read_attention("class P(PreTrainedModel):\n    pass\n") == "eager"
    assert releases.attention_for("3.2.2", "llama", False) == "sdpa"
    assert releases.attention_for("3.2.2", "llama", True) == "flash_attention_2"
    assert releases.default_attention("0.0", "llama") == "sdpa"


EAGER = dataclasses.replace(attending(LORA, "eager"), intermediate=16)
FP32 = A.Block(**{**EAGER.__dict__, "width": 4})
MIXED = A.Block(**{**EAGER.__dict__, "stream": 4, "dtype_width": 4, "autocast": True})
HALF_UNDER_BF16 = A.Block(**{**EAGER.__dict__, "stream": 4, "dtype_width": 2, "autocast": True})


def test_eager_softmax_forward_by_hand():
    # 4 heads x 16 positions a token: masked scores 2 + fp32 softmax 4 + max(upcast 4, cast 2)
    assert A.softmax_widths(HALF_UNDER_BF16) == (2, 4, 2)  # the fp16 mask, a 16-bit query
    assert A.attention_forward(EAGER, 16, False) == 64 * 10 + 2 * 64
    assert A.attention_forward(FP32, 16, False) == 64 * (4 + 4) + 4 * 64
    assert A.attention_forward(MIXED, 16, False) == 64 * (4 + 4) + 4 * 64
    # beyond what the layer keeps (q, k, v copies 3 x 2 x 64, the softmax 4 + 2 a score):
    # 10 - 6 - 384 / 384 = 3 a score at 96 positions; below 0 at 16, counted as none
    # and less what the layer keeps only after the attention, not made yet: the MLP's
    # (3 x 2 x 16) and the second norm's (4 x 64 + 4)
    later = 3 * 2 * 16 + 4 * 64 + 4
    assert A.attention_forward(EAGER, 96, True) == 4 * 96 * 3 + 2 * 64 - later
    assert A.attention_forward(EAGER, 16, True) == 2 * 64 - later
    assert (
        A.attention_forward(A.Block(**{**EAGER.__dict__, "family": "gpt_bigcode"}), 16, False) == 0
    )
    assert A.attention_forward(LORA, 16, False) == 0


def test_eager_softmax_backward_by_hand():
    # by then the MLP's and the second norm's tensors are freed, and the expanded value
    # (q_width wide in the compute dtype), read only by the probabilities' gradient
    freed = A.mlp_saved(EAGER) + A.norm_saved(EAGER, True) + 2 * 64
    assert A.attention_backward(EAGER, 16) == 4 * 16 * (2 + 4) + 2 * 64 + 2 * 64 - freed
    freed = A.mlp_saved(FP32) + A.norm_saved(FP32, True) + 4 * 64
    assert A.attention_backward(FP32, 16) == 4 * 16 * (4 + 4) + 4 * 64 + 4 * 64 - freed
    freed = A.mlp_saved(MIXED) + A.norm_saved(MIXED, True) + 2 * 64
    assert A.attention_backward(MIXED, 16) == 4 * 16 * (2 + 4) + 4 * 64 + 2 * 64 - freed
    assert A.attention_backward(A.Block(**{**EAGER.__dict__, "family": "gpt_bigcode"}), 16) == 0
    assert A.attention_backward(LORA, 16) == 0
    # the layer's largest: the softmax's at 256 positions, the MLP's at none
    assert A.layer_backward(EAGER, 256) == A.attention_backward(EAGER, 256)
    assert A.layer_backward(EAGER) == A.layer_backward(EAGER, 0) == A.mlp_backward(EAGER)
    assert A.layer_forward(EAGER, True, 256) == A.attention_forward(EAGER, 256, True)
    assert A.layer_forward(EAGER, False, 256) == A.attention_forward(EAGER, 256, False)


def test_without_a_length_eager_attention_adds_nothing():
    # many heads over a narrow layer: one position's scores outgrow its MLP
    wide = A.Block(**{**EAGER.__dict__, "hidden": 8, "heads": 64, "intermediate": 1})
    wide = dataclasses.replace(trained(wide, "pt"), adapted=())
    assert A.layer_forward(wide, False) == A.layer_forward(wide, False, 0)
    assert A.layer_forward(wide, False, 1) > A.layer_forward(wide, False, 0)
    assert A.layer_backward(wide) == A.layer_backward(wide, 0) < A.layer_backward(wide, 1)


def test_the_layer_counts_eager_attention_at_its_length():
    from ado_actuators.sfttrainer.plan.memory.peak import Dimensions, block_of, layer_bytes

    dims = Dimensions("llama", 2, 64, 4, 64, 32, 16, 128)
    eager = ReleaseBehaviour()
    lora = sized(_training("bfloat16", attention="eager", checkpointing="none"), 2, 256)
    block = block_of(dims, lora, eager, ("q_proj", "v_proj"))
    layer = layer_bytes(dims, lora, eager, ("q_proj", "v_proj"))
    tokens = 2 * 256
    assert layer["backward"] == A.layer_backward(block, 256) * tokens
    assert layer["forward"] == A.layer_forward(block, True, 256) * tokens
    assert layer["recomputed"] == A.layer_forward(block, True, 256) * tokens
    assert layer["mask"] == 2 * tokens * 256
    checkpointed = sized(_training("bfloat16", attention="eager"), 2, 256)
    layer = layer_bytes(dims, checkpointed, eager, ("q_proj", "v_proj"))
    assert layer["forward"] == A.layer_forward(block, False, 256) * tokens
    # fp16 weights under bf16 autocast: the mask in the weights' 16 bits, the stream fp32
    mixed = _training(
        "float16", mixed=True, autocast="bfloat16", attention="eager", checkpointing="none"
    )  # the widths alone: no batch read
    half = block_of(dims, mixed, eager, ("q_proj", "v_proj"))
    assert (half.dtype_width, half.residual, half.casts) == (2, 4, "saved")


def test_each_moment_names_the_weight_copies_it_holds():
    from ado_actuators.sfttrainer.plan.memory import peak

    dims = peak.Dimensions("llama", 2, 64, 4, 64, 32, 16, 128)
    layer = dict.fromkeys(
        ("first", "other", "rotary", "embedded", "forward", "recomputed", "backward"), 0.0
    )
    layer.update(
        input=10.0, mask=7.0, copies_first=3.0, copies_other=5.0, copies_kept=11.0,
        copies_inside=13.0, copies_head=17.0, shared_first=0.0, shared_other=0.0,
    )  # fmt: skip
    work = ReleaseBehaviour()
    base = {"weights": 0.0, "gradients": 0.0, "optimizer_state": 0.0, "fsdp_gathered": 0.0}
    plain = sized(_training("float32", checkpointing="none"), 1, 8)
    training = sized(_training("float32"), 1, 8)  # checkpointed
    forwards = peak._forward_moments(dims, plain, work, layer, base, 0.0, dict.fromkeys(
        ("inside", "returned", "backward", "kept"), 0.0))  # fmt: skip
    assert forwards["last layer"]["autocast_copies"] == 11 + 13
    assert forwards["last layer"]["activations"] == 0 + 7  # the mask, inside the forward
    assert forwards["loss"]["activations"] == 10 + 7  # LoRA's held final-norm output, the mask
    held = peak._forward_moments(dims, training, work, layer, base, 0.0, dict.fromkeys(
        ("inside", "returned", "backward", "kept"), 0.0))  # fmt: skip
    assert held["last layer"]["activations"] == 2 * 10 + 7  # the mask as the layers' input
    assert peak._kept(dims, True, layer) == 2 * 10 + 7
    top, bottom = peak._kept_in_layers(dims, plain, None, work, layer)  # type: ignore[arg-type]
    assert (top["autocast_copies"], bottom["autocast_copies"]) == (11, 3)
    top, bottom = peak._kept_in_layers(dims, training, _Bound(), work, layer)
    assert (top["activations"], bottom["activations"]) == (2 * 10 + 7, 10 + 7)
    assert (top["autocast_copies"], bottom["autocast_copies"]) == (5, 3)
    norm = peak._final_norm_moment(None, dims, plain, None, work, layer, base)  # type: ignore[arg-type]
    assert norm["final norm"]["autocast_copies"] == 11


class _Bound:
    shards = 1


def test_one_score_a_token_is_not_halved():
    # one head at one position: the kept tensors over one score (3 x 2 + 4 + 2 = 12 a score
    # at one-wide q, k and v) exceed the 10 held, so nothing beyond them
    one = A.Block(**{**EAGER.__dict__, "heads": 1, "q_width": 1, "kv_width": 1})
    assert A.attention_forward(one, 1, True) == 2 * 64 - (3 * 2 * 16 + 4 * 64 + 4)
