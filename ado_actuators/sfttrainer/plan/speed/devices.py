"""A device as the step time sees it: what it achieves (cuBLAS's dense rate, the attention
kernels' rates by head dimension and length, memory bandwidth, L2, its links), read from the one
table of devices, metrics/gpu_peaks.yaml, where every figure carries its citation.

A device whose attention kernels have no published benchmark takes another device's curves
(`attention_from`), scaled by the ratio of their achieved GEMM rates; the table says so. A kernel
a device's curves lack falls back to flash-attention 2's (SDPA's flash backend runs its kernels),
and a causal backward no benchmark measured is the non-causal one scaled as the forward is.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any

from ado_actuators.sfttrainer.metrics.gpu_peaks import GpuPeak, peak_table

REFERENCE_NAME = "NVIDIA-A100-SXM4-80GB"
"""The device of fms-acceleration's runs, the step time's constants were fitted on."""
DEFAULT_NETWORK_GBPS = 100.0
"""Bytes per second, in GB, one node's network moves for NCCL's collectives between nodes, where
the actuator parameter `inter_node_gbps` does not say: 800 Gb/s, the H100 cluster of PyTorch's
FSDP blog (pytorch.org/blog/maximizing-training, 2024-03-13), between its A100 cluster's 400 Gb/s
and the 3,200 Gb/s of eight 400 Gb/s NICs (a DGX H100). Per node, not per GPU: NCCL's rings
spread one node's traffic over all its NICs."""
FALLBACK_KERNELS = {"sdpa": "fa2", "fa3": "fa2", "eager": "fa2", "triton": "fa2"}
EAGER_SHARE = {"forward": 0.36, "backward": 0.56}
"""Eager attention's rate over flash-attention 2's where a device has no eager curve: the H100's
at 4k tokens, head dimension 128, without the mask (FlashAttention-3 paper, arXiv 2407.08608,
figures 5 and 6: standard attention 133 against 368 TFLOP/s forward, 174 against 310 backward)."""
TRITON_SHARE = {"forward": 1 / 1.4, "backward": 1 / 2.0}
"""Flash attention's Triton port (flash-attn 1.x's flash_attn_triton, which llm-foundry vendored
as attn_impl: triton) over flash-attn 2's rate, where a device has no curve of its own:
"FlashAttention-2 is around 1.3-1.5x faster than FlashAttention in Triton in the forward pass and
around 2x faster in the backward pass" (FlashAttention-2 paper, Dao, arXiv 2307.08691, section
4.1: an A100-80GB SXM4, head dimensions 64 and 128, with and without the causal mask, 512 to 16k
tokens); the forward's range taken at its middle."""
KERNEL_SHARE = {"eager": EAGER_SHARE, "triton": TRITON_SHARE}
"""A kernel's rate over flash-attention 2's, for a device whose table has no curve of it."""


HOST_LINK_GBPS = {3: 12.0, 4: 24.0, 5: 48.0}
"""What one GPU's x16 link to the host carries one way, GB/s, by PCIe generation: about three
quarters of the link's 16, 32 and 64 GB/s (PCI-SIG's rates; 128b/130b encoding and packet
headers take the rest), what a pinned cudaMemcpy reaches on such links (NVIDIA's bandwidthTest
sample). A paged optimizer's state moves over it (cudaMemPrefetchAsync); pages the driver evicts
on demand move no faster (NVIDIA's blog 'Improving GPU Memory Oversubscription Performance',
2021), so this is the fastest paging can be."""


@dataclasses.dataclass(frozen=True)
class AttentionCurve:
    """A kernel's measured TFLOP/s on one device by sequence length, one direction."""

    kernel: str  # fa2 | fa3 | sdpa | eager | triton
    head_dim: int
    causal: bool
    direction: str  # forward | backward
    points: tuple[tuple[int, float], ...]  # (sequence length, TFLOP/s), by length

    def at(self, length: int) -> float:
        """Linear in log2(length) between the measured lengths, flat beyond them."""
        lengths = [n for n, _ in self.points]
        rates = [r for _, r in self.points]
        if length <= lengths[0]:
            return rates[0]
        if length >= lengths[-1]:
            return rates[-1]
        i = bisect.bisect_right(lengths, length)
        x0, x1 = math.log2(lengths[i - 1]), math.log2(lengths[i])
        w = (math.log2(length) - x0) / (x1 - x0)
        return rates[i - 1] + w * (rates[i] - rates[i - 1])

    def scaled(self, factor: float) -> AttentionCurve:
        points = tuple((n, r * factor) for n, r in self.points)
        return dataclasses.replace(self, points=points)


@dataclasses.dataclass(frozen=True)
class Device:
    name: str
    tflops: float  # dense bf16/fp16 tensor-core peak (the datasheet)
    memory_gbps: float
    interconnect_gbps: float  # GPU-to-GPU within a node, as the datasheet quotes it
    gemm_tflops: float = 0.0  # dense bf16 rate cuBLAS achieves (0: the datasheet peak)
    attention: tuple[AttentionCurve, ...] = ()
    l2_mb: float = 0.0
    network_gbps: float = DEFAULT_NETWORK_GBPS  # one node's network, between nodes
    link_kind: str = "nvlink"  # nvlink | pcie (metrics/gpu_peaks.yaml, `link`)
    bus_gbps: float = 0.0  # NCCL busbw within a node with few GPUs (0: not measured)
    host_gbps: float = 0.0  # what the host carries for all GPUs at once (0: no limit)
    pcie_gen: int = 4  # the GPU's own link to the host, x16

    @property
    def host_link_gbps(self) -> float:
        """GB/s one way between this GPU and the host's memory (HOST_LINK_GBPS)."""
        return HOST_LINK_GBPS.get(self.pcie_gen, HOST_LINK_GBPS[4])

    def __post_init__(self) -> None:
        if not self.gemm_tflops:
            object.__setattr__(self, "gemm_tflops", self.tflops)

    def achieved_bus_gbps(self, gpus: int) -> float | None:
        """NCCL's bus bandwidth within a node for `gpus` GPUs, where the table gives one: the
        link's own figure, or the host's share when the host is the narrower path (over PCIe
        every GPU's traffic crosses the root complex, and without peer-to-peer the host memory
        too, so n GPUs split what it carries: NVIDIA/nccl issue 1639); None: not measured."""
        if not self.bus_gbps:
            return None
        if not self.host_gbps:
            return self.bus_gbps
        return min(self.bus_gbps, self.host_gbps / max(1, gpus))

    def _curves(self, kernel: str, direction: str) -> list[AttentionCurve]:
        found = [c for c in self.attention if c.kernel == kernel and c.direction == direction]
        if not found and kernel in FALLBACK_KERNELS:
            return self._curves(FALLBACK_KERNELS[kernel], direction)
        return found

    def attention_tflops(
        self, kernel: str, head_dim: int, length: int, causal: bool, direction: str
    ) -> float:
        """The kernel's rate at `length` for the nearest measured head dimension."""
        curves = self._curves(kernel, direction)
        if not curves:
            return self.gemm_tflops  # no curve at all: priced as the matmuls
        share = 1.0
        if kernel in KERNEL_SHARE and all(c.kernel != kernel for c in curves):
            share = KERNEL_SHARE[kernel][direction]
        matching = [c for c in curves if c.causal == causal] or curves
        curve = min(matching, key=lambda c: (abs(math.log2(c.head_dim / head_dim)), -c.head_dim))
        rate = curve.at(length) * share
        if curve.causal != causal and direction == "backward":
            rate *= self._causal_ratio(kernel, curve.head_dim, length, causal)
        return rate

    def _causal_ratio(self, kernel: str, head_dim: int, length: int, causal: bool) -> float:
        """The forward's causal over non-causal rate at `length` (its inverse for a non-causal
        request): what a backward curve measured only the other way is scaled by."""
        forward = {c.causal: c for c in self._curves(kernel, "forward") if c.head_dim == head_dim}
        if True not in forward or False not in forward:
            return 1.0
        ratio = forward[True].at(length) / forward[False].at(length)
        return ratio if causal else 1 / ratio


def _curves(entry: GpuPeak) -> tuple[AttentionCurve, ...]:
    return tuple(
        AttentionCurve(
            kernel=c.kernel,
            head_dim=c.head_dim,
            causal=c.causal,
            direction=c.direction,
            points=tuple(sorted(c.tflops.items())),
        )
        for c in entry.attention
    )


def _gemm(entry: GpuPeak) -> float:
    return entry.gemm_tflops.value if entry.gemm_tflops else entry.tflops


def device_named(
    gpu_model: str | None,
    network_gbps: float = DEFAULT_NETWORK_GBPS,
    intra_node_gbps: float | None = None,
) -> Device:
    """The device of `gpu_model` as metrics/gpu_peaks.yaml describes it; KeyError when it is not
    listed or lacks its bandwidths. `intra_node_gbps`, where a user states it (the actuator
    parameter), replaces the table's bus bandwidth within a node, at any GPU count."""
    table = peak_table()
    entry = table[gpu_model or ""]
    if entry.memory_gbps is None or entry.interconnect_gbps is None:
        raise KeyError(f"{gpu_model}: no memory bandwidth or interconnect in gpu_peaks.yaml")
    curves = _curves(entry)
    if not curves and entry.attention_from:
        source = table[entry.attention_from]
        ratio = _gemm(entry) / _gemm(source)
        curves = tuple(c.scaled(ratio) for c in _curves(source))
    canonical = next(name for name, found in table.items() if found is entry)  # not an alias
    return Device(
        name=canonical,
        tflops=entry.tflops,
        memory_gbps=entry.memory_gbps,
        interconnect_gbps=entry.interconnect_gbps,
        gemm_tflops=_gemm(entry),
        attention=curves,
        l2_mb=entry.l2_mb.value if entry.l2_mb else 0.0,
        network_gbps=network_gbps,
        **_link(entry, intra_node_gbps),
    )


def link_kind_of(gpu_model: str | None) -> str | None:
    """The kind of `gpu_model`'s link within a node as metrics/gpu_peaks.yaml lists it (none
    listed: NVLink's, as `device_named` takes it); None where the table lacks the device."""
    entry = peak_table().get(gpu_model or "")
    if entry is None:
        return None
    return entry.link.kind if entry.link is not None else Device.link_kind


def _link(entry: GpuPeak, stated_gbps: float | None) -> dict[str, Any]:
    """The Device fields of the entry's intra-node link (none listed: NVLink's rule); a figure
    the user states is taken as given, with no host cap: it is what their node reaches."""
    fields: dict[str, Any] = {}
    if entry.link is not None:
        fields = {
            "link_kind": entry.link.kind,
            "bus_gbps": entry.link.bus_gbps or 0.0,
            "host_gbps": entry.link.host_gbps or 0.0,
            "pcie_gen": entry.link.pcie_gen,
        }
    if stated_gbps:
        fields |= {"bus_gbps": stated_gbps, "host_gbps": 0.0}
    return fields
