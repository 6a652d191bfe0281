"""The time of a hybrid model's Mamba-2 layers beyond their projections, for plan/speed/step_time.py:
the causal convolution and the SSD scan (with its gated RMSNorm), on the path that runs
(plan/model/mamba.py: mamba-ssm's fused kernels or transformers' torch path).

The in and out projections are nn.Linear: the step's GEMMs already price them (every nn.Linear
of the model is in its matmul weights, plan/model/meta_shape.py). What is left is priced here per
micro-batch from FLOPs and bytes on the device:

- fused (mamba_split_conv1d_scan_combined): the chunked SSD's small matmuls (C·Bᵀ per chunk, the
  causal half of its product with x, the chunk states and their read-out, Mamba-2 paper, arXiv
  2405.21060, section 6) at a share of the device's cuBLAS rate, or the bytes its kernels move
  (the projections' output read, the scan's output and the gated norm written, fp32 chunk states
  and C·B) over its bandwidth, whichever is longer: Triton kernels overlap the two;
- torch (torch_forward): no matmul at all, broadcast products summed at once, every one
  materialised in fp32 and read back: [chunk, chunk, state] floats per token and head for C·B,
  [chunk, chunk, head_dim] for the diagonal block's output, [head_dim, state] twice for the
  states. Pure bytes over bandwidth, many times the fused path's.

The backward moves BACKWARD_RATIO times the forward's; gradient checkpointing runs the forward
once more. Nothing here is fitted: no public run of a hybrid's training step was found to fit or
check it, so hybrid speed is "not validated" (docs/benchmarks/throughput.md).
"""

from __future__ import annotations

import math

from ado_actuators.sfttrainer.plan.model.mamba import MambaLayers, ScanPath, scan_path
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration
from ado_actuators.sfttrainer.plan.speed.devices import Device

FP32 = 4
SSD_TENSOR_SHARE = 0.25
"""Share of the device's cuBLAS rate the fused SSD kernels' matmuls reach: blocks of a 256-token
chunk by a 64-wide head or a 128-wide state are small for tensor cores, and Triton's kernels
interleave them with the decay's exponentials. Assumed, not fitted (module docstring); at the
Granite 4.0 shapes the fused scan is bandwidth-bound at any share above about 0.1, so the share
hardly moves the step."""
HYBRID_NOT_VALIDATED = (
    "regime not validated: a Mamba-2 hybrid; no public measurement of a hybrid's training step "
    "was at hand to check it against (its scan is priced from FLOPs and bytes, not fitted)"
)
"""The first note of a hybrid's row, in place of its device's validated error."""
BACKWARD_RATIO = 2.0
"""The backward's work over the forward's: each product's gradient for each of its two inputs
(mamba-ssm's backward kernels; autograd's broadcast-product backward on the torch path)."""


def fused_forward(layer: MambaLayers, width: int) -> tuple[float, float]:
    """(FLOPs, bytes) per token of one layer's fused scan and gated norm, forward."""
    h, d, n, g, chunk = layer.heads, layer.head_dim, layer.state, layer.groups, layer.chunk
    flops = 2 * chunk * g * n + chunk * h * d + 4 * h * d * n
    # x, B, C, z and dt read, the scan's output and the norm's written (the norm reads it back)
    stored = width * (7 * layer.inner + 4 * g * n + 2 * h)
    # fp32: dt and its cumulative sum, the chunk states written and passed, C·B per chunk
    scratch = FP32 * (6 * h + 4 * h * d * n / chunk + 2 * g * chunk)
    return float(flops), stored + scratch


def torch_forward_elements(layer: MambaLayers, length: int) -> float:
    """fp32 elements per token torch_forward writes in one layer's scan (each read back once):
    the chunk's decay mask (segment_sum, 4 tensors), C·B's broadcast product and its sums, the
    diagonal block's product, the states' products, the inter-chunk states, and the
    head-width tensors around them (modeling_granitemoehybrid.py, torch_forward)."""
    h, d, n, chunk = layer.heads, layer.head_dim, layer.state, layer.chunk
    chunks = math.ceil(length / chunk)
    padded = chunks * chunk
    per_chunk = chunk * chunk * h * (4 + n + 3 + d)
    states = padded * (2 * h * d * n + h * n) + (chunks + 1) ** 2 * h * d * n
    around = padded * (10 * h * d + 4 * h * n + 2 * layer.inner)
    return (chunks * per_chunk + states + around) / length


def conv_bytes(layer: MambaLayers, path: ScanPath, width: int) -> float:
    """Bytes per token of one layer's causal convolution, forward: x B C read and written by
    causal_conv1d; on the torch path nn.Conv1d over a transposed copy, then SiLU."""
    passes = 2 if path == "fused" else 6
    return float(passes * layer.conv_dim * width)


def mamba_parts(
    layer: MambaLayers | None, configuration: TrainingConfiguration, device: Device
) -> dict[str, float]:
    """Seconds per micro-batch of the Mamba layers' scan and convolution; {} without any."""
    if layer is None:
        return {}
    path = scan_path(configuration.fms_hf_tuning_version)
    width = configuration.precision.weight_bytes
    length = configuration.sequence_tokens
    tokens = configuration.positions_per_micro_batch * layer.layers
    forwards = 2 if configuration.kernels.gradient_checkpointing else 1
    passes = forwards + BACKWARD_RATIO
    bandwidth = device.memory_gbps * 1e9
    if path == "fused":
        flops, moved = fused_forward(layer, width)
        rate = device.gemm_tflops * 1e12 * SSD_TENSOR_SHARE
        scan = max(flops / rate, moved / bandwidth)
    else:
        scan = 2 * FP32 * torch_forward_elements(layer, length) / bandwidth
    conv = conv_bytes(layer, path, width) / bandwidth
    return {"mamba_scan": scan * passes * tokens, "mamba_conv": conv * passes * tokens}
