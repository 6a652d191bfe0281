"""benchmarks/gpu/ in its CPU mode (the tiny model): what a GPU run prints, end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "run.py"


def test_cpu_mode_measures_full_and_lora_and_the_oom_case_is_invalid(tmp_path):
    results = tmp_path / "results.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--cpu",
            "--steps",
            "3",
            "--workdir",
            str(tmp_path / "w"),
            "--json",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = {row["label"]: row for row in json.loads(results.read_text())["rows"]}
    assert set(rows) == {"tiny-full-b2-s64", "tiny-lora-b2-s64", "tiny-full-b2-s64-oom"}
    for label in ("tiny-full-b2-s64", "tiny-lora-b2-s64"):
        row = rows[label]
        props = row["properties"]
        assert props["is_valid"] == 1 and props["dataset_tokens_per_second"] > 0
        assert (
            props["gpu_energy_joules_per_token"] == 0.0
            and props["gpu_memory_max_allocated_gib"] == 0.0
        )
        assert "model_flops_utilization" not in props  # no peak for a CPU
        assert props["model_tflops_per_device"] * 1e12 / props[
            "dataset_tokens_per_second_per_gpu"
        ] == pytest.approx(row["model_flops_per_token"])
        assert row["observer_ratio"] > 0 and row["hf_samples_per_second"]["bare"][0] > 0
    # LoRA skips the frozen weights' gradients: fewer FLOPs per token than full fine-tuning
    assert (
        rows["tiny-lora-b2-s64"]["model_flops_per_token"]
        < rows["tiny-full-b2-s64"]["model_flops_per_token"]
    )
    oom = rows["tiny-full-b2-s64-oom"]
    assert oom["properties"] == {"is_valid": 0} and oom["gpu_oom"]
    table = proc.stdout[proc.stdout.index("Device: CPU") :]
    for title in ("tok/s", "step p50 s", "TFLOP/s", "MFU", "J/token", "peak GiB", "wrapped/bare"):
        assert title in table
