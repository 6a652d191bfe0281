"""The predicted peak of a Granite 4.0 model (model_type granitemoehybrid: Mamba-2 layers beside
attention layers, experts in some) by formula, with no trace: pure.

Its attention layers are GraniteMoeShared's (GraniteMoE's experts and a shared MLP; with no
experts, Granite's dense MLP of the shared MLP's width), without rotary positions (Granite 4.0
uses none), so plan/memory/peak.py's formula counts them on that "twin" configuration. A Mamba
layer is the same layer with the attention replaced by a Mamba-2 mixer (plan/memory/mamba.py, on
the scan path plan/model/mamba.py decides). The layers differ, so what peak.py reads per layer is
given to it whole (`hybrid_layer`): the first layer whose input needs a gradient, the others'
mean, and, for the moments at the model's last layer, that layer's kind; where the first is a
Mamba layer, its mixer's backward and the parameters whose gradients it has not made yet (peak.py's
`last layer, mixer` moment: that layer's MLP gradients are all made by then). Under LoRA without an
input-gradient hook the Mamba layers before the first attention layer (which holds the adapters)
keep nothing: the layers peak.py counts start there.

Checked against the trace of the model's own code (benchmarks/memory_truth.py's hybrid rows,
on both scan paths).
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
    reentrant,
)
from ado_actuators.sfttrainer.plan.model.architecture import ParameterCounts
from ado_actuators.sfttrainer.plan.model.hybrid import ATTENTION_LINEARS, counted
from ado_actuators.sfttrainer.plan.model.hybrid import is_hybrid as is_hybrid
from ado_actuators.sfttrainer.plan.model.hybrid import twin_config as twin_config
from ado_actuators.sfttrainer.plan.model.mamba import (
    MambaLayers,
    ScanPath,
    layer_kinds,
    mamba_layers,
    scan_note,
    scan_path,
)
from ado_actuators.sfttrainer.plan.model.shape import language_config
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration


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
    held: bool,
) -> dict[str, float]:
    """A Mamba layer, bytes for the device's batch: what it keeps when its input needs a
    gradient (the attention layer's norms and MLP, the mixer for the attention), what its
    backward adds at the mixer (the MLP's and second norm's tensors freed by then, the
    gradient arriving and the mixer's input gradient beside it; under reentrant
    checkpointing also the layer's output gradient, an argument of the checkpoint's backward,
    and its recomputed output, both held to its end) or at the MLP, and its forward at the
    mixer or the MLP."""
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
    arriving = (2 + 2 * held) * block.residual * block.hidden
    backward = mixer.mixer_backward(layer, width, path, length) + arriving - mlp
    forward = mixer.mixer_forward(layer, width, path, length) + block.residual * block.hidden
    inputs = width * layer.projected + activations.FP32 * block.hidden  # not kept when recomputed
    return {
        "kept": kept * tokens,
        "backward": max(attention["backward"], backward * tokens),
        "mixer_backward": backward * tokens,
        "forward": max(attention["forward"], (forward + inputs * recomputing) * tokens),
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
    mamba = _mamba_layer(
        block, layer, configuration, attention, recomputing, reentrant(configuration, behaviour)
    )
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
    # peak.py adds the layers' largest transients to what every layer keeps (its moments at the
    # model's last layer); a Mamba layer's come at the last Mamba layer, where the layers after
    # it keep nothing yet (forward) or no longer (backward; under checkpointing, where they
    # keep their inputs alone, the moment at the model's first layer has the Mamba layer's)
    mambas = [i for i, kind in enumerate(kinds) if kind == "mamba"]
    after = len(kinds) - 1 - mambas[-1] if mambas else 0
    sizes = [kept[kind][i > 0] for i, kind in enumerate(active)]
    later = after * attention["input"] if recomputing else sum(sizes[len(sizes) - after :])
    found["backward"] = attention["backward"]
    if "mamba" in active:  # the Mamba layers before the first adapter have no backward
        found["backward"] = max(
            attention["backward"], mamba["backward"] - later * (not recomputing)
        )
    if active[0] == "mamba":
        found |= _first_layer_mixer(mamba, layer, text, configuration)
    if last == "mamba":
        found["forward"], found["recomputed"] = mamba["forward"], mamba["recomputed"]
    elif mambas:
        found["forward"] = max(attention["forward"], mamba["forward"] - later)
    return dataclasses.replace(dims, layers=len(active)), found


def _first_layer_mixer(
    mamba: dict[str, float],
    layer: MambaLayers,
    text: dict[str, Any],
    configuration: TrainingConfiguration,
) -> dict[str, float]:
    """The moment of a Mamba first layer's mixer backward. The model's first layer is the last
    the backward reaches, and its mixer's backward comes after its MLP's, so every gradient of
    that layer is made but the in projection's and the first norm's (and on the torch path the
    convolution's: the fused kernel returns its own weights' gradients, out_proj's among them,
    from the backward's end)."""
    path = scan_path(configuration.fms_hf_tuning_version)
    return {
        "mixer_backward": mamba["mixer_backward"],
        "mixer_pending": _pending(layer, text, path),
    }


def _pending(layer: MambaLayers, text: dict[str, Any], path: ScanPath) -> float:
    """The parameters of a Mamba layer whose gradients its mixer's backward has not made at
    its largest: the in projection's and the first norm's; on the torch path the depthwise
    convolution's too (its backward follows the scan's)."""
    proj_bias = bool(text.get("mamba_proj_bias", False))
    conv_bias = bool(text.get("mamba_conv_bias", True))
    pending = layer.hidden * layer.projected + layer.projected * proj_bias + layer.hidden
    if path == "torch":
        pending += layer.conv_dim * (layer.conv_kernel + conv_bias)
    return float(pending)


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
    counts = counted(config)
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
