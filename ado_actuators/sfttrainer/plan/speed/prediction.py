"""The predicted step time and throughput of one measurement before launch: the entity and the
model's config.json turned into plan/speed/step_time.py's shape and device; the step time reads
the training configuration itself.

Every figure here is a prediction: rows carry it as `dataset_tokens_per_second_per_gpu_predicted`
beside the measured `dataset_tokens_per_second_per_gpu`, with its parts and notes in the
`throughput_prediction` metadata (`predicted: true, measured: false`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.catalog.models import GPTQ_QUANTIZED
from ado_actuators.sfttrainer.contract.outcomes import Invalid, Measured, MeasurementOutcome
from ado_actuators.sfttrainer.contract.properties import THROUGHPUT_PREDICTED
from ado_actuators.sfttrainer.contract.units import GIB
from ado_actuators.sfttrainer.plan.model.architecture import (
    ParameterCounts,
    UnsupportedArchitecture,
    count_parameters,
)
from ado_actuators.sfttrainer.plan.model.mamba import mamba_layers, scan_note, scan_path
from ado_actuators.sfttrainer.plan.model.meta_shape import (
    MetaCounts,
    MetaCountUnavailable,
    meta_counts,
)
from ado_actuators.sfttrainer.plan.model.shape import ModelShape as ConfigShape
from ado_actuators.sfttrainer.plan.model.shape import language_config
from ado_actuators.sfttrainer.plan.model.training import (
    CHARS_PER_TOKEN,
    TrainingConfiguration,
    Tuning,
)
from ado_actuators.sfttrainer.plan.speed import vision
from ado_actuators.sfttrainer.plan.speed.devices import DEFAULT_NETWORK_GBPS, device_named
from ado_actuators.sfttrainer.plan.speed.experts import Experts, expert_note
from ado_actuators.sfttrainer.plan.speed.host import host_note
from ado_actuators.sfttrainer.plan.speed.layer_bytes import LayerKernels
from ado_actuators.sfttrainer.plan.speed.step_time import (
    REFERENCE,
    Device,
    ModelShape,
    StepParts,
    StepTime,
    gpus,
    inside_reentrant_checkpoint,
    nodes,
    step_time,
)
from ado_actuators.sfttrainer.plan.speed.validated import (
    experts_validated_note,
    validated_note,
)

PREDICTED_METADATA = "throughput_prediction"


def device_of(
    gpu_model: str | None,
    network_gbps: float = DEFAULT_NETWORK_GBPS,
    intra_node_gbps: float | None = None,
) -> Device | None:
    """What `gpu_model` achieves (metrics/gpu_peaks.yaml, through plan/speed/devices.py), with the
    cluster's network between nodes and, where stated, the node's own link; None when the table
    lacks it or its bandwidths."""
    try:
        return device_named(gpu_model, network_gbps, intra_node_gbps)
    except KeyError:
        return None


def _quantization(shape: ConfigShape, weights_format: str) -> str | None:
    stated = shape.quantization
    if stated and stated.bitsandbytes:
        return "bnb"
    if (stated and stated.method) or weights_format == GPTQ_QUANTIZED:
        return "gptq"
    return None


def _active_mlp(counts: ParameterCounts, config: ConfigShape) -> tuple[float, int]:
    """The MLP weights one token passes through, and how many experts it uses."""
    experts = config.experts
    per_token = config.experts_per_token if experts > 1 else 1
    return counts.mlp * per_token / experts, per_token


def _experts(
    config: ConfigShape, hidden: int, layers: int, per_expert: int, trainable: Tuning
) -> Experts | None:
    """A mixture of experts' shape for plan/speed/experts.py, from one expert's matmul weights
    in one layer (gated: 3 x hidden x width); None for a dense model. A family's own dispatch
    where it declares one; else experts stacked in 3-D parameters run as GraniteMoE's and
    experts of their own nn.Linear as Mixtral's loop."""
    family = config.family
    if config.experts <= 1 or per_expert <= 0:
        return None
    width = per_expert // (3 * hidden)
    stacked = family.moe == "granitemoe" if family and family.moe else None
    if stacked is None:
        stacked = config.model_type.startswith("granitemoe")
    names = family.expert_linears if family and family.expert_linears else ()
    adapted = len(set(names) & set(trainable.adapted_modules))
    return Experts(
        count=config.experts,
        per_token=min(config.experts_per_token, config.experts),
        params=per_expert,
        # gate and up fused into one input matmul, or three of their own
        io_width=2 * hidden + 3 * width if stacked else 3 * (hidden + width),
        hidden=hidden,
        layers=layers,
        dispatch="granitemoe" if stacked else "mixtral",
        adapted=adapted,
    )


META_NOTE = (
    "counted from transformers' own model on the meta device: an architecture outside the "
    "fitted data"
)


def _heads(config: ConfigShape, known: int = 0) -> int:
    """Query heads: `known` where transformers' own config gave them, else config.json's."""
    return known or config.heads or 1


def _head_dim(config: ConfigShape, hidden: int, heads: int = 0) -> int:
    return config.head_dim_given or hidden // _heads(config, heads)


def _attention_width(config: ConfigShape, hidden: int, heads: int = 0) -> int:
    return _heads(config, heads) * _head_dim(config, hidden, heads)


KEY_LINEARS = ("k_proj", "key")
FUSED_QKV = ("c_attn", "Wqkv", "qkv_proj", "query_key_value")
"""transformers' names of a separate key projection, and of one projection to queries, keys and
values together (GPTBigCode, MPT, Phi-3, GPT-NeoX)."""


def _key_width(counts: MetaCounts, query: int) -> int:
    """The keys' width, from the built model's projections: a key projection's outputs, else a
    fused projection's beyond the queries, halved (keys and values); else as the queries'."""
    for name, inputs, outputs, _ in counts.linears:
        if name in KEY_LINEARS and inputs == counts.hidden:
            return outputs
    for name, inputs, outputs, _ in counts.linears:
        if name in FUSED_QKV and inputs == counts.hidden and outputs > query:
            return (outputs - query) // 2
    return query


def _down_inputs(counts: MetaCounts) -> int | None:
    """The widest down projection's inputs (the MLP's inner width); None where none shows
    (experts, odd layouts)."""
    downs = [i for _, i, o, _ in counts.linears if o == counts.hidden and i > counts.hidden]
    return max(downs) if downs else None


def _gated(counts: MetaCounts, mlp_per_layer: float) -> bool:
    """Whether the MLP has a gate beside its up projection: its up projections twice the down
    projection's inputs (as _activated_width reads them); gated where no down projection shows."""
    inner = _down_inputs(counts)
    return inner is None or mlp_per_layer / counts.hidden - inner > 1.5 * inner


def _activated_width(counts: MetaCounts, mlp_per_layer: float) -> int:
    """The hidden width plus the MLP's widths a token activates, from the MLP's weights per
    layer: a down projection of `inner` inputs leaves `weights / hidden - inner` for the up
    projections (2 x inner gated, 1 x inner for a 2-matrix MLP such as MPT's). Where no down
    projection shows (experts, odd layouts), a gated MLP is assumed."""
    hidden, inner = counts.hidden, _down_inputs(counts)
    if inner is None:
        return int(hidden + 2 / 3 * mlp_per_layer / hidden)
    return int(hidden + max(mlp_per_layer / hidden - inner, 0))


def _meta_shape(
    counts: MetaCounts, config: ConfigShape, trainable: Tuning, quantization: str | None
) -> ModelShape:
    """The step time's shape of a model transformers built on the meta device."""
    per_layer = (counts.active_matmul - counts.attention_linear - counts.lm_head) / counts.layers
    wanted = set(trainable.target_modules)
    adapted = [(i, o, c) for name, i, o, c in counts.linears if name in wanted]
    lora = trainable.method == "lora"
    trained = trainable.count_of(counts.linears, counts.hidden, counts.total)
    return ModelShape(
        layers=counts.layers,
        attention_width=_attention_width(config, counts.hidden, counts.heads),
        activated_width=_activated_width(counts, per_layer),
        matmul_params=int(counts.active_matmul),
        total_params=counts.total,
        trainable_params=trained,
        quantization=quantization,
        quantized_params=counts.linear - counts.lm_head if quantization else 0,
        adapted_width=sum((i + o) * c for i, o, c in adapted) if lora else 0,
        adapters_per_layer=sum(c for *_, c in adapted) // counts.layers if lora else 0,
        attention_layers=counts.attention_layers,
        head_dim=_head_dim(config, counts.hidden, counts.heads),
        hidden=counts.hidden,
        experts=_meta_experts(counts, config, trainable),
        layer_kernels=LayerKernels(
            rms_norm=counts.rms_norm,
            rotary=counts.rotary,
            gated_mlp=_gated(counts, per_layer),
        ),
        key_width=_key_width(counts, _attention_width(config, counts.hidden, counts.heads)),
    )


def _meta_experts(counts: MetaCounts, config: ConfigShape, trainable: Tuning) -> Experts | None:
    """The experts of a model transformers built on the meta device: one expert's weights in
    one layer from all of them; its dispatch from how they are stored."""
    if config.experts <= 1 or not counts.experts:
        return None
    per_expert = counts.experts // (config.experts * counts.layers)
    found = _experts(config, counts.hidden, counts.layers, per_expert, trainable)
    if found is None:
        return None
    stacked = counts.stacked_experts or config.model_type.startswith("granitemoe")
    return dataclasses.replace(found, dispatch="granitemoe" if stacked else "mixtral")


def model_shape(
    config: dict[str, Any],
    trainable: Tuning,
    weights_format: str,
    read: ConfigShape | None = None,
) -> ModelShape:
    """From plan/model/architecture.py's counts, or, for an architecture it does not count, from
    transformers' model on the meta device (plan/model/meta_shape.py); `read` is config.json's
    shape where the caller holds it already. Raises UnsupportedArchitecture,
    MetaCountUnavailable (or KeyError/TypeError) where neither can."""
    shape = read or ConfigShape.of(config)
    quantization = _quantization(shape, weights_format)
    try:
        counts = count_parameters(shape)
    except UnsupportedArchitecture:
        counted = _meta_shape(meta_counts(config), shape, trainable, quantization)
        return dataclasses.replace(counted, mamba=mamba_layers(language_config(config)))
    if shape.quantized_bits is None and quantization is None:
        quantized = 0
    else:
        quantized = counts.quantizable
    mlp, per_token = _active_mlp(counts, shape)
    layers = shape.needed("layers")
    family = shape.family
    gated = bool(family and family.gated_mlp)
    intermediate = shape.intermediate
    adapted = [s for s in counts.linears if s.name in set(trainable.target_modules)]
    lora = trainable.method == "lora"
    # a token passes through the adapters of its own experts only
    routed = family.expert_linears or () if family else ()
    share = dict.fromkeys(routed, per_token / shape.experts)
    return ModelShape(
        layers=layers,
        attention_width=_attention_width(shape, counts.hidden_size),
        activated_width=counts.hidden_size + intermediate * (2 if gated else 1) * per_token,
        matmul_params=int(counts.attention + mlp + (counts.lm_head or counts.embedding)),
        total_params=counts.total,
        trainable_params=trainable.count(counts),
        quantized_params=quantized,
        quantization=quantization if quantized else None,
        adapted_width=(
            int(sum((s.inputs + s.outputs) * s.count * share.get(s.name, 1.0) for s in adapted))
            if lora
            else 0
        ),
        adapters_per_layer=sum(s.count for s in adapted) // layers if lora else 0,
        head_dim=_head_dim(shape, counts.hidden_size),
        hidden=counts.hidden_size,
        experts=_experts(
            shape, counts.hidden_size, layers, 3 * counts.hidden_size * intermediate, trainable
        ),
        layer_kernels=LayerKernels(
            rms_norm=bool(family and family.rms_norm),
            rotary=bool(family and family.rotary),
            gated_mlp=gated,
        ),
        key_width=shape.kv_width,
    )


@dataclasses.dataclass(frozen=True)
class SpeedPrediction:
    step: StepTime | None = None
    skipped: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def tokens_per_second_per_gpu(self) -> float | None:
        return self.step.tokens_per_second_per_gpu if self.step else None

    @property
    def step_seconds(self) -> float | None:
        return self.step.seconds if self.step else None

    @property
    def attention_share(self) -> float | None:
        return self.step.attention_share if self.step else None

    @property
    def step_parts(self) -> StepParts | None:
        """The step split into compute and the collectives within the node (a calibration
        corrects each apart: space/calibration.py)."""
        return self.step.step_parts if self.step else None

    def metadata(self) -> dict[str, Any]:
        if self.step is None:
            return {"predicted": False, "skipped": self.skipped}
        return {
            "predicted": True,
            "measured": False,
            "tokens_per_second_per_gpu": round(self.step.tokens_per_second_per_gpu, 1),
            **self.step.as_metadata(),
            "notes": list(self.notes),
        }

    def properties(self) -> dict[str, float]:
        if self.step is None:
            return {}
        return {THROUGHPUT_PREDICTED: round(self.step.tokens_per_second_per_gpu, 1)}

    def attach_to(self, outcome: MeasurementOutcome) -> MeasurementOutcome:
        if isinstance(outcome, (Measured, Invalid)):
            outcome.metadata[PREDICTED_METADATA] = self.metadata()
            outcome.properties.update(self.properties())
        return outcome


def _notes(
    configuration: TrainingConfiguration, device: Device, experts: Experts | None
) -> tuple[str, ...]:
    notes = [validated_note(configuration, device.name, experts)]
    if device.name != REFERENCE.name:
        notes.append(
            f"{device.name}: priced by what it achieves (cuBLAS {device.gemm_tflops:g} TFLOP/s, "
            f"the attention kernels' published rates, {device.memory_gbps:g} GB/s; "
            f"metrics/gpu_peaks.yaml cites each), the framework's constants fitted on "
            f"{REFERENCE.name} runs"
        )
    if nodes(configuration) > 1:
        notes.append(
            f"{nodes(configuration)} nodes: the network moves {device.network_gbps:g} GB/s per "
            f"node (actuator parameter inter_node_gbps)"
        )
    elif gpus(configuration) > 1 and (busbw := device.achieved_bus_gbps(gpus(configuration))):
        notes.append(
            f"{gpus(configuration)} GPUs of one node: NCCL's collectives at {busbw:g} GB/s of bus "
            f"bandwidth ({device.link_kind}; metrics/gpu_peaks.yaml's link, or the actuator "
            f"parameter intra_node_gbps)"
        )
    tokens = configuration.batch.sample_tokens
    if tokens < configuration.batch.model_max_length:
        notes.append(
            f"samples of about {tokens} tokens ({configuration.dataset_id}, "
            f"{CHARS_PER_TOKEN} characters a token)"
        )
    backend = configuration.parallelism.backend
    if gpus(configuration) > 1 and backend != "FSDP":
        notes.append(f"{backend} over {gpus(configuration)} GPUs: not in the fitted data")
    if inside_reentrant_checkpoint(configuration):
        notes.append(reentrant_note(configuration))
    return tuple(notes)


def reentrant_note(configuration: TrainingConfiguration) -> str:
    """Why a row under FSDP and reentrant checkpointing waits on its collectives, and the fix
    (plan/speed/step_time.inside_reentrant_checkpoint)."""
    return (
        f"reentrant checkpointing under FSDP: fms-hf-tuning "
        f"{configuration.fms_hf_tuning_version or 'this version'}'s transformers checkpoints each "
        f"layer from the model's forward, so FSDP gathers each layer's weights twice in the "
        f"backward and fetches none ahead, priced as waiting for a gather of each layer and the "
        f"gradients' reduce-scatter once a step. gradient_checkpointing_use_reentrant false lets "
        f"FSDP fetch them while the layer before computes"
    )


def predict_speed(
    configuration: TrainingConfiguration,
    network_gbps: float = DEFAULT_NETWORK_GBPS,
    intra_node_gbps: float | None = None,
    paged_out_bytes: float = 0.0,
    memory_share: float | None = None,
) -> SpeedPrediction:
    """The step time of `configuration` (plan/speed/step_time.py); `paged_out_bytes`: a paged
    optimizer's state per device the memory verdict finds no room for, moved every step;
    `memory_share`: the verdict's predicted need over what the device can allocate."""
    if configuration.parallelism.gpus < 1:
        return SpeedPrediction(skipped="number_gpus 0 trains on CPUs: no GPU to predict")
    if configuration.config is None:
        return SpeedPrediction(skipped=str(configuration.config_problem))
    device = device_of(configuration.parallelism.gpu_model, network_gbps, intra_node_gbps)
    if device is None:
        return SpeedPrediction(
            skipped=f"gpu_model {configuration.parallelism.gpu_model!r} has no peak, bandwidth and "
            f"interconnect in metrics/gpu_peaks.yaml"
        )
    try:
        shape = model_shape(
            configuration.config,
            configuration.tuning,
            configuration.weights_format,
            configuration.shape,
        )
    except (
        UnsupportedArchitecture,
        MetaCountUnavailable,
        KeyError,
        TypeError,
        ValueError,
    ) as error:
        return SpeedPrediction(skipped=f"no step time from the model's config.json: {error}")
    notes = _notes(configuration, device, shape.experts) + (
        (META_NOTE,) if shape.attention_layers is not None else ()
    )
    if shape.mamba is not None:
        version = configuration.fms_hf_tuning_version
        notes += (scan_note(scan_path(version), version),)
    if shape.experts is not None:
        notes += (
            expert_note(shape.experts, configuration),
            experts_validated_note(shape.experts, configuration),
        )
    if paged_out_bytes > 0:
        notes += (paging_note(paged_out_bytes, device),)
    if pressure := pressure_note(configuration, memory_share):
        notes += (pressure,)
    if vision_note := vision.note(configuration):
        notes += (vision_note,)
        shape = dataclasses.replace(shape, vision_flops=vision.flops_per_sample(configuration))
    step = step_time(shape, configuration, device, paged_out_bytes=paged_out_bytes)
    if host := host_note(step.parts["host"] / step.seconds):
        notes += (host,)
    return SpeedPrediction(step=step, notes=notes)


NEAR_DEVICE_MEMORY = 0.9
"""The share of what a device can allocate from which an FSDP run's prediction says it is near
the device's memory. fms-acceleration's A100 runs (benchmarks/data/fms_acceleration_a100_80gb.csv):
the three FSDP full fine-tuning runs that ran at 94 % of it (Llama-3-8B, 2 GPUs) all reserved up
to the device and ran 12-35 % slower than predicted; at 81-85 %, two of five did; one GPU at
94 %, none."""


def pressure_note(configuration: TrainingConfiguration, memory_share: float | None) -> str:
    """Why an FSDP run predicted near the device's memory may run slower than predicted; empty
    elsewhere. Not priced: when the allocator's reservation reaches the device depends on its
    fragmentation, which nothing here predicts."""
    sharded = configuration.parallelism.sharded
    if not sharded or memory_share is None or not NEAR_DEVICE_MEMORY <= memory_share <= 1:
        return ""  # beyond 1 the verdict says OOM
    return (
        f"near the device's memory ({100 * memory_share:.0f} % of what it can allocate, "
        f"predicted): "
        f"under FSDP the caching allocator may reserve up to the device and flush and retry "
        f"every step, which this prediction does not price; fms-acceleration's FSDP runs whose "
        f"reservation reached an A100's memory ran 12-44 % slower than predicted (the fit's "
        f"two largest errors among them), their twins below it within 4 %"
    )


def paging_note(paged_out_bytes: float, device: Device) -> str:
    return (
        f"paged optimizer: its {paged_out_bytes / GIB:.2f} GiB of state per device does not fit "
        f"beside the step's peak, priced as paged in and out every step over PCIe "
        f"Gen{device.pcie_gen} at {device.host_link_gbps:g} GB/s each way (the fastest a copy "
        f"goes; demand paging can be far slower)"
    )
