"""Dense bf16/fp16 peak TFLOP/s per gpu_model, the denominator of model_flops_utilization, and
the memory and interconnect bandwidths the predicted step time (plan/speed/step_time.py) scales by.

The figures and their sources are data (gpu_peaks.yaml); a gpu_model not listed has no
utilisation figure (the property is omitted), CPUs included.
"""

from __future__ import annotations

import functools

import pydantic

from ado_actuators.sfttrainer.metrics import device_tables


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
