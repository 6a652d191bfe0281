"""Autocast over weights of another dtype, eager attention's softmax, and the attention a
release runs by default (plan/memory/activations.py, peak.py, logits.py), held to hand counts
of the code that allocates each tensor."""

from __future__ import annotations

from ado_actuators.sfttrainer.plan.memory import activations as A
from ado_actuators.sfttrainer.plan.memory import logits
from ado_actuators.sfttrainer.plan.memory.bound import Training
from ado_actuators.sfttrainer.plan.memory.peak import Workload, widths
from ado_actuators.sfttrainer.plan.model import releases

LORA = A.Block(
    hidden=64, q_width=64, kv_width=32, heads=4, intermediate=128, width=2, method="lora",
    attention="sdpa", adapted=("q_proj", "v_proj"), lora_r=8,
)  # fmt: skip


def _training(dtype: str, method: str = "lora") -> Training:
    return Training(peft_method=method, torch_dtype=dtype, optim="adamw_torch", number_gpus=1)


def test_autocast_over_fp32_weights_computes_in_16_bits_beside_an_fp32_stream():
    mixed = Workload(per_device_batch=1, sequence_length=8, autocast=True)
    assert widths(_training("float32"), mixed) == (2, 4, "saved")
    assert widths(_training("float32", "none"), mixed) == (2, 4, "cached")
    assert widths(_training("bfloat16"), mixed) == (2, 2, "none")
    # 16-bit weights mix in their own dtype unless told otherwise; bf16 over fp16 casts
    assert widths(_training("float16"), mixed) == (2, 2, "none")
    other = Workload(
        per_device_batch=1, sequence_length=8, autocast=True, autocast_dtype="bfloat16"
    )
    assert widths(_training("float16"), other) == (2, 4, "saved")
    plain = Workload(per_device_batch=1, sequence_length=8)
    assert widths(_training("float32"), plain) == (4, 4, "none")


def test_a_frozen_linear_keeps_its_copy_only_when_its_input_needs_a_gradient():
    saved = A.Block(**{**LORA.__dict__, "stream": 4, "casts": "saved", "autocast": True})
    linears = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128
    adapters = 8 * (64 + 64) + 8 * (64 + 32)
    assert A.weight_copies(saved, True) == 2 * linears + 2 * adapters
    # the first layer: only what the adapters' outputs reach (o_proj on) needs a gradient
    assert A.weight_copies(saved, False) == 2 * (linears - 64 * 64 - 2 * 64 * 32) + 2 * adapters
    assert A.cached_copies(saved) == 2 * adapters
    cached = A.Block(**{**saved.__dict__, "method": "none", "adapted": (), "casts": "cached"})
    assert A.cached_copies(cached) == A.weight_copies(cached, False) == 2 * linears
    assert A.weight_copies(LORA, True) == 0.0


def test_each_linear_casts_a_wider_norm_output_itself():
    full = A.Block(**{**LORA.__dict__, "method": "none", "adapted": ()})
    wide = A.Block(**{**full.__dict__, "stream": 4, "casts": "cached", "autocast": True})
    assert A.linear_inputs_saved(wide) - A.linear_inputs_saved(full) == 3 * 2 * 64
    assert A.norm_saved(wide, True) - A.norm_saved(full, True) == 2 * 64


def test_eager_softmax_widths_follow_the_mask_and_the_query():
    eager = A.Block(**{**LORA.__dict__, "attention": "eager"})
    assert A.softmax_widths(eager) == (2, 4, 2)  # bf16 scores, their upcast, the cast back
    fp32 = A.Block(**{**eager.__dict__, "width": 4})
    assert A.softmax_widths(fp32) == (4, 0, 0)
    mixed = A.Block(**{**eager.__dict__, "stream": 4, "dtype_width": 4, "autocast": True})
    assert A.softmax_widths(mixed) == (4, 0, 0)  # fp32 mask and query: no upcast, no cast
    assert A.attention_backward(eager, 16) == (
        4 * 16 * 6 + 2 * 64 + 2 * 64 - A.mlp_saved(eager) - A.norm_saved(eager, True)
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
