"""One entry per gpu_model: the dense bf16/fp16 peak TFLOP/s (the denominator of
model_flops_utilization) and what the device achieves, which the predicted step time
(plan/speed/step_time.py, through plan/speed/devices.py) prices each part of a step by: cuBLAS's
dense rate, the attention kernels' rates by head dimension and length, memory bandwidth, L2 and
the GPU-to-GPU link.

The figures and their sources are data (gpu_peaks.yaml); a gpu_model not listed has no
utilisation figure (the property is omitted), CPUs included.
"""

from __future__ import annotations

import functools
from typing import Literal

import pydantic

from ado_actuators.sfttrainer.metrics import device_tables


class Figure(pydantic.BaseModel):
    """One achieved figure and where it comes from."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    value: float
    source: str
    datasheet: bool = False
    """The datasheet's figure: no measurement better than it was found."""
    derived: str | None = None
    """How the figure follows from another device's measurement, where it is not measured on
    this one."""
    measured: str | None = None
    """When and by what the device check (make gpu-kit) measured it, where it did."""


class AttentionCurve(pydantic.BaseModel):
    """An attention kernel's published TFLOP/s on the device by sequence length (the FLOPs as the
    kernel's benchmark counts them: 4 x length^2 x heads x head dimension forward, halved when
    causal, the backward 2.5 times the forward)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    kernel: str  # fa2 | fa3 | sdpa | eager
    head_dim: int
    causal: bool
    direction: str  # forward | backward
    tflops: dict[int, float]
    source: str
    derived: str | None = None


class Link(pydantic.BaseModel):
    """How two GPUs of one node reach each other, and the bus bandwidth NCCL's collectives
    achieve over it (nccl-tests' busbw at large messages: an all-gather or reduce-scatter of S
    bytes over n GPUs takes (n - 1) / n * S / busbw, an all-reduce twice that)."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    kind: Literal["nvlink", "pcie"]
    pcie_gen: int
    """The GPU's own PCIe generation (its link to the host, x16)."""
    peer_to_peer: bool
    """Whether NCCL is expected to copy GPU to GPU directly; without it (Ada and consumer
    cards, and data-centre cards in containers or behind an IOMMU) it stages every chunk in
    host shared memory (NCCL's SHM transport)."""
    source: str
    bus_gbps: float | None = None
    """The busbw a ring over this link reaches with few GPUs, GB/s; None: the NVLink rule of
    the step time (a share of `interconnect_gbps`)."""
    host_gbps: float | None = None
    """What the host (root complex and memory) carries for all the node's GPUs at once, GB/s:
    with n GPUs each gets at most host_gbps / n of bus bandwidth; None: no such limit."""
    derived: str | None = None
    """How the figures follow from another device's measurement, where none is of this one."""


class GpuPeak(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    tflops: float
    dtype: str
    source: str
    aliases: tuple[str, ...] = ()
    memory_gbps: float | None = None
    """Memory bandwidth, GB/s: what the predicted step time's memory-bound parts scale by."""
    interconnect_gbps: float | None = None
    """GPU-to-GPU bandwidth within a node, GB/s (NVLink, else PCIe): what FSDP's and DDP's
    traffic scales by."""
    bandwidth_source: str | None = None
    link: Link | None = None
    """The intra-node link as NCCL uses it (kind, peer-to-peer, achieved bus bandwidth)."""
    memory_datasheet: bool = True
    """memory_gbps is the datasheet's figure (no cited measurement of what kernels achieve)."""
    gemm_tflops: Figure | None = None
    """Dense bf16 matmul rate cuBLAS achieves at large shapes; None: the datasheet peak."""
    l2_mb: Figure | None = None
    attention: tuple[AttentionCurve, ...] = ()
    attention_from: str | None = None
    """Another gpu_model whose attention curves, scaled by the ratio of the achieved GEMM
    rates, stand for this device's, where no benchmark of its own was found."""


@functools.cache
def peak_table() -> dict[str, GpuPeak]:
    return device_tables.load("gpu_peaks.yaml", GpuPeak)


def peak_tflops(gpu_model: str | None) -> float | None:
    if not gpu_model:
        return None
    peak = peak_table().get(gpu_model)
    return peak.tflops if peak else None


def gpu_model_from_device_name(name: str) -> str:
    """torch.cuda.get_device_name() -> the node label spelling ("NVIDIA H100 80GB HBM3" ->
    "NVIDIA-H100-80GB-HBM3"), which is what gpu_model holds."""
    return "-".join(name.split())
