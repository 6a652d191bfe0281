"""The one training configuration (plan/model/training.py): read once from the entity, its
experiment and config.json, and what the memory and the speed models each read of it agree."""

from __future__ import annotations

import pytest
from training_configuration import configuration_of

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.engine.measurement import Resolved, resolve
from ado_actuators.sfttrainer.plan.memory.verdict import behaviour_of
from ado_actuators.sfttrainer.plan.model.architecture import PROMPT_TUNING_VIRTUAL_TOKENS
from ado_actuators.sfttrainer.plan.model.training import FastKernels
from ado_actuators.sfttrainer.plan.speed.step_time import attention_kernel, fused_attention

CATALOG = catalog_data()
GPTQ_LORA = CATALOG.experiment("finetune_gtpq-lora_benchmark-v1.0.0")
LORA = CATALOG.experiment("finetune_lora_benchmark-v1.0.0")
PROMPT_TUNING = CATALOG.experiment("finetune_pt_benchmark-v1.0.0")


def values(**entity):
    return entity_values(
        {
            "model_name": "mistral-7b-v0.1",
            "model_max_length": 512,
            "batch_size": 8,
            "number_gpus": 2,
            "gpu_model": "NVIDIA-A100-SXM4-80GB",
            **entity,
        }
    )


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (None, FastKernels()),
        (["true", "true", "true"], FastKernels(True, True, True)),  # GPTQ-LoRA's, as it sets them
        (["True", "False", "True"], FastKernels(True, False, True)),
        (["yes", "0", "t"], FastKernels(True, False, True)),  # transformers' string_to_bool
    ],
)
def test_fast_kernels_are_read_as_fms_hf_tuning_parses_them(words, expected):
    assert FastKernels.of(words) == expected


def test_a_word_fms_hf_tuning_cannot_parse_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"fast_kernels: 'maybe'"):
        FastKernels.of(["maybe", "True", "True"])


def test_gptq_loras_fast_kernels_are_on_for_memory_and_speed_alike():
    """The experiment passes `--fast_kernels true true true`: fused loss, RMSNorm and RoPE, for
    the memory formula and the step time alike; an entity's own setting replaces it for both."""
    for entity, on in [({}, True), ({"fast_kernels": ["False", "False", "False"]}, False)]:
        configuration = configuration_of(values(**entity), GPTQ_LORA, {})
        behaviour = behaviour_of(configuration, "mistral")
        assert (
            behaviour.fused_loss == "in_place",
            configuration.kernels.fast_kernels.fast_rms_layernorm,
        ) == (on, on)
        assert configuration.kernels.fast_kernels.any is on  # what the step time reads
    plain = configuration_of(values(), LORA, {})
    assert behaviour_of(plain, "mistral").fused_loss is None
    assert not plain.kernels.fast_kernels.any


def test_the_per_device_batch_and_the_model_length_are_read_once_for_every_reader():
    configuration = configuration_of(values(), PROMPT_TUNING, {})
    assert configuration.batch.per_device_batch == 4
    assert configuration.model_length == 512 + PROMPT_TUNING_VIRTUAL_TOKENS
    lora = configuration_of(values(), LORA, {})
    assert lora.model_length == 512 and lora.tuning.adapted_modules == lora.tuning.target_modules
    assert configuration.tuning.adapted_modules == ()


def test_resolve_reads_config_json_once_and_carries_it(tmp_path, monkeypatch):
    from ado_actuators.sfttrainer.catalog import model_shapes
    from ado_actuators.sfttrainer.engine import measurement

    reads = []
    real = model_shapes.find_model_config

    def counted(*args, **kwargs):
        reads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(measurement, "find_model_config", counted)
    entity = {"model_name": "llama3.1-8b", "model_max_length": 512, "batch_size": 4}
    entity |= {"number_gpus": 1, "gpu_model": "NVIDIA-A100-SXM4-80GB"}
    resolved = resolve(entity, LORA, None, str(tmp_path))
    assert isinstance(resolved, Resolved) and len(reads) == 1
    assert resolved.training.config == resolved.found.config
    assert resolved.training.config["model_type"] == "llama"


def test_the_attention_that_runs_is_one_reading_for_memory_and_speed():
    """flash_attn false leaves the pinned transformers release's default for the family (read
    from its source: plan/model/releases.py); the memory formula and the step time both price
    that one, flash-attn 2 where it is asked for."""
    llama = {"model_type": "llama"}
    for flash, runs in [(True, "flash_attention_2"), (False, "sdpa")]:
        configuration = configuration_of(values(flash_attn=flash), LORA, llama)
        assert configuration.kernels.attention == runs
        assert fused_attention(configuration)  # both skip the causal mask's upper half
        assert attention_kernel(configuration) == ("fa2" if flash else "sdpa")


def test_whether_the_model_checkpoints_each_layer_is_one_reading_for_memory_and_speed():
    """fms-hf-tuning 2.x pins transformers releases whose model forward checkpoints each layer's
    call (FSDP's unit then runs inside the checkpoint), 3.1 on a release whose layers checkpoint
    themselves: the memory's release behaviour and the step time's kernels read the same."""
    llama = {"model_type": "llama"}
    for version, by_model in [("2.8.2", True), ("3.1.0", False)]:
        configuration = configuration_of(values(fms_hf_tuning_version=version), LORA, llama)
        assert configuration.kernels.checkpointed_by_model is by_model
        assert behaviour_of(configuration, "llama").checkpointed_by_model is by_model


def test_mixed_precision_is_read_from_the_entity_the_experiment_and_accelerate():
    """GPTQ-LoRA's experiment passes `--fp16 true`: autocast in float16 over its float16 weights,
    so the returned logits are converted to fp32 as under any mixed precision."""
    gptq = configuration_of(values(torch_dtype="float16"), GPTQ_LORA, {})
    assert (gptq.precision.mixed_precision, gptq.precision.autocast_dtype) == (True, "float16")
    for entity, expected in [
        ({}, (False, None)),
        ({"bf16": True}, (True, "bfloat16")),
        ({"accelerate_config_mixed_precision": "fp16"}, (True, "float16")),
        ({"accelerate_config_mixed_precision": "fp8"}, (True, None)),
    ]:
        found = configuration_of(values(**entity), LORA, {})
        assert (found.precision.mixed_precision, found.precision.autocast_dtype) == expected, entity
