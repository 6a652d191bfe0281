"""Every memory-relevant field moves the predicted peak, in the direction the physics says (issue
51): one Llama-3.1-8B configuration, one field changed at a time, through the same assessment the
preview and the actuator make (plan/memory/verdict.assess)."""

from __future__ import annotations

import dataclasses

import pytest
from model_configs import LLAMA_31_8B

from ado_actuators.sfttrainer.catalog.entity import FIELDS
from ado_actuators.sfttrainer.plan.memory.peak import widths
from ado_actuators.sfttrainer.plan.memory.verdict import assess
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    Parallelism,
    TrainingConfiguration,
    Tuning,
)

BASE = TrainingConfiguration(
    model_name="llama3.1-8b",
    fms_hf_tuning_version=FIELDS["fms_hf_tuning_version"].default,
    config=LLAMA_31_8B,
    parallelism=Parallelism(gpus=4, backend="FSDP", gpu_model="NVIDIA-A100-SXM4-80GB"),
    batch=Batch(per_device_batch=2, model_max_length=2048, sample_tokens=2048),
    kernels=Kernels(attention="sdpa", checkpointing="non_reentrant"),
)
LORA = Tuning(method="lora", target_modules=("q_proj", "v_proj"), lora_r=8)


def peak(**parts) -> float:
    """The predicted peak (GiB) of BASE with each given part's fields replaced."""
    changed = {
        name: dataclasses.replace(getattr(BASE, name), **fields) for name, fields in parts.items()
    }
    prediction = assess(dataclasses.replace(BASE, **changed), hf_home="/nonexistent", enabled=True)
    assert prediction.prediction is not None, prediction.prediction_skipped
    return prediction.prediction.gib


# (what changes, the larger peak's fields, the smaller's): each row one field, the physics' order
ORDERINGS = [
    (
        "sharding keeps every layer gathered",
        {"parallelism": {"fsdp_sharding_strategy": "SHARD_GRAD_OP"}},
        {},
    ),
    (
        "no sharding keeps every state whole",
        {"parallelism": {"fsdp_sharding_strategy": "NO_SHARD"}},
        {},
    ),
    ("AdamW's two states over 8-bit ones", {}, {"precision": {"optim": "adamw_8bit"}}),
    (
        "8-bit states over none",
        {"precision": {"optim": "adamw_8bit"}},
        {"precision": {"optim": "sgd"}},
    ),
    ("fp32 weights over bf16", {"precision": {"torch_dtype": "float32"}}, {}),
    ("no checkpointing keeps every layer's tensors", {"kernels": {"checkpointing": "none"}}, {}),
    ("eager attention keeps its scores", {"kernels": {"attention": "eager"}}, {}),
    ("full fine-tuning over LoRA", {}, {"tuning": dataclasses.asdict(LORA)}),
    (
        "a larger LoRA rank",
        {"tuning": {**dataclasses.asdict(LORA), "lora_r": 256}},
        {"tuning": dataclasses.asdict(LORA)},
    ),
    (
        "more LoRA targets",
        {
            "tuning": {
                **dataclasses.asdict(LORA),
                "target_modules": (
                    "q_proj",
                    "k_proj",
                    "v_proj",
                    "o_proj",
                    "gate_proj",
                    "up_proj",
                    "down_proj",
                ),
            }
        },
        {"tuning": dataclasses.asdict(LORA)},
    ),
    ("a longer sequence", {"batch": {"model_max_length": 4096, "sample_tokens": 4096}}, {}),
    ("a larger batch", {"batch": {"per_device_batch": 4}}, {}),
    ("fewer devices to shard over", {"parallelism": {"gpus": 2}}, {}),
]


@pytest.mark.parametrize(("why", "larger", "smaller"), ORDERINGS, ids=[o[0] for o in ORDERINGS])
def test_each_field_moves_the_peak_the_way_the_physics_says(why, larger, smaller):
    assert peak(**larger) > peak(**smaller), why


def test_reentrant_checkpointing_under_lora_holds_more_than_non_reentrant():
    """TRL makes the embedding's output require grad under reentrant checkpointing with PEFT."""
    lora = dataclasses.asdict(LORA)
    assert peak(tuning=lora, kernels={"checkpointing": "reentrant"}) >= peak(tuning=lora)


def test_mixed_precision_over_fp32_weights_on_one_device_adds_its_copies():
    fp32, one = {"torch_dtype": "float32"}, {"gpus": 1}
    mixed = {**fp32, "mixed_precision": True, "autocast_dtype": "bfloat16"}
    lora = dataclasses.asdict(LORA)  # the step's tensors, not the states, decide the peak
    assert peak(precision=mixed, parallelism=one, tuning=lora) != peak(
        precision=fp32, parallelism=one, tuning=lora
    )


def test_sdpa_and_flash_attention_keep_the_same_tensors():
    """On a GPU torch's SDPA runs a fused kernel too: both keep q, k, v, the output and the
    log-sum-exp, not the scores."""
    assert peak(kernels={"attention": "flash_attention_2"}) == peak()


MIXED = {"mixed_precision": True, "autocast_dtype": "bfloat16"}


def test_under_fsdp_mixed_precision_fp32_weights_train_the_shards_bf16_weights_are_upcast_to():
    """accelerate gives FSDP autocast's dtype as its param_dtype: every unit is gathered in 16
    bits, so fp32 weights add no whole-model 16-bit copy; under full fine-tuning bf16 weights
    are upcast to the same fp32 shards (issue 51's Llama-3-8B on 8 GPUs: 34.3 GiB against 18.7)."""
    fp32, bf16 = {"torch_dtype": "float32", **MIXED}, {"torch_dtype": "bfloat16", **MIXED}
    eight = {"gpus": 8}
    assert peak(precision=fp32, parallelism=eight) == peak(precision=bf16, parallelism=eight)
    # frozen weights are not upcast: fp32's shards are twice bf16's, and nothing else differs
    lora = dataclasses.asdict(LORA)
    frozen = 8_030_261_248  # Llama-3.1-8B's own weights (the adapters are fp32 in both)
    gained = (frozen * (4 - 2)) / 8 / 2**30
    wider = peak(precision=fp32, parallelism=eight, tuning=lora)
    assert wider - peak(precision=bf16, parallelism=eight, tuning=lora) == pytest.approx(gained)


def test_without_fsdp_autocast_over_fp32_weights_keeps_its_16_bit_copies():
    """One device: no FSDP, so autocast casts each fp32 weight itself, caches the copies of
    those that train, and the residual stream stays fp32; under FSDP the units arrive in 16 bits."""
    fp32 = dataclasses.replace(BASE.precision, torch_dtype="float32", **MIXED)
    for gpus, expected in ((1, (2, 4, "cached")), (4, (2, 2, "none"))):
        alone = dataclasses.replace(BASE.parallelism, gpus=gpus)
        assert widths(dataclasses.replace(BASE, precision=fp32, parallelism=alone)) == expected
