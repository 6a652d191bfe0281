"""The memory formula's reading of gradient accumulation under FSDP, against torch's FSDP itself:
transformers' Trainer runs every micro-batch of a step but the last under FSDP's no_sync, and
each device then holds the whole of the gradients, not its shard (plan/memory/bound.py's
`gradients_whole`). Two CPU ranks over gloo wrap the tiny Llama and report the bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.plan.memory.bound import memory_bound
from ado_actuators.sfttrainer.plan.model.architecture import count_parameters
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Parallelism,
    Precision,
    TrainingConfiguration,
)

pytestmark = pytest.mark.slow
PROBE = Path(__file__).resolve().parents[1] / "fsdp_no_sync_probe.py"


def test_under_no_sync_each_rank_holds_the_whole_gradients_as_the_bound_counts(
    tiny_model_dir, tmp_path
):
    out = tmp_path / "grads.json"
    subprocess.run(
        [sys.executable, str(PROBE), str(tiny_model_dir), str(out)], check=True, timeout=300
    )
    measured = json.loads(out.read_text())
    counts = count_parameters(json.loads((tiny_model_dir / "config.json").read_text()))

    def gradients(steps: int) -> float:
        configuration = TrainingConfiguration(
            parallelism=Parallelism(gpus=2),
            precision=Precision(torch_dtype="float32"),
            batch=Batch(gradient_accumulation_steps=steps),
        )
        return memory_bound(counts, configuration).parts["gradients"]

    # FSDP pads its flat parameter to split evenly and aligns each original one: a few bytes more
    assert measured["no_sync"] == pytest.approx(gradients(2), rel=0.01)
    assert measured["synced"] == pytest.approx(gradients(1), rel=0.01)
    assert measured["no_sync"] == pytest.approx(2 * measured["synced"], rel=0.01)
