"""The predicted peak of a Granite 4.0 model (model_type granitemoehybrid: Mamba-2 layers beside
attention layers, experts in some) by formula, with no trace: pure.

Its attention layers are GraniteMoeShared's (GraniteMoE's experts and a shared MLP; with no
experts, Granite's dense MLP of the shared MLP's width), without rotary positions (Granite 4.0
uses none), so plan/memory/peak.py's formula counts them on that "twin" configuration. A Mamba
layer is the same layer with the attention replaced by a Mamba-2 mixer (plan/memory/mamba.py, on
the scan path plan/model/mamba.py decides). The layers differ, so what peak.py reads per layer is
given to it whole (`hybrid_layer`): the first layer whose input needs a gradient, the others'
mean, and, for the moments at the model's last layer, that layer's kind. Under LoRA without an
input-gradient hook the Mamba layers before the first attention layer (which holds the adapters)
keep nothing: the layers peak.py counts start there.

Checked against the trace of the model's own code (benchmarks/memory_truth.py's hybrid rows,
which trace the fused kernel); the torch path is counted from its code, not traced.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.plan.memory import activations
from ado_actuators.sfttrainer.plan.memory import mamba as mixer
from ado_actuators.sfttrainer.plan.memory.bound import MemoryBound, memory_bound
from ado_actuators.sfttrainer.plan.memory.peak import (
    Dimensions,
    PeakPrediction,
    ReleaseBehaviour,
    block_of,
    checkpointed,
    input_grads,
    layer_bytes,
    predict_peak,
)
from ado_actuators.sfttrainer.plan.model.architecture import (
    LinearShape,
    ParameterCounts,
    count_parameters,
)
from ado_actuators.sfttrainer.plan.model.mamba import (
    MambaLayers,
    layer_kinds,
    mamba_layers,
    scan_note,
    scan_path,
)
from ado_actuators.sfttrainer.plan.model.shape import ModelShape, language_config
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration

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


def twin_dimensions(config: dict[str, Any]) -> Dimensions:
    """The twin's dimensions, without rotary positions unless config.json asks for them."""
    dims = Dimensions.of(twin_config(config))
    rope = language_config(config).get("position_embedding_type") == "rope"
    return dataclasses.replace(dims, rotary=rope)


def _mamba_layer(
    block: activations.Block,
    layer: MambaLayers,
    configuration: TrainingConfiguration,
    attention: dict[str, float],
    recomputing: bool,
) -> dict[str, float]:
    """A Mamba layer, bytes for the device's batch: what it keeps when its input needs a
    gradient (the attention layer's norms and MLP, the mixer for the attention), what its
    backward adds at the mixer (the MLP's and second norm's tensors freed by then, the
    gradient arriving and the mixer's input gradient beside it) or at the MLP, and its forward
    at the mixer or the MLP."""
    width, path = block.width, scan_path(configuration.fms_hf_tuning_version)
    length = configuration.model_length
    tokens = configuration.batch.per_device_batch * length
    trains = block.trains_weights
    o_proj = (
        width * block.q_width if trains and block.kernels.attention != "flash_attention_2" else 0
    )
    mlp = activations.mlp_saved(block) + activations.norm_saved(block, True)
    mlp += activations.linear_inputs(block)[1] - o_proj
    kept = (
        activations.norm_saved(block, True)
        + mlp
        + mixer.mixer_saved(layer, width, path, trains, length)
    )
    arriving = 2 * block.residual * block.hidden
    backward = mixer.mixer_backward(layer, width, path, length) + arriving - mlp
    forward = mixer.mixer_forward(layer, width, path, length) + block.residual * block.hidden
    held = width * layer.projected + activations.FP32 * block.hidden  # not kept when recomputed
    return {
        "kept": kept * tokens,
        "backward": max(attention["backward"], backward * tokens),
        "forward": max(attention["forward"], (forward + held * recomputing) * tokens),
        "recomputed": max(attention["recomputed"], forward * tokens),
    }


def hybrid_layer(
    config: dict[str, Any],
    dims: Dimensions,
    configuration: TrainingConfiguration,
    behaviour: ReleaseBehaviour,
    adapted: tuple[str, ...],
) -> tuple[Dimensions, dict[str, float]]:
    """What peak.py reads per layer (layer_bytes' keys) for the hybrid, and its dimensions
    with the layers that keep anything (module docstring)."""
    attention = layer_bytes(dims, configuration, behaviour, adapted)
    text = language_config(config)
    layer, kinds = mamba_layers(text), layer_kinds(text) or []
    if layer is None or not kinds:
        return dims, attention
    block = block_of(dims, configuration, behaviour, adapted)
    recomputing = checkpointed(configuration, behaviour)
    mamba = _mamba_layer(block, layer, configuration, attention, recomputing)
    grad_in = input_grads(configuration, behaviour)
    start = 0 if grad_in or "attention" not in kinds else kinds.index("attention")
    active = kinds[start:]
    kept = {
        "attention": (attention["first"], attention["other"]),
        "mamba": (mamba["kept"], mamba["kept"]),
    }
    rest = [kept[kind][1] for kind in active[1:]]
    last = kinds[-1]
    found = dict(attention)
    found["first"] = kept[active[0]][0]
    if recomputing or not rest:
        found["other"] = kept[last][1]  # only the recomputed last layer reads it
    else:
        found["other"] = sum(rest) / len(rest)  # first + (layers - 1) x other: their sum
    found["backward"] = max(attention["backward"], mamba["backward"])
    if last == "mamba":
        found["forward"], found["recomputed"] = mamba["forward"], mamba["recomputed"]
    return dataclasses.replace(dims, layers=len(active)), found


@dataclasses.dataclass(frozen=True)
class HybridPrediction:
    counts: ParameterCounts
    dims: Dimensions
    bound: MemoryBound
    prediction: PeakPrediction


def predict_hybrid(
    configuration: TrainingConfiguration, behaviour: ReleaseBehaviour
) -> HybridPrediction:
    """The bound and the predicted peak of a granitemoehybrid configuration, by formula;
    `behaviour`: the releases' for the twin's model type (the same loss and checkpointing
    code). KeyError or UnsupportedArchitecture where config.json lacks a shape."""
    config = configuration.config or {}
    counts = hybrid_counts(config, count_parameters(ModelShape.of(twin_config(config))))
    dims = twin_dimensions(config)
    bound = memory_bound(counts, configuration)
    adapted = configuration.tuning.adapted_modules
    active, layer = hybrid_layer(config, dims, configuration, behaviour, adapted)
    found = predict_peak(counts, active, configuration, bound, behaviour, adapted, layer=layer)
    notes = [*found.notes, HYBRID_NOTE]
    if outside := [name for name in adapted if name not in ATTENTION_LINEARS]:
        notes.append(
            f"LoRA on {', '.join(outside)}: their adapters' activations counted as an attention "
            "layer's adapter would be, in every layer (not checked against a trace)"
        )
    if mamba_layers(language_config(config)) is not None:
        version = configuration.fms_hf_tuning_version
        notes.append(scan_note(scan_path(version), version))
    return HybridPrediction(counts, dims, bound, dataclasses.replace(found, notes=tuple(notes)))


HYBRID_NOTE = (
    "a hybrid's memory by formula: its attention layers as GraniteMoeShared's (no rotary), its "
    "Mamba layers' mixers counted apart (plan/memory/hybrid.py)"
)
