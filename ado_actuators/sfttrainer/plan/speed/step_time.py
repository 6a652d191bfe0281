"""The predicted time of one optimizer step, and so the throughput, of one configuration: pure
arithmetic on the model's shape, the training configuration (plan/model/training.py, read part by
part) and the device.

A step is `gradient_accumulation_steps` micro-batches and one optimizer update. Each part of a
micro-batch is priced by what limits it, on one device:

- gemm: the matmuls' hardware FLOPs (not model FLOPs): 2 per weight a token passes through, for
  the forward, again for the backward's input gradients (frozen layers too), again for the
  forward recomputed under gradient checkpointing, plus 2 per trainable weight for the weight
  gradients (none for LoRA's frozen weights or prompt tuning's; of experts, a token's own
  experts' only). Over the dense bf16 rate cuBLAS achieves on the device (metrics/gpu_peaks.yaml,
  `gemm_tflops`, each figure cited), times
  `matmul_efficiency`, the framework's share of it (fitted);
- attention: QK^T and AV, 4 x width x length FLOPs per layer and token forward (causal: the
  masked half skipped), the backward 2.5 times that, the recompute once more. Each pass at the
  rate the attention kernel's own published benchmark reached on the device, for the model's
  head dimension and the sequence length (`attention` curves in metrics/gpu_peaks.yaml);
- elementwise: the memory-bound kernels (norms, activations, residual adds, rotary), bytes per
  token per layer in proportion to the hidden and activated MLP widths, once per pass, over the
  device's memory bandwidth; the share of them re-read from a tensor still in the L2 cache is
  served at L2 speed (where a layer's hidden-width activations fit in half of it); fast
  kernels cut the share the RMSNorms and rotary embedding move. Only the bytes the kernels were
  counted to move follow the device's bandwidth and the architecture's own kernels
  (plan/speed/layer_bytes.py: LayerNorm or RMSNorm, rotary or not, gated MLP or plain); what
  the A100 fit charged beyond them keeps the reference device's time (`_memory_seconds`, with
  the evidence);
- adapters: LoRA's dropout, small matmuls and adds, in proportion to the adapted widths (the
  same split);
- dequantization: quantized base weights unpacked once per pass and micro-batch (the same split);
- experts: a mixture of experts' loop as the pinned transformers runs it, each expert's matmuls
  at its few rows, the router, gathers and scatters and each op's host time, beyond the active
  experts' FLOPs the gemm part counts (plan/speed/experts.py; none under ScatterMoE);
- host: the eager ops each layer dispatches per micro-batch, at the published host cost of one
  (plan/speed/host.py, counted from the release, not fitted), queued ahead of the device: the
  longer of the host's and the device's time per micro-batch sets the pace, and a fitted share
  of the shorter is added (`exposed_host`); under FSDP a fitted cost per wrapped unit;
- FSDP traffic: the weights all-gathered for the forward and again for the backward, the
  trainable gradients reduce-scattered. FSDP prefetches the next unit's weights while the current
  one computes, so only what the compute cannot hide is exposed, plus the first unit's gather,
  phase by phase: the forward's gathers beside the forward's compute alone (the backward comes
  after them), the backward's gathers and the reduce-scatters beside the backward's.
  Where the forward syncs (transformers' expert loops), the host issues each forward gather only
  once the GPU has caught up: only what is still queued hides it (experts.forward_tail_seconds).
  Within a node at the bus bandwidth nccl-tests publish for the device's link and GPU count
  (PCIe through the root complex or host memory; `link` in metrics/gpu_peaks.yaml), else
  its NVLink at the share NCCL reaches of it; across nodes
  over the cluster's network, one number per node (`Device.network_gbps`, the actuator
  parameter `inter_node_gbps`), taken as it is: nothing scales it again.

Per step: the gradients are clipped and the optimizer steps, each pass of their kernels over the
trainable weights on the device at its memory bandwidth (`update_bytes`); each micro-batch after
the first adds its gradients into those held, whole even under FSDP (ACCUMULATE_PASSES); DDP
all-reduces the trainable gradients once, overlapped with the last backward as its buckets are,
and FSDP reduces them once too (the Trainer's no_sync; `_fsdp_traffic`).
A paged optimizer whose state the device cannot hold beside the step's peak pages all of it in
and out every step over the GPU's PCIe link (`paging`; devices.HOST_LINK_GBPS; the verdict's
MemoryAssessment.paged_out_bytes says why all of it); where it fits, nothing moves and it costs
what the same optimizer unpaged does.

The fitted constants are the fields of `Fitted`; FITTED holds the values fitted on
fms-acceleration's A100-80GB runs by `benchmarks/throughput_prediction.py`. What the device can
do is not fitted: it is read from the device's cited measurements, so another device changes
only those (the validation on other devices and frameworks: benchmarks/throughput_validation.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from ado_actuators.sfttrainer.contract.memory_trace import Attention
from ado_actuators.sfttrainer.plan.model.mamba import MambaLayers
from ado_actuators.sfttrainer.plan.model.optimizers import optimizer_state
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration
from ado_actuators.sfttrainer.plan.speed.devices import (
    DEFAULT_NETWORK_GBPS,
    REFERENCE_NAME,
    AttentionCurve,
    Device,
    device_named,
)
from ado_actuators.sfttrainer.plan.speed.experts import (
    Experts,
    expert_seconds,
    experts_train,
    forward_tail_seconds,
)
from ado_actuators.sfttrainer.plan.speed.host import host_seconds
from ado_actuators.sfttrainer.plan.speed.layer_bytes import (
    LLAMA,
    ElementwiseScale,
    LayerKernels,
    LayerWidths,
    elementwise_scale,
)
from ado_actuators.sfttrainer.plan.speed.mamba import mamba_parts
from ado_actuators.sfttrainer.plan.speed.parts import LinkTraffic, StepParts, exposed

__all__ = [
    "ATTENTION_KERNELS",
    "CLIP_PASSES",
    "DEFAULT_NETWORK_GBPS",
    "FITTED",
    "REFERENCE",
    "AttentionCurve",
    "Device",
    "Fitted",
    "ModelShape",
    "StepParts",
    "StepTime",
    "attention_kernel",
    "attention_seconds_per_token",
    "exposed",
    "fused_attention",
    "gpus",
    "hardware_flops_per_token",
    "inside_reentrant_checkpoint",
    "micro_batches",
    "nodes",
    "step_time",
    "tokens_per_micro_batch",
    "weight_bytes",
]


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """What of a model the step time depends on (plan/speed/prediction.py reads it from
    config.json through plan/model/architecture.py)."""

    layers: int
    attention_width: int  # query heads x head dimension
    activated_width: int  # hidden + the MLP width a token activates (x2 when gated)
    matmul_params: int  # matmul weights one token passes through (active experts only)
    total_params: int
    trainable_params: int  # weights whose gradients are computed, reduced and stepped
    quantized_params: int = 0
    quantization: str | None = None  # "gptq" | "bnb" | None
    adapted_width: int = 0  # LoRA: sum over adapted linears of inputs + outputs, whole model
    adapters_per_layer: int = 0
    experts: Experts | None = None  # a mixture of experts' (plan/speed/experts.py)
    attention_layers: int | None = None  # None: every layer (hybrids have fewer)
    head_dim: int = 128  # the attention kernel's speed depends on it
    hidden: int = 0  # the residual stream's width (0: unknown, no L2 reuse is counted)
    mamba: MambaLayers | None = None  # a hybrid's Mamba-2 layers (plan/speed/mamba.py)
    vision_flops: float = 0.0  # a sample's image through the vision tower, every pass (vision.py)
    layer_kernels: LayerKernels = LLAMA  # its norms, positions and MLP (plan/speed/layer_bytes.py)
    key_width: int = 0  # key heads x head dimension (0: as the queries')

    @property
    def elementwise(self) -> ElementwiseScale:
        """Its layer's memory-bound bytes against the fitted Llama layer's (layer_bytes.py)."""
        widths = LayerWidths(
            hidden=self.hidden,
            query=self.attention_width,
            key=self.key_width or self.attention_width,
            activated=self.activated_width,
        )
        return elementwise_scale(self.layer_kernels, widths)


ATTENTION_KERNELS: dict[Attention, str] = {
    "flash_attention_2": "fa2",
    "sdpa": "sdpa",
    "eager": "eager",
}
"""The kernel whose measured rate (metrics/gpu_peaks.yaml's curves) prices each attention
transformers runs (contract/memory_trace.Attention). The table's flash-attention 3 curves only
size the calibration's attention kernel factor (space/calibration.ATTENTION_KERNEL_SD): a
configuration cannot ask for it (--use_flash_attn is flash-attn 2) and no public run the
benchmarks price used it, so the step time needs no way to say it."""


def attention_kernel(configuration: TrainingConfiguration) -> str:
    """The attention kernel that runs, in metrics/gpu_peaks.yaml's words: flash attention's
    Triton port where a run used it (devices.KERNEL_SHARE prices it against flash-attn 2)."""
    kernels = configuration.kernels
    if kernels.attention == "flash_attention_2" and kernels.flash_build == "triton":
        return "triton"
    return ATTENTION_KERNELS[kernels.attention]


def fused_attention(configuration: TrainingConfiguration) -> bool:
    """A fused kernel (SDPA's or flash-attn's): the causal mask's upper half is skipped and the
    scores never reach memory; eager attention computes and stores them all."""
    return configuration.kernels.attention != "eager"


def weight_bytes(configuration: TrainingConfiguration) -> float:
    """Bytes per weight in the training dtype (2 for a dtype the table lacks)."""
    return float(configuration.precision.weight_bytes)


# The step divides by the devices, the nodes and the micro-batches: a configuration that states
# none of one (0 GPUs trains on the CPU, which predict_speed skips) is priced as one.
def gpus(configuration: TrainingConfiguration) -> int:
    return max(1, configuration.parallelism.gpus)


def nodes(configuration: TrainingConfiguration) -> int:
    return max(1, configuration.parallelism.nodes)


def micro_batches(configuration: TrainingConfiguration) -> int:
    """Micro-batches per optimizer step: the gradient accumulation steps."""
    return max(1, configuration.batch.gradient_accumulation_steps)


def tokens_per_micro_batch(configuration: TrainingConfiguration) -> int:
    """The sample tokens one micro-batch trains on a device: what the throughput counts."""
    return configuration.batch.per_device_batch * configuration.batch.sample_tokens


REFERENCE = device_named(REFERENCE_NAME)
"""The device of fms-acceleration's runs, which the constants were fitted on (its figures and
their citations: metrics/gpu_peaks.yaml)."""
CLIP_PASSES = 3
"""transformers' Trainer clips the gradients at max_grad_norm 1.0 by default, every step: torch's
clip_grad_norm_ reads each gradient for its norm (_foreach_norm) and reads and writes it to scale
it (_foreach_mul_)."""
ACCUMULATE_PASSES = 3
"""Gradient accumulation: autograd's AccumulateGrad adds each micro-batch's weight gradient into
the one held (`grad += new`: two reads, one write), from the second micro-batch of a step on.
Under FSDP too it adds the whole gradient, not a shard: the Trainer runs those micro-batches
under no_sync, which keeps the gradients unsharded until the step's last backward."""
NCCL_LINK_SHARE = 200 / 600
"""Share of the GPU-to-GPU link, as the datasheet quotes it (both directions), NCCL's collectives
reach within a node: about 200 GB/s of bus bandwidth on eight A100s' 600 GB/s NVLink (NVIDIA/
nccl-tests issue 149)."""
BACKWARD_SHARE = 2 / 3
"""The backward's share of a step's compute (twice the forward's matmuls): what a gradient
all-reduce, launched as the backward produces gradients, can overlap."""
L2_REREAD_SHARE = 0.5
"""Of the memory-bound kernels' bytes, the share that re-reads a hidden-width tensor the kernel
before wrote (a residual add's output read by the next norm, a norm's by the next op): served
from L2 where the tensor fits. Half: each such tensor is written once and read once."""
L2_SPEEDUP = 3.0
"""L2 bandwidth over memory bandwidth on the devices whose L2 holds a layer's activations (about
7 TB/s of L2 on an A100 against 2 TB/s of HBM; NVIDIA's Ampere and Ada tuning guides)."""
COUNTED_ELEMENTWISE_BYTES = 30.0
"""Bytes per token, layer, pass and unit of activated width the memory-bound kernels of a
Llama-style layer in bf16 move, counted kernel by kernel: per token forward, two RMSNorms as
transformers runs them (to fp32, square, mean, scale, to bf16, weight: about 36 bytes per hidden
element each), rotary embedding on the queries and keys (about 20 per element), two residual
adds (6 each), the attention layout copies (about 16), the SwiGLU (10 per MLP element): about
21-25 bytes per unit of activated width (Mistral-7B, Llama-2-7B); the backward about twice that;
the recompute once more. Averaged over the three passes: about 30 of the fitted 57.0. Only these
are bytes over bandwidth (`_memory_seconds`), and only these follow another architecture's
kernels (plan/speed/layer_bytes.py)."""
COUNTED_ADAPTER_BYTES = 9.5
"""The same count for LoRA's adapters per unit of adapted width (inputs + outputs): the input
read again for A, B's output written, scaled and added to the base output (about 7 bytes forward,
twice that backward, once more recomputed): about 9.5 a pass of the fitted 14.9."""
COUNTED_DEQUANT_BYTES = 2.5
"""The same count for unpacking a 4-bit weight: half a byte read, 2 bytes of bf16 written (the
matmul's read of them is the GEMM's): 2.5 of the fitted 6.52 (GPTQ) and 10.1 (bitsandbytes)."""


@dataclasses.dataclass(frozen=True)
class Fitted:
    """The step time's fitted constants: what the framework adds to what the device can do
    (benchmarks/throughput_prediction.py fits and judges them on fms-acceleration's A100 runs)."""

    matmul_efficiency: float = 1.0
    """Share of the device's achieved cuBLAS rate the training's matmuls reach."""
    elementwise_bytes: float = 59.3
    """Bytes moved per token, layer, pass and unit of activated width by a Llama layer's
    memory-bound kernels (another architecture's: plan/speed/layer_bytes.py)."""
    fast_kernels_elementwise: float = 0.151
    """Share of the RMSNorms' and rotary embedding's elementwise bytes (and of the fit's excess
    in their proportion) left with fms-acceleration's fused kernels (plan/speed/layer_bytes.py
    says which share of a layer's bytes they are)."""
    adapter_bytes: float = 13.9
    """Bytes moved per token, pass and unit of adapted width by LoRA's adapters."""
    fused_lora_adapters: float = 1.46e-11
    """Share of the adapters' bytes left with the fused LoRA kernels."""
    dequant_bytes_gptq: float = 5.63
    """Bytes per quantized weight, pass and micro-batch to unpack GPTQ weights."""
    dequant_bytes_bnb: float = 9.79
    """The same for bitsandbytes' 4-bit weights."""
    fsdp_unit_latency_s: float = 1.74e-3
    """Host time per FSDP unit and micro-batch on more than one device."""
    host_exposed: float = 0.637
    """Share of the lesser of a micro-batch's host dispatch and its device work that the other
    does not hide (`exposed_host`). Fitted on the runs without bitsandbytes, whose 4-bit linears
    dispatch host ops the count does not hold (benchmarks/throughput_prediction.py)."""


FITTED = Fitted()
"""Fitted on all 244 packed runs of fms-acceleration's A100 tables (benchmarks/
throughput_prediction.py; the host's exposed share on the 159 without bitsandbytes), with the
GEMMs at the A100's achieved rate and attention at flash-attention 2's, the host's ops counted
(plan/speed/host.py), not fitted, and each architecture's memory-bound kernels counted
(plan/speed/layer_bytes.py). Each family predicted with the constants fitted on the others:
median |error| 3.1 %, 90th percentile 10.2 %, Spearman 0.974 over the 244 runs."""


@dataclasses.dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step on one device, by part, and the tokens it trains there."""

    parts: dict[str, float]
    tokens_per_gpu: int
    device: str
    scaled_from: str | None  # the reference device, when the device is another one
    link: LinkTraffic | None = None  # the collectives within one node (None: none)

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    @property
    def step_parts(self) -> StepParts:
        """The step split into compute and the collectives within the node (parts.py): what a
        calibration corrects apart."""
        comm = self.link.exposed_seconds() if self.link else 0.0
        return StepParts(self.seconds - comm, self.link)

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.tokens_per_gpu / self.seconds

    @property
    def attention_share(self) -> float:
        """The share of the step in the attention kernel: how much a faster or slower kernel
        than the one priced moves the whole step."""
        return self.parts.get("attention", 0.0) / self.seconds

    def as_metadata(self) -> dict[str, Any]:
        return {
            "step_seconds": round(self.seconds, 4),
            "parts_seconds": {k: round(v, 5) for k, v in self.parts.items()},
            "tokens_per_step_per_gpu": self.tokens_per_gpu,
            "device": self.device,
            "scaled_from": self.scaled_from,
        }


def _passes(configuration: TrainingConfiguration) -> int:
    # forward, (recompute,) input gradients
    return 3 if configuration.kernels.gradient_checkpointing else 2


def _forward_share(configuration: TrainingConfiguration) -> float:
    """The first forward's share of a micro-batch's compute: one of its passes, and of the
    weight gradients' pass where the model's weights train."""
    return 1 / (_passes(configuration) + (0 if configuration.tuning.base_frozen else 1))


def dense_flops_per_token(shape: ModelShape, configuration: TrainingConfiguration) -> float:
    """Matmul FLOPs of one token's forward, backward and recompute."""
    frozen = configuration.tuning.base_frozen
    weight_gradients = 0 if frozen else shape.trainable_params
    if shape.experts and experts_train(configuration):
        # each token's rows reach the weight gradients of its own experts only
        weight_gradients -= shape.experts.inactive_params()
    return 2 * _passes(configuration) * shape.matmul_params + 2 * weight_gradients


def attention_forward_flops(shape: ModelShape, configuration: TrainingConfiguration) -> float:
    """QK^T and AV of one token's forward, all layers: causal flash attention skips the masked
    half, eager attention computes it."""
    layers = shape.layers if shape.attention_layers is None else shape.attention_layers
    flops = 4 * layers * shape.attention_width * configuration.sequence_tokens
    return flops / 2 if fused_attention(configuration) else flops


def hardware_flops_per_token(shape: ModelShape, configuration: TrainingConfiguration) -> float:
    """Matmul and attention FLOPs of one token's forward, backward and recompute."""
    recompute = 1 if configuration.kernels.gradient_checkpointing else 0
    attention = attention_forward_flops(shape, configuration) * (1 + 2.5 + recompute)
    return dense_flops_per_token(shape, configuration) + attention


def attention_seconds_per_token(
    shape: ModelShape, configuration: TrainingConfiguration, device: Device
) -> float:
    """Attention's forward (and recompute) at the kernel's forward rate, its backward (2.5 times
    the forward's FLOPs) at its backward rate, for the head dimension and length."""
    kernel = attention_kernel(configuration)
    causal = fused_attention(configuration)
    length, head = configuration.sequence_tokens, shape.head_dim
    forward = device.attention_tflops(kernel, head, length, causal, "forward") * 1e12
    backward = device.attention_tflops(kernel, head, length, causal, "backward") * 1e12
    flops = attention_forward_flops(shape, configuration)
    recompute = 1 if configuration.kernels.gradient_checkpointing else 0
    return flops * (1 + recompute) / forward + 2.5 * flops / backward


def _elementwise_bandwidth(
    shape: ModelShape, configuration: TrainingConfiguration, device: Device
) -> float:
    """Bytes per second of the memory-bound kernels: memory bandwidth, with the re-read share
    served from L2 where a layer's hidden-width activations fit in half of it."""
    memory = device.memory_gbps * 1e9
    tensor = configuration.positions_per_micro_batch * shape.hidden * weight_bytes(configuration)
    if not shape.hidden or not device.l2_mb:
        return memory
    held = min(1.0, device.l2_mb * 1e6 / 2 / tensor)
    hidden_share = shape.hidden / max(shape.activated_width, shape.hidden)
    cached = L2_REREAD_SHARE * hidden_share * held
    return memory / (1 - cached + cached / L2_SPEEDUP)


def _memory_seconds(
    moved: float, counted: float, per_unit: float, rates: tuple[float, float]
) -> float:
    """Seconds of a memory-bound part fitted at `per_unit` bytes a unit, of which kernels were
    counted to move `counted`: those at the device's bandwidth, the fit's excess at the
    reference device's (`rates`: the device's and the reference's bytes per second).

    The excess is time the A100 fit charged to these kernels beyond the bytes they move (launch
    gaps, small and partial waves, fp32 reductions), which one device cannot tell from bandwidth.
    Scaled by another device's bandwidth it made the L40 (0.42 of the A100's bandwidth, 0.67 of
    its GEMM rate) 0.58 of the A100's speed on Mistral-7B LoRA where fms-acceleration measured
    0.76 at one commit (2,724 against 3,598 tokens/s, 8af8fa7 and f1895b7), a ratio no mix of
    those two gives; the H100 (1.64 and 2.93) about a fifth faster than the FSDP blog measured.
    So the excess keeps the reference's time on every device. On the reference, nothing changes.
    """
    share = min(1.0, counted / per_unit) if per_unit > 0 else 1.0
    device, reference = rates
    return moved * (share / device + (1 - share) / reference)


def _micro_batch(
    shape: ModelShape, configuration: TrainingConfiguration, device: Device, fitted: Fitted
) -> dict[str, float]:
    tokens = configuration.positions_per_micro_batch
    passes = _passes(configuration)
    memory = (device.memory_gbps * 1e9, REFERENCE.memory_gbps * 1e9)
    cached = (
        _elementwise_bandwidth(shape, configuration, device),
        _elementwise_bandwidth(shape, configuration, REFERENCE),
    )
    dequant = {"gptq": fitted.dequant_bytes_gptq, "bnb": fitted.dequant_bytes_bnb}.get(
        shape.quantization or "", 0.0
    )
    fused_lora = fitted.fused_lora_adapters if configuration.tuning.fused_lora else 1.0
    adapters = fitted.adapter_bytes * fused_lora
    gemm_rate = device.gemm_tflops * 1e12 * fitted.matmul_efficiency
    width_tokens = shape.layers * shape.activated_width * passes * tokens
    return {
        "gemm": dense_flops_per_token(shape, configuration) * tokens / gemm_rate,
        "attention": attention_seconds_per_token(shape, configuration, device) * tokens,
        "elementwise": _elementwise_seconds(shape, configuration, fitted, width_tokens, cached),
        "adapters": _memory_seconds(
            adapters * shape.adapted_width * passes * tokens,
            COUNTED_ADAPTER_BYTES,
            fitted.adapter_bytes,
            memory,
        ),
        "dequantization": _memory_seconds(
            dequant * shape.quantized_params * passes, COUNTED_DEQUANT_BYTES, dequant, memory
        ),
        "host": host_seconds(shape.layers, configuration, shape.adapters_per_layer),
        **mamba_parts(shape.mamba, configuration, device),
        **_vision(shape, configuration, gemm_rate),
    }


def _elementwise_seconds(
    shape: ModelShape,
    configuration: TrainingConfiguration,
    fitted: Fitted,
    width_tokens: float,
    rates: tuple[float, float],
) -> float:
    """The memory-bound kernels: the bytes counted for the layer's own kernels (a Llama layer's
    scaled by plan/speed/layer_bytes.py's count of this architecture's), and what the fit charged
    beyond the Llama layer's count, which no count describes, as fitted. fms-acceleration's fused
    kernels cut the share of them the layer's RMSNorms and rotary embedding move."""
    scale = shape.elementwise
    counted = min(COUNTED_ELEMENTWISE_BYTES, fitted.elementwise_bytes)
    own = counted * scale.bytes
    per_unit = fitted.elementwise_bytes - counted + own
    fast = configuration.kernels.fast_kernels.any
    fused = scale.fast_kernels(fitted.fast_kernels_elementwise) if fast else 1.0
    return _memory_seconds(per_unit * fused * width_tokens, own, per_unit, rates)


def _vision(
    shape: ModelShape, configuration: TrainingConfiguration, gemm_rate: float
) -> dict[str, float]:
    """The vision tower's and projector's matmuls over the micro-batch's images; none for a
    text row."""
    if not shape.vision_flops:
        return {}
    return {"vision": shape.vision_flops * configuration.batch.per_device_batch / gemm_rate}


def update_bytes(configuration: TrainingConfiguration) -> float:
    """Bytes per trainable weight the step's update moves: the gradients' clipping, then the
    optimizer's kernels (plan/model/optimizers.py's `step_traffic`: torch's foreach AdamW 18
    passes over parameter-sized tensors, its fused AdamW 7, bitsandbytes' 8-bit kernels one
    byte a state), each tensor in the trained weights' dtype (PEFT's adapters and FSDP's upcast
    flat parameters in fp32: TrainingConfiguration.trained_weight_bytes)."""
    width = configuration.trained_weight_bytes
    optimizer = optimizer_state(configuration.precision.optim)
    return CLIP_PASSES * width + optimizer.step_traffic(width)


def link_bytes_per_second(configuration: TrainingConfiguration, device: Device) -> float:
    """NCCL's bus bandwidth (nccl-tests' busbw) per device, in bytes per second: across nodes
    the cluster's network per node, as given; within a node the achieved figure the device
    table cites for the link and GPU count (PCIe: through the root complex or host memory, far
    below the datasheet), else the device's NVLink at the share NCCL reaches of it.

    busbw is what makes the traffic formulas below right for any GPU count: an all-gather or
    reduce-scatter of S bytes over n GPUs takes (n - 1) / n * S / busbw, an all-reduce
    2 (n - 1) / n * S / busbw (nccl-tests' PERFORMANCE.md), which is how `_fsdp` and the DDP
    branch of `step_time` count their volumes."""
    if nodes(configuration) > 1:
        return device.network_gbps * 1e9
    return intra_node_bytes_per_second(device, gpus(configuration))


def intra_node_bytes_per_second(device: Device, gpus_in_node: int) -> float:
    """NCCL's bus bandwidth among `gpus_in_node` devices of one node (`link_bytes_per_second`)."""
    achieved = device.achieved_bus_gbps(gpus_in_node)
    if achieved is not None:
        return achieved * 1e9
    return device.interconnect_gbps * 1e9 * NCCL_LINK_SHARE


def _stored_bytes(shape: ModelShape, configuration: TrainingConfiguration) -> float:
    return (shape.total_params - shape.quantized_params) * weight_bytes(configuration) + (
        shape.quantized_params * 0.5
    )


def _fsdp(
    shape: ModelShape,
    configuration: TrainingConfiguration,
    device: Device,
    fitted: Fitted,
    compute: float,
) -> tuple[dict[str, float], LinkTraffic]:
    """Per micro-batch: the strategy's collectives (`_fsdp_traffic`), overlapped with the
    compute that runs beside them; and the units' host time. With them, the collectives'
    traffic and the compute they overlap.

    The forward's gathers can hide only behind the forward: a unit's weights must be there
    before its forward runs, and FSDP gathers nothing for the next micro-batch's forward
    during this one's backward. Pooling all the traffic against all the compute hid LoRA's
    gathers (two of the frozen weights, a forward that is a third of the compute) wherever they
    took up to 1.5 forwards, where from one forward on they show. Where the forward syncs
    (transformers' expert loops, experts.forward_tail_seconds), its gathers are issued only as
    the GPU catches up, and only the compute still queued then can hide them."""
    moved = _fsdp_traffic(shape, configuration, device)
    units = shape.layers * (1 + shape.adapters_per_layer)
    tail = forward_tail_seconds(shape.experts, configuration, device, weight_bytes(configuration))
    if moved.forward_gathers <= 0:
        link = LinkTraffic(moved.total, compute * moved.overlapped_share, shape.layers)
    else:  # the rest runs beside the backward, the forward's compute beside nothing
        forward = compute * _forward_share(configuration)
        cover = forward if tail is None else tail
        rest = moved.total - moved.forward_gathers - moved.waited
        gathers, waited = moved.forward_gathers, moved.waited
        link = LinkTraffic(rest, compute - forward, shape.layers, gathers, cover, waited)
    return {
        "communication": link.exposed_seconds(),
        "fsdp_latency": fitted.fsdp_unit_latency_s * units,
    }, link


class FsdpTraffic(NamedTuple):
    """Seconds of FSDP's collectives per micro-batch (`_fsdp_traffic`): in all, the share of the
    compute they can run beside, and among them the forward's all-gathers and `waited`.

    `waited`, what the compute waits for in full: where a unit runs inside a reentrant
    checkpoint (`inside_reentrant_checkpoint`), in each micro-batch that reduces its gradients,
    a gather of each unit and the reduce-scatters of the node's link; elsewhere none.

    FSDP prefetches a unit's backward gather from the pre-backward hook of the unit after it,
    and only for a unit whose forward registered one; inside a reentrant checkpoint the forward
    ran without gradients and registered none, so each gather is issued only as its unit's
    recompute starts, after the reduce-scatter of the unit before (two CPU ranks over gloo,
    tests/fsdp_prefetch_probe.py). On one process group's stream that reduce-scatter waits for the
    unit's backward and the gather waits for it: unit after unit, compute, reduce-scatter,
    gather. Under no_sync nothing is reduced, and the CPU, ahead of the GPU, issues each gather
    while the unit before still computes (the pooled rule)."""

    total: float
    overlapped_share: float
    forward_gathers: float
    waited: float


def _fsdp_traffic(
    shape: ModelShape, configuration: TrainingConfiguration, device: Device
) -> FsdpTraffic:
    """Seconds of collectives per micro-batch, the share of the compute they overlap, the
    seconds of the forward's all-gathers and of what the compute waits for among them, by
    sharding strategy. FULL_SHARD: two all-gathers of the stored weights (forward, backward)
    and a reduce-scatter of the trainable gradients, each (n - 1) / n * S over busbw
    (nccl-tests' convention, `link_bytes_per_second`), beside the whole compute; a third where
    the units run inside a reentrant checkpoint (`inside_reentrant_checkpoint`). SHARD_GRAD_OP
    keeps the weights gathered from forward to backward: one all-gather. NO_SHARD keeps them
    whole: one all-reduce of the gradients, 2 (n - 1) / n * S, beside the backward only (DDP's).
    HYBRID_SHARD shards within a node over its link, and all-reduces the gradient shards across
    nodes over the network, every device of a node at once.

    The gradients' collective runs once a step, not once a micro-batch: transformers' Trainer
    runs every micro-batch but a step's last under FSDP's no_sync, which keeps the gradients
    whole on each device until the last one's backward reduces them. Priced here as a share of
    it each micro-batch (`Parallelism.gradient_sync`: other trainers reduce after each)."""
    n, k = gpus(configuration), nodes(configuration)
    strategy = configuration.parallelism.fsdp_sharding_strategy
    gradients = shape.trainable_params * weight_bytes(configuration) / _reductions(configuration)
    if strategy == "NO_SHARD":
        volume = 2 * (n - 1) / n * gradients
        seconds = volume / link_bytes_per_second(configuration, device)
        return FsdpTraffic(seconds, BACKWARD_SHARE, 0.0, 0.0)
    reentrant = inside_reentrant_checkpoint(configuration)
    gathers = (1 if strategy in ("SHARD_GRAD_OP", "HYBRID_SHARD_ZERO2") else 2) + int(reentrant)
    stored = _stored_bytes(shape, configuration)
    sharded = gathers * stored + gradients
    waited = stored / _reductions(configuration) + gradients if reentrant else 0.0
    across = 0.0
    if strategy.startswith("HYBRID_SHARD") and k > 1:
        local = max(1, n // k)
        share = (local - 1) / local / intra_node_bytes_per_second(device, local)
        across = 2 * (k - 1) / k * gradients / (device.network_gbps * 1e9)
    else:
        share = (n - 1) / n / link_bytes_per_second(configuration, device)
    return FsdpTraffic(share * sharded + across, 1.0, share * stored, share * waited)


def inside_reentrant_checkpoint(configuration: TrainingConfiguration) -> bool:
    """FSDP's units over several GPUs, gathered in the backward (FULL_SHARD, HYBRID_SHARD), run
    inside a reentrant checkpoint: the release's model forward checkpoints each unit's call
    (transformers before 4.52). Each unit is then gathered twice in the backward, for its
    recompute and again for its backward (its recomputed forward reshards it), with no prefetch
    (tests/fsdp_prefetch_probe.py; a layer that checkpoints itself, 4.52 on, recomputes inside
    its gathered unit)."""
    kernels, parallelism = configuration.kernels, configuration.parallelism
    return (
        parallelism.sharded
        and kernels.checkpointing == "reentrant"
        and kernels.checkpointed_by_model
        and parallelism.fsdp_sharding_strategy in ("FULL_SHARD", "HYBRID_SHARD")
    )


def _reductions(configuration: TrainingConfiguration) -> int:
    """The micro-batches a step's gradients are reduced over once (`Parallelism.gradient_sync`):
    all of them where only the last syncs, else one each."""
    return micro_batches(configuration) if configuration.parallelism.gradient_sync == "last" else 1


def exposed_host(compute: float, host: float, share: float) -> float:
    """Seconds the host's dispatch of a micro-batch's ops adds beside its device work.

    The host queues kernels ahead of the device, so each hides the other's time, but only in
    part: transformers' flash-attention path reads the longest sequence back in every layer
    (`.item()` in its unpadding), which empties the queue, and a layer's host-bound ops (its
    norms, rotary embedding, the adapters' small kernels) come in runs between the matmuls that
    could hide them. The longer of the two, and `share` (Fitted.host_exposed) of the shorter."""
    return max(compute, host) + share * min(compute, host) - compute


def step_time(
    shape: ModelShape,
    configuration: TrainingConfiguration,
    device: Device = REFERENCE,
    fitted: Fitted = FITTED,
    paged_out_bytes: float = 0.0,
) -> StepTime:
    """One optimizer step of `configuration` on `device`, priced part by part (module
    docstring); `paged_out_bytes`: a paged optimizer's state per device that crosses the host
    link each way every step (plan/memory/verdict.py's MemoryAssessment.paged_out_bytes)."""
    per_micro = _micro_batch(shape, configuration, device, fitted)
    per_micro |= expert_seconds(shape.experts, configuration, device, weight_bytes(configuration))
    compute = sum(v for k, v in per_micro.items() if k != "host")
    per_micro["host"] = exposed_host(compute, per_micro["host"], fitted.host_exposed)
    n, backend = gpus(configuration), configuration.parallelism.backend
    sharded = configuration.parallelism.sharded
    link, m = None, micro_batches(configuration)
    if sharded:
        fsdp, per = _fsdp(shape, configuration, device, fitted, compute)
        per_micro |= fsdp
        link = per.scaled(m)
    parts = {k: v * m for k, v in per_micro.items()}
    on_device = shape.trainable_params / (n if sharded else 1)
    bandwidth = device.memory_gbps * 1e9
    parts["optimizer"] = update_bytes(configuration) * on_device / bandwidth
    if m > 1:
        # each micro-batch after the first adds its gradients into the ones held: FSDP's shard
        # of them where each micro-batch reduces them, else whole
        width = configuration.trained_weight_bytes
        whole = configuration.gradients_whole_between_micro_batches
        held = shape.trainable_params / (n if sharded and not whole else 1)
        parts["accumulation"] = (m - 1) * ACCUMULATE_PASSES * width * held / bandwidth
    if paged_out_bytes > 0:
        # paged in for the update, each page in evicting one out
        parts["paging"] = 2 * paged_out_bytes / (device.host_link_gbps * 1e9)
    if n > 1 and backend == "DDP":
        # one all-reduce of the gradients: 2 (n - 1) / n * S over busbw (nccl-tests)
        volume = 2 * (n - 1) / n * shape.trainable_params * weight_bytes(configuration)
        traffic = volume / link_bytes_per_second(configuration, device)
        link = LinkTraffic(traffic, compute * BACKWARD_SHARE, shape.layers)
        parts["communication"] = link.exposed_seconds()
    return StepTime(
        parts=parts,
        tokens_per_gpu=tokens_per_micro_batch(configuration) * m,
        device=device.name,
        scaled_from=None if device.name == REFERENCE.name else REFERENCE.name,
        # across nodes the collectives cross the network, not the node's link
        link=link if nodes(configuration) == 1 else None,
    )
