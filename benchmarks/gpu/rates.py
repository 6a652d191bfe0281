"""What this GPU achieves, measured, written as a device entry of metrics/gpu_peaks.yaml with its
provenance: the dense bf16 matmul rate at training-sized shapes, the attention kernels' forward
and backward rates (PyTorch SDPA's flash backend, and flash-attention 2 where it is installed)
by length at head dimension 128 with the causal mask, and the memory bandwidth of a large copy.

    python benchmarks/gpu/rates.py --result DIR/rates.json [--entry DIR/device-entry.yaml]

The entry keeps the table's datasheet fields for a listed device and replaces the achieved ones
with the measurements (`measured:` says when and with what); point the environment variable
ADO_SFTTRAINER_DEVICES at a file of such entries and the preview, the guided search and the
predicted throughput read them over the shipped table (metrics/device_tables.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

GEMM_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 14336), (16384, 14336, 4096))
"""M x N x K: square ones and a Llama-8B MLP's matmuls over 16k tokens."""
LENGTHS = (1024, 4096, 16384)
HEAD_DIM = 128
HEADS_TOKENS = 16 * 16384
"""Heads x tokens of each attention call (batch shrinks as the length grows), as the
FlashAttention benchmarks size them."""
COPY_BYTES = 2 * 2**30


def _seconds(work: Callable[[], Any], repeats: int = 10) -> float:
    import torch

    work()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        work()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / repeats


def gemm_tflops() -> dict[str, float]:
    import torch

    found = {}
    for m, n, k in GEMM_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        found[f"{m}x{n}x{k}"] = 2 * m * n * k / _seconds(lambda a=a, b=b: a @ b) / 1e12
    return found


def _attention(kernel: str) -> Callable[..., Any] | None:
    import torch.nn.functional as F

    if kernel == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    try:
        from flash_attn import flash_attn_func
    except ImportError:
        return None
    return lambda q, k, v: flash_attn_func(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True
    )


def _attention_at(attend: Callable[..., Any], length: int) -> tuple[float, float]:
    """Forward and backward TFLOP/s at `length`, counted as the FlashAttention benchmarks
    count them (4 x length^2 x heads x head dim forward, halved causal; backward 2.5 times it)."""
    import torch

    batch = max(1, HEADS_TOKENS // (16 * length))
    shape = (batch, 16, length, HEAD_DIM)
    q, k, v = (
        torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    flops = 4 * batch * 16 * length**2 * HEAD_DIM / 2
    forward = _seconds(lambda: attend(q, k, v))
    both = _seconds(lambda: attend(q, k, v).backward(grad))
    backward = max(both - forward, 1e-9)
    return round(flops / forward / 1e12, 1), round(2.5 * flops / backward / 1e12, 1)


def attention_tflops(kernel: str) -> dict[str, dict[int, float]] | None:
    """The kernel's causal forward and backward rates at head dimension 128, by length."""
    attend = _attention(kernel)
    if attend is None:
        return None
    found: dict[str, dict[int, float]] = {"forward": {}, "backward": {}}
    for length in LENGTHS:
        found["forward"][length], found["backward"][length] = _attention_at(attend, length)
    return found


def copy_gbps() -> float:
    import torch

    source = torch.empty(COPY_BYTES // 2, device="cuda", dtype=torch.bfloat16)
    target = torch.empty_like(source)
    return 2 * COPY_BYTES / _seconds(lambda: target.copy_(source)) / 1e9


def measure() -> dict[str, Any]:
    import torch

    return {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.date.today().isoformat(),
        "gemm_tflops": gemm_tflops(),
        "attention": {k: attention_tflops(k) for k in ("sdpa", "fa2")},
        "copy_gbps": round(copy_gbps(), 1),
    }


def device_entry(measured: dict[str, Any], listed: dict[str, Any] | None) -> dict[str, Any]:
    """gpu_model -> its entry: the table's fields for a listed device (or placeholders the
    check cannot know, said so), the achieved ones replaced by the measurements."""
    from ado_actuators.sfttrainer.metrics.gpu_peaks import gpu_model_from_device_name

    name = gpu_model_from_device_name(measured["device"])
    how = f"device check (make gpu-kit) on {measured['date']}, torch {measured['torch']}"
    best = max(measured["gemm_tflops"].items(), key=lambda item: item[1])
    entry = dict(listed or {})
    entry.setdefault("tflops", round(best[1], 1))
    entry.setdefault("dtype", "bf16")
    entry.setdefault("source", f"not listed in gpu_peaks.yaml: the measured matmul rate ({how})")
    entry["gemm_tflops"] = {
        "value": round(best[1], 1),
        "source": f"torch.matmul, bf16, best of {len(measured['gemm_tflops'])} shapes ({best[0]})",
        "measured": how,
    }
    entry["memory_gbps"] = round(measured["copy_gbps"], 1)
    entry["memory_datasheet"] = False
    entry["bandwidth_source"] = f"a {COPY_BYTES >> 30} GiB copy, read and written ({how})"
    entry.setdefault("interconnect_gbps", 64)
    curves = []
    for kernel, found in measured["attention"].items():
        for direction in ("forward", "backward"):
            if found:
                curves.append(
                    {
                        "kernel": kernel,
                        "head_dim": HEAD_DIM,
                        "causal": True,
                        "direction": direction,
                        "tflops": found[direction],
                        "source": f"measured ({how})",
                    }
                )
    entry["attention"] = curves
    entry.pop("attention_from", None)
    return {name: entry}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--entry", type=Path, help="write the device entry (YAML) here")
    args = parser.parse_args(argv)
    measured = measure()
    args.result.write_text(json.dumps(measured, indent=1))
    print(json.dumps(measured, indent=1))
    if args.entry:
        from ado_actuators.sfttrainer.metrics.gpu_peaks import (
            gpu_model_from_device_name,
            peak_table,
        )

        listed = peak_table().get(gpu_model_from_device_name(measured["device"]))
        fields = (
            listed.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
            if listed
            else None
        )
        args.entry.write_text(yaml.safe_dump(device_entry(measured, fields), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
