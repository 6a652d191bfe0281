"""A deep model traced at reduced depth and extrapolated per layer (plan/memory/trace/layer_extrapolation.py)
gives the full-depth trace to the byte: every part of every phase, the parts at rest and the
parameter counts. A 12-layer narrow hybrid (Mamba-2 and attention layers, experts) under each
method and checkpointing mode; where the backward's peak could move with depth, a config whose
layers differ in a way it does not list per layer and a shallow model: traced at full depth,
saying so."""

from __future__ import annotations

import pytest

from ado_actuators.sfttrainer.contract.memory_trace import StepSpec
from ado_actuators.sfttrainer.plan.memory.trace import layer_extrapolation
from ado_actuators.sfttrainer.plan.memory.trace.step import trace_step

pytestmark = pytest.mark.slow  # about 30 s of CPU: a dozen traces of a 12-layer model

# the Mamba-2 mixer both hybrids below use: narrow, as a test needs
MAMBA = {
    "mamba_n_heads": 4,
    "mamba_d_head": 32,
    "mamba_d_state": 16,
    "mamba_n_groups": 1,
    "mamba_expand": 2,
    "mamba_d_conv": 4,
}
KINDS = ["mamba"] * 3 + ["attention"] + ["mamba"] * 5 + ["attention"] + ["mamba"] * 2
HYBRID = {
    "model_type": "granitemoehybrid",
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": len(KINDS),
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "intermediate_size": 32,
    "shared_intermediate_size": 64,
    "layer_types": KINDS,
    **MAMBA,
    "tie_word_embeddings": True,
}


@pytest.mark.parametrize(
    ("method", "checkpointing", "batch", "length", "depth"),
    [
        ("none", None, 1, 64, "reduced depth"),
        ("lora", "non_reentrant", 1, 64, "reduced depth"),  # the layers before attention: frozen
        ("pt", "reentrant", 1, 64, "reduced depth"),
        # per layer, gradients and activations close: the peak moves from the backward's start
        # to its end with depth, which no shallow copy shows
        ("none", "non_reentrant", 2, 256, "full depth"),
    ],
)
def test_the_extrapolated_trace_is_the_full_depth_trace(
    method, checkpointing, batch, length, depth
):
    targets = ("q_proj", "v_proj") if method == "lora" else ()
    spec = StepSpec(
        HYBRID, method, targets, checkpointing=checkpointing, batch=batch, length=length
    )
    extrapolated, how = layer_extrapolation.trace(spec)
    full = trace_step(spec)
    assert depth in how
    for phase, parts in full.phases.items():
        found = extrapolated.phases[phase]
        assert {k: found.get(k, 0) for k in parts} == parts, phase
        assert not {k: v for k, v in found.items() if k not in parts and v}, phase
    assert extrapolated.rest == full.rest
    linears = sorted(map(tuple, full.inventory.pop("linears")))
    assert sorted(map(tuple, extrapolated.inventory.pop("linears"))) == linears
    assert extrapolated.inventory == full.inventory


def test_a_shallow_model_is_traced_at_full_depth():
    shallow = dict(HYBRID, num_hidden_layers=4, layer_types=KINDS[:4])
    assert "full depth" in layer_extrapolation.plan(StepSpec(shallow))


def test_layers_the_config_does_not_list_per_layer_are_traced_at_full_depth():
    # Bamba names its attention layers by index: a copy keeping that list would move them
    bamba = {
        "model_type": "bamba",
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 12,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "attn_layer_indices": [5],
        **MAMBA,
    }
    found = layer_extrapolation.plan(StepSpec(bamba))
    assert isinstance(found, str) and "full depth" in found
