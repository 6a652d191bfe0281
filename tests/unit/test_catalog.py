"""The catalog ado sees: experiments, defaults (memoisation), domains."""

import pytest
from ado.schema.experiment import ParameterizedExperiment
from ado.schema.property import ConstitutivePropertyDescriptor
from ado.schema.property_value import ConstitutivePropertyValue

from ado_actuators.sfttrainer.actuator.plugin import SFTTrainer
from ado_actuators.sfttrainer.catalog.entity import FIELDS, entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data

BENCHMARKS = [
    "finetune_full_benchmark-v1.0.0",
    "finetune_lora_benchmark-v1.0.0",
    "finetune_pt_benchmark-v1.0.0",
    "finetune_gtpq-lora_benchmark-v1.0.0",
    "finetune_gptq-lora_benchmark-v1.0.0",
]


def experiments():
    return {e.identifier: e for e in SFTTrainer.catalog().experiments}


def defaults(experiment):
    return {v.property.identifier: v.value for v in experiment.defaultParameterization}


def test_catalog_offers_the_five_experiments_and_the_gptq_spelling():
    assert set(experiments()) == {*BENCHMARKS, "finetune_full_stability-v1.0.0"}


def test_gptq_spellings_are_the_same_experiment():
    found = experiments()
    a, b = (
        found["finetune_gtpq-lora_benchmark-v1.0.0"],
        found["finetune_gptq-lora_benchmark-v1.0.0"],
    )
    assert defaults(a) == defaults(b)
    assert a.metadata == b.metadata
    assert catalog_data().experiment(b.identifier) is catalog_data().experiment(a.identifier)


# The values (and Python types) sample stores written by earlier tools hold: ado embeds any
# other value in the experiment id, so changing one silently splits memoised results.
STORED_DEFAULTS = {
    "max_steps": -1,
    "num_train_epochs": 1.0,
    "stop_after_seconds": -1.0,
    "gradient_accumulation_steps": 4,
    "torch_dtype": "bfloat16",
    "optim": "adamw_torch",
    "bf16": 0,
    "gradient_checkpointing": 1,
    "gradient_checkpointing_use_reentrant": 0,
    "remove_unused_columns": 1,
    "dataset_kwargs_skip_prepare_dataset": 0,
    "flash_attn": 1,
    "enable_roce": 0,
    "fsdp_use_orig_params": 1,
    "fast_moe": 0,
    "number_nodes": 1,
    "dataset_id": "news-tokens-16384plus-entries-4096",
    "distributed_backend": "FSDP",
    "fms_hf_tuning_version": "2.1.2",
    "fsdp_sharding_strategy": "FULL_SHARD",
    "fsdp_state_dict_type": "FULL_STATE_DICT",
    "accelerate_config_mixed_precision": "no",
    "auto_stop_method": None,
    "fast_kernels": None,
    "dataset_image_field": None,
    "gpu_model": None,
    "accelerate_config_fsdp_transformer_layer_cls_to_wrap": None,
    "dataset_text_field": None,
}


@pytest.mark.parametrize("identifier", BENCHMARKS)
def test_benchmark_defaults_match_stored_values_and_types(identifier):
    found = defaults(experiments()[identifier])
    expected = dict(STORED_DEFAULTS)
    if "gptq" in identifier or "gtpq" in identifier:
        expected["torch_dtype"] = "float16"
    for name, value in expected.items():
        assert found[name] == value, name
        assert type(found[name]) is type(value), name
    if "lora" in identifier:
        assert (found["r"], found["lora_alpha"]) == (4, 16)


def test_stability_has_no_step_or_epoch_knobs_and_its_own_targets():
    stability = experiments()["finetune_full_stability-v1.0.0"]
    assert "max_steps" not in defaults(stability)
    assert [t.identifier for t in stability.targetProperties] == [
        "f_gpu_oom",
        "f_other_error",
        "f_no_error",
        "is_valid",
    ]


BEYOND_SPEC = [
    "train_step_seconds_p50",
    "train_step_seconds_p90",
    "train_step_seconds_cv_percent",
    "model_tflops_per_device",
    "model_flops_utilization",
    "gpu_energy_joules_per_token",
    "gpu_memory_max_allocated_gib",
    "gpu_memory_lower_bound_gib",
    "gpu_memory_predicted_gib",
    "dataset_tokens_per_second_per_gpu_predicted",
    "dataset_tokens_per_second_ci95_percent",
    "warmup_seconds",
    "measurement_seconds",
    "train_loss_first_step",
    "train_loss_last_tenth",
    "train_loss_finite",
    "train_loss_rose",
    "cpu_others_utilization",
    "raced_behind_percent",
    "raced_saved_seconds",
]


def test_benchmarks_measure_the_23_properties_then_the_new_ones():
    for identifier in BENCHMARKS:
        targets = [t.identifier for t in experiments()[identifier].targetProperties]
        assert len(targets) == len(set(targets)) == 23 + 20 == 23 + len(BEYOND_SPEC)
        assert "is_valid" in targets[:23] and "dataset_tokens_per_second" in targets[:23]
        assert targets[23:] == BEYOND_SPEC


def test_required_properties():
    for experiment in experiments().values():
        assert [p.identifier for p in experiment.requiredProperties] == [
            "model_name",
            "model_max_length",
            "batch_size",
            "number_gpus",
        ]


def test_seed_example_parameterization_gives_the_stored_experiment_id():
    """The id the spec's example CSV shows, so results memoise against stored data."""
    full = experiments()["finetune_full_benchmark-v1.0.0"]
    parameterized = ParameterizedExperiment(
        parameterization=[
            ConstitutivePropertyValue(
                value="3.0.0",
                property=ConstitutivePropertyDescriptor(identifier="fms_hf_tuning_version"),
            ),
            ConstitutivePropertyValue(
                value=30, property=ConstitutivePropertyDescriptor(identifier="stop_after_seconds")
            ),
        ],
        **full.model_dump(),
    )
    assert (
        str(parameterized.reference)
        == "SFTTrainer.finetune_full_benchmark-v1.0.0-fms_hf_tuning_version.3.0.0-stop_after_seconds.30"
    )


def test_model_name_accepts_models_only_a_model_map_knows():
    domain = experiments()["finetune_full_benchmark-v1.0.0"].requiredProperties[0].propertyDomain
    assert domain.valueInDomain("my-private-model")
    assert "granite-3.1-2b" in domain.values


def test_gptq_torch_dtype_is_float16_only():
    gptq = experiments()["finetune_gtpq-lora_benchmark-v1.0.0"]
    domain = next(
        p for p in gptq.optionalProperties if p.identifier == "torch_dtype"
    ).propertyDomain
    assert domain.values == ["float16"]


def test_hard_coded_settings_are_visible_in_metadata():
    lora = experiments()["finetune_lora_benchmark-v1.0.0"].metadata["parameters"]
    assert lora["target_modules_map"]["granite-13b-v2"] == ["c_attn", "c_proj"]
    assert lora["target_modules_map"]["llama-7b"] == ["q_proj", "k_proj"]
    gptq = experiments()["finetune_gtpq-lora_benchmark-v1.0.0"].metadata["parameters"]
    assert gptq["sft_trainer_arguments"]["auto_gptq"] == ["triton_v2"]
    assert gptq["weights_format"] == "GPTQ-Quantized"
    assert (
        experiments()["finetune_pt_benchmark-v1.0.0"].metadata["parameters"]["peft_method"] == "pt"
    )


def test_every_declared_field_is_offered_by_some_experiment():
    offered = {p.identifier for e in experiments().values() for p in e.optionalProperties}
    offered |= {p.identifier for e in experiments().values() for p in e.requiredProperties}
    assert offered == set(FIELDS)


def test_entity_values_normalise_what_ado_hands_back():
    values = entity_values(
        {
            "model_name": "m",
            "model_max_length": 512,
            "batch_size": 2,
            "number_gpus": 0,
            "bf16": 1,
            "distributed_backend": "None",
            "stop_after_seconds": 30,
        }
    )
    assert values.bf16 is True
    assert values.distributed_backend == "None"
    assert values.stop_after_seconds == 30.0
    assert values.gradient_accumulation_steps == 4
