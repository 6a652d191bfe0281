"""A Granite 4.0 model's (model_type granitemoehybrid) parameters and linear layers counted from
config.json, with no torch or transformers: the memory formula (plan/memory/hybrid.py) and the
step time (plan/speed/prediction.py, through plan/model/meta_shape.meta_counts) read them. Equal to
what transformers builds (tests/unit/test_hybrid_memory.py checks the seven catalogue sizes).

Counted on an attention-only "twin" (`twin_config`: GraniteMoeShared with experts, Granite
without, whose layers the hand-written counter knows), each Mamba layer's attention replaced by
its mixer (plan/model/mamba.py's shape).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.plan.model.architecture import (
    LinearShape,
    ParameterCounts,
    count_parameters,
)
from ado_actuators.sfttrainer.plan.model.mamba import MambaLayers, layer_kinds, mamba_layers
from ado_actuators.sfttrainer.plan.model.shape import language_config

HYBRID_TYPES = ("granitemoehybrid",)
"""The model types predicted here (Bamba's layers differ: still traced)."""
TWIN_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "tie_word_embeddings",
    "attention_bias",
)


def is_hybrid(config: dict[str, Any]) -> bool:
    return language_config(config).get("model_type") in HYBRID_TYPES


def twin_config(config: dict[str, Any]) -> dict[str, Any]:
    """The attention-only config.json whose layers are the hybrid's attention layers:
    granitemoeshared with experts, granite (a dense MLP of the shared MLP's width) without."""
    text = language_config(config)
    twin = {key: text[key] for key in TWIN_KEYS if key in text}
    shared = int(text.get("shared_intermediate_size") or 0)
    if int(text.get("num_local_experts") or 0) > 0:
        twin |= {
            "model_type": "granitemoeshared",
            "intermediate_size": text.get("intermediate_size"),
            "shared_intermediate_size": shared,
            "num_local_experts": text["num_local_experts"],
            "num_experts_per_tok": text.get("num_experts_per_tok"),
        }
    else:
        twin |= {"model_type": "granite", "intermediate_size": shared}
    return twin


def mixer_parameters(layer: MambaLayers, config: dict[str, Any]) -> tuple[int, int]:
    """A Mamba mixer's parameters (in_proj, the depthwise convolution, dt_bias, A_log, D, the
    gated norm, out_proj) and, of them, its matmul weights (in_proj's and out_proj's)."""
    proj_bias = bool(config.get("mamba_proj_bias", False))
    conv_bias = bool(config.get("mamba_conv_bias", True))
    matmul = layer.hidden * layer.projected + layer.inner * layer.hidden
    biases = (layer.projected + layer.hidden) * proj_bias + layer.conv_dim * conv_bias
    rest = layer.conv_dim * layer.conv_kernel + 3 * layer.heads + layer.inner
    return matmul + biases + rest, matmul


def hybrid_counts(config: dict[str, Any], twin: ParameterCounts) -> ParameterCounts:
    """The twin's counts with each Mamba layer's attention replaced by its mixer, and the
    hybrid's own linear layers (`hybrid_linears`)."""
    text = language_config(config)
    layer = mamba_layers(text)
    found = dataclasses.replace(
        twin, model_type=str(text.get("model_type")), linears=hybrid_linears(text, twin, layer)
    )
    if layer is None:
        return found
    total_layers = int(text["num_hidden_layers"])
    per_attention = twin.attention // total_layers
    params, matmul = mixer_parameters(layer, text)
    return dataclasses.replace(
        found,
        attention=(total_layers - layer.layers) * per_attention + layer.layers * params,
        quantizable=twin.quantizable + layer.layers * (matmul - _attention_matmul(twin)),
    )


ATTENTION_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj")


def hybrid_linears(
    text: dict[str, Any], twin: ParameterCounts, layer: MambaLayers | None
) -> tuple[LinearShape, ...]:
    """The hybrid's nn.Linear layers by the names LoRA's targets match: q, k, v and o in the
    attention layers, in_proj and out_proj in the Mamba layers, and in every layer the shared
    MLP's input_linear and output_linear and, with experts, the router's `layer` (the experts
    themselves are stacked tensors, no nn.Linear)."""
    layers = int(text["num_hidden_layers"])
    mamba = layer.layers if layer else 0
    hidden, shared = twin.hidden_size, int(text.get("shared_intermediate_size") or 0)
    experts = int(text.get("num_local_experts") or 0)
    found = [
        dataclasses.replace(s, count=layers - mamba)
        for s in twin.linears
        if s.name in ATTENTION_LINEARS
    ]
    if layer is not None:
        found.append(LinearShape("in_proj", hidden, layer.projected, mamba))
        found.append(LinearShape("out_proj", layer.inner, hidden, mamba))
    found.append(LinearShape("input_linear", hidden, 2 * shared, layers))
    found.append(LinearShape("output_linear", shared, hidden, layers))
    if experts:
        found.append(LinearShape("layer", hidden, experts, layers))
    return tuple(s for s in found if s.count)


def _attention_matmul(twin: ParameterCounts) -> int:
    """One attention layer's q, k, v and o weights."""
    return sum(s.inputs * s.outputs for s in twin.linears if s.name in ATTENTION_LINEARS)


def counted(config: dict[str, Any]) -> ParameterCounts:
    """The hybrid's counts (`hybrid_counts` on its twin's)."""
    return hybrid_counts(config, count_parameters(twin_config(config)))


def meta_fields(config: dict[str, Any]) -> dict[str, Any]:
    """plan/model/meta_shape.MetaCounts' fields as transformers' model on the meta device gives
    them: every nn.Linear (the tied LM head's too), those inside attention, the stacked experts'
    weights (input_linear's [experts, 2 x intermediate, hidden] and output_linear's) and the
    share a token uses, the layers holding attention."""
    text = language_config(config)
    counts = counted(config)
    vocab, hidden = int(text["vocab_size"]), counts.hidden_size
    head = ("lm_head", hidden, vocab, 1)
    linears = (*((s.name, s.inputs, s.outputs, s.count) for s in counts.linears), head)
    experts = int(text.get("num_local_experts") or 0)
    inter, layers = int(text.get("intermediate_size") or 0), int(text["num_hidden_layers"])
    per_token = int(text.get("num_experts_per_tok") or 1)
    kinds = layer_kinds(text) or ["attention"] * layers
    return {
        "layers": layers,
        "attention_layers": sum(kind == "attention" for kind in kinds),
        "hidden": hidden,
        "heads": int(text.get("num_attention_heads") or 0),
        "total": counts.total,
        "linear": sum(i * o * c for _, i, o, c in linears),
        "attention_linear": sum(
            i * o * c for name, i, o, c in linears if name in ATTENTION_LINEARS
        ),
        "lm_head": vocab * hidden,
        "experts": layers * experts * 3 * inter * hidden if experts else 0,
        "expert_share": per_token / experts if experts > 1 else 1.0,
        "linears": linears,
        "linear_names": frozenset(name for name, *_ in linears),
        "stacked_experts": experts > 0,  # GraniteMoE's ParallelExperts: 3-D parameters
        "rms_norm": True,
        "rotary": text.get("position_embedding_type") == "rope",  # else no positions (NoPE)
    }
