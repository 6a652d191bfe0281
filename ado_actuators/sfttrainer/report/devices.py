"""A GPU model's short name, for the places a full `gpu_model` would not fit: the preview's
GPU column and the picture's panel labels. Pure."""

from __future__ import annotations

GPU_VENDORS = ("NVIDIA-", "Tesla-", "AMD-")
GPU_FORMS = {"SXM4", "SXM5", "SXM", "HBM3", "HBM3e"}
"""Parts of a gpu_model name a short name leaves out: the vendor and the usual form factor."""


def short_gpu(name: str | None) -> str:
    """NVIDIA-A100-SXM4-80GB -> A100-80GB; NVIDIA-A100-PCIE-40GB -> A100-40GB-PCIe: the device
    and its memory, and PCIe where that is not the usual form; "-" for none."""
    if not name:
        return "-"
    for vendor in GPU_VENDORS:
        name = name.removeprefix(vendor)
    parts = [p for p in name.split("-") if p not in GPU_FORMS]
    pcie = any(p.upper() == "PCIE" for p in parts)
    return "-".join([p for p in parts if p.upper() != "PCIE"] + ["PCIe"] * pcie)
