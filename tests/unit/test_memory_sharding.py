"""Each FSDP sharding strategy's peak (plan/memory/fsdp.py, plan/memory/bound.py): FULL_SHARD
gathers the prefetched units, SHARD_GRAD_OP (ZeRO-2) keeps every unit gathered from its forward to
its backward, HYBRID_SHARD shards over a node's devices, NO_SHARD keeps everything whole."""

from __future__ import annotations

import pytest
from model_configs import LLAMA_31_8B

from ado_actuators.sfttrainer.catalog.entity import FIELDS
from ado_actuators.sfttrainer.plan.memory.verdict import assess
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Parallelism,
    TrainingConfiguration,
    Tuning,
)


def _peak(strategy: str, gpus: int = 4, nodes: int = 1, method: str = "none"):
    tuning = (
        Tuning(method=method, target_modules=("q_proj", "v_proj")) if method != "none" else Tuning()
    )
    configuration = TrainingConfiguration(
        model_name="llama3.1-8b",
        fms_hf_tuning_version=FIELDS["fms_hf_tuning_version"].default,
        config=LLAMA_31_8B,
        tuning=tuning,
        parallelism=Parallelism(
            gpus=gpus,
            nodes=nodes,
            backend="FSDP",
            fsdp_sharding_strategy=strategy,
            gpu_model="NVIDIA-A100-SXM4-80GB",
        ),
        batch=Batch(per_device_batch=1, model_max_length=1024),
    )
    return assess(configuration, hf_home="/nonexistent", enabled=True).prediction


@pytest.mark.parametrize("method", ["none", "lora"])
def test_shard_grad_op_peaks_above_full_shard_with_the_same_shards(method):
    full, grad_op = _peak("FULL_SHARD", method=method), _peak("SHARD_GRAD_OP", method=method)
    assert grad_op.gib > full.gib
    assert grad_op.phases["forward"]["fsdp_gathered"] > full.phases["forward"]["fsdp_gathered"]
    assert grad_op.phases["optimizer_step"] == full.phases["optimizer_step"]  # same shards


def test_no_shard_keeps_full_fine_tunings_states_whole_on_every_device():
    """Above both for full fine-tuning (gradients and AdamW's state whole); under LoRA the frozen
    weights whole are less than a shard beside every layer gathered (SHARD_GRAD_OP)."""
    assert _peak("NO_SHARD").gib > _peak("SHARD_GRAD_OP").gib > _peak("FULL_SHARD").gib
    lora = {s: _peak(s, method="lora").gib for s in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD")}
    assert lora["SHARD_GRAD_OP"] > lora["NO_SHARD"] > lora["FULL_SHARD"]


def test_shard_grad_op_gathers_every_layer_where_full_shard_gathers_two():
    full, grad_op = _peak("FULL_SHARD"), _peak("SHARD_GRAD_OP")
    root = (2 * 128256 * 4096 + 4096) * 2  # embedding, untied head, final norm; bf16
    layer = (full.phases["forward"]["fsdp_gathered"] - root) / 2
    assert grad_op.phases["forward"]["fsdp_gathered"] == pytest.approx(root + 32 * layer)


def test_hybrid_shard_over_two_nodes_is_full_shard_over_one_nodes_devices():
    hybrid = _peak("HYBRID_SHARD", gpus=8, nodes=2)
    full = _peak("FULL_SHARD", gpus=4)
    assert hybrid.phases == full.phases
    assert _peak("HYBRID_SHARD_ZERO2", gpus=8, nodes=2).phases == _peak("SHARD_GRAD_OP").phases
