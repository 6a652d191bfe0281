"""The predicted time of one optimizer step, and so the throughput, of one configuration: pure
arithmetic on the model's shape, the run and the device.

A step is `gradient_accumulation_steps` micro-batches and one optimizer update. Per micro-batch
and device, its parts add up (nothing is assumed to overlap: the fit found no overlap of FSDP's
traffic with compute on fms-acceleration's A100 runs):

- compute: the hardware FLOPs (not model FLOPs): 2 per matmul weight a token passes through,
  for the forward, again for the backward's input gradients (frozen layers too), again for the
  forward recomputed under gradient checkpointing, plus 2 per trainable matmul weight for the
  weight gradients (none for LoRA's frozen weights or prompt tuning's). Attention's QK^T and AV
  add 4 x width x length per layer and token forward, flash attention's backward 2.5 times that
  and the recompute once more; causal flash attention skips the masked half. Divided by the
  device's dense peak times `matmul_efficiency`;
- elementwise: the memory-bound kernels (norms, activations, residual adds, rotary), bytes per
  token per layer in proportion to the hidden and activated MLP widths, once per pass (forward,
  recompute, backward), over the device's memory bandwidth; fast kernels cut them;
- adapters: LoRA's dropout, small matmuls and adds, in proportion to the adapted linears'
  widths, per pass;
- dequantization: quantized base weights unpacked once per pass and micro-batch, whatever the
  batch, in proportion to the quantized weights;
- latency: a fixed host cost per layer and micro-batch (kernel launches, Python), and under FSDP
  one per wrapped unit and micro-batch (a layer, plus one per LoRA adapter);
- FSDP traffic: the weights all-gathered for the forward and again for the backward, the
  trainable gradients reduce-scattered, over the fitted effective bandwidth scaled by the
  device's interconnect (between nodes: INTER_NODE_GBPS).

Per step: AdamW reads and writes OPTIMIZER_BYTES per trainable weight on the device, and DDP
all-reduces the trainable gradients once.

Every fitted constant is a field of `Fitted`; FITTED holds the values fitted on fms-acceleration's
A100-80GB runs by `benchmarks/throughput_prediction.py`, which prints the error with each model
family left out of the fit. Other devices are scaled by their datasheet peak FLOP/s, memory
bandwidth and interconnect (metrics/gpu_peaks.yaml) from REFERENCE, the device the constants
were fitted on.
"""

from __future__ import annotations

import dataclasses
from typing import Any


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
    attention_layers: int | None = None  # None: every layer (hybrids have fewer)


@dataclasses.dataclass(frozen=True)
class Run:
    method: str  # full | lora | pt
    per_device_batch: int
    sequence_length: int
    gradient_accumulation_steps: int = 1
    gpus: int = 1
    nodes: int = 1
    backend: str = "FSDP"  # FSDP | DDP | None
    gradient_checkpointing: bool = True
    flash_attention: bool = True
    fast_kernels: bool = False
    fused_lora: bool = False  # fms-acceleration's fused LoRA kernels over quantized weights
    weight_bytes: float = 2.0  # the training dtype's bytes per weight

    @property
    def tokens_per_micro_batch(self) -> int:
        return self.per_device_batch * self.sequence_length


@dataclasses.dataclass(frozen=True)
class Device:
    name: str
    tflops: float  # dense bf16/fp16 tensor-core peak
    memory_gbps: float
    interconnect_gbps: float


REFERENCE = Device("NVIDIA-A100-SXM4-80GB", tflops=312, memory_gbps=2039, interconnect_gbps=600)
"""The device of fms-acceleration's runs, which the constants were fitted on (metrics/
gpu_peaks.yaml cites the figures)."""
INTER_NODE_GBPS = 25.0
"""Between nodes FSDP and DDP traffic crosses the network: one 200 Gb/s NIC per node is assumed
(no public multi-node fine-tuning table was at hand to fit it; the row says so)."""
OPTIMIZER_BYTES = 16
"""AdamW's foreach step reads weight, gradient and two states and writes weight and two states:
7 tensors of 2 bytes in bf16, rounded up for the fp32 temporaries."""


@dataclasses.dataclass(frozen=True)
class Fitted:
    """The step time's fitted constants (benchmarks/throughput_prediction.py fits and judges
    them on fms-acceleration's A100 runs)."""

    matmul_efficiency: float = 0.949
    """Share of the dense peak the matmuls and flash attention reach."""
    elementwise_bytes: float = 66.7
    """Bytes moved per token, layer, pass and unit of activated width by the memory-bound
    kernels."""
    fast_kernels_elementwise: float = 0.707
    """Share of the elementwise bytes left with fms-acceleration's fused kernels."""
    adapter_bytes: float = 18.6
    """Bytes moved per token, pass and unit of adapted width by LoRA's adapters."""
    fused_lora_adapters: float = 0.0693
    """Share of the adapters' bytes left with the fused LoRA kernels."""
    dequant_bytes_gptq: float = 8.62
    """Bytes per quantized weight, pass and micro-batch to unpack GPTQ weights."""
    dequant_bytes_bnb: float = 11.9
    """The same for bitsandbytes' 4-bit weights."""
    fsdp_gbps: float = 131.0
    """Effective bandwidth of FSDP's all-gathers and reduce-scatters on REFERENCE."""
    layer_latency_s: float = 3.53e-3
    """Host time per layer and micro-batch."""
    fsdp_unit_latency_s: float = 9.82e-4
    """Host time per FSDP unit and micro-batch on more than one device."""


FITTED = Fitted()
"""Fitted on all 244 packed runs of fms-acceleration's A100 tables (benchmarks/
throughput_prediction.py). Each family predicted with the constants fitted on the others:
median |error| 2.9 %, 90th percentile 10.4 %, Spearman 0.972 over the 244 runs."""


@dataclasses.dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step on one device, by part, and the tokens it trains there."""

    parts: dict[str, float]
    tokens_per_gpu: int
    device: str
    scaled_from: str | None  # the reference device, when the device is another one

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.tokens_per_gpu / self.seconds

    def as_metadata(self) -> dict[str, Any]:
        return {
            "step_seconds": round(self.seconds, 4),
            "parts_seconds": {k: round(v, 5) for k, v in self.parts.items()},
            "tokens_per_step_per_gpu": self.tokens_per_gpu,
            "device": self.device,
            "scaled_from": self.scaled_from,
        }


def hardware_flops_per_token(shape: ModelShape, run: Run) -> float:
    """Matmul and attention FLOPs of one token's forward, backward and recompute."""
    passes = 3 if run.gradient_checkpointing else 2  # forward, (recompute,) input gradients
    weight_gradients = 0 if run.method in ("lora", "pt") else shape.trainable_params
    dense = 2 * passes * shape.matmul_params + 2 * weight_gradients
    layers = shape.layers if shape.attention_layers is None else shape.attention_layers
    attention_forward = 4 * layers * shape.attention_width * run.sequence_length
    if run.flash_attention:
        attention_forward /= 2  # causal: the masked half is skipped
    attention_passes = 1 + 2.5 + (1 if run.gradient_checkpointing else 0)
    return dense + attention_forward * attention_passes


def _micro_batch(shape: ModelShape, run: Run, device: Device, fitted: Fitted) -> dict[str, float]:
    tokens = run.tokens_per_micro_batch
    passes = 3 if run.gradient_checkpointing else 2
    bandwidth = device.memory_gbps * 1e9
    elementwise = fitted.elementwise_bytes * (
        fitted.fast_kernels_elementwise if run.fast_kernels else 1.0
    )
    dequant = {"gptq": fitted.dequant_bytes_gptq, "bnb": fitted.dequant_bytes_bnb}
    return {
        "compute": hardware_flops_per_token(shape, run)
        * tokens
        / (device.tflops * 1e12 * fitted.matmul_efficiency),
        "elementwise": elementwise
        * shape.layers
        * shape.activated_width
        * passes
        * tokens
        / bandwidth,
        "adapters": fitted.adapter_bytes
        * (fitted.fused_lora_adapters if run.fused_lora else 1.0)
        * shape.adapted_width
        * passes
        * tokens
        / bandwidth,
        "dequantization": dequant.get(shape.quantization or "", 0.0)
        * shape.quantized_params
        * passes
        / bandwidth,
        "latency": fitted.layer_latency_s * shape.layers,
    }


def _interconnect(run: Run, device: Device, reference_gbps: float) -> float:
    """Bytes per second of the run's collectives on `device`, for a figure fitted on the
    reference device's interconnect."""
    link = device.interconnect_gbps
    if run.nodes > 1:
        link = min(link, INTER_NODE_GBPS)
    return reference_gbps * 1e9 * link / REFERENCE.interconnect_gbps


def _fsdp(shape: ModelShape, run: Run, device: Device, fitted: Fitted) -> dict[str, float]:
    """Per micro-batch: two all-gathers of the stored weights and a reduce-scatter of the
    trainable gradients, each moving (n - 1) / n of them; and the units' host time."""
    n = run.gpus
    stored = (shape.total_params - shape.quantized_params) * run.weight_bytes + (
        shape.quantized_params * 0.5
    )
    volume = (n - 1) / n * (2 * stored + shape.trainable_params * run.weight_bytes)
    units = shape.layers * (1 + shape.adapters_per_layer)
    return {
        "communication": volume / _interconnect(run, device, fitted.fsdp_gbps),
        "fsdp_latency": fitted.fsdp_unit_latency_s * units,
    }


def step_time(
    shape: ModelShape, run: Run, device: Device = REFERENCE, fitted: Fitted = FITTED
) -> StepTime:
    per_micro = _micro_batch(shape, run, device, fitted)
    sharded = run.gpus > 1 and run.backend == "FSDP"
    if sharded:
        per_micro |= _fsdp(shape, run, device, fitted)
    parts = {k: v * run.gradient_accumulation_steps for k, v in per_micro.items()}
    on_device = shape.trainable_params / (run.gpus if sharded else 1)
    parts["optimizer"] = OPTIMIZER_BYTES * on_device / (device.memory_gbps * 1e9)
    if run.gpus > 1 and run.backend == "DDP":
        volume = 2 * (run.gpus - 1) / run.gpus * shape.trainable_params * run.weight_bytes
        parts["communication"] = volume / _interconnect(run, device, fitted.fsdp_gbps)
    return StepTime(
        parts=parts,
        tokens_per_gpu=run.tokens_per_micro_batch * run.gradient_accumulation_steps,
        device=device.name,
        scaled_from=None if device.name == REFERENCE.name else REFERENCE.name,
    )
