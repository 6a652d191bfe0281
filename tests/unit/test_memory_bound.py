"""The memory lower bound: parameter counts from config.json alone, then bytes per device."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from model_configs import LLAMA_31_8B

from ado_actuators.sfttrainer.catalog.entity import GPU_MODELS
from ado_actuators.sfttrainer.contract.units import GIB
from ado_actuators.sfttrainer.metrics.gpu_memory import device_memory_bytes, memory_table
from ado_actuators.sfttrainer.plan.memory.bound import (
    CUDA_CONTEXT_FLOOR_BYTES,
    MemoryBound,
    memory_bound,
    weight_bits,
)
from ado_actuators.sfttrainer.plan.model.architecture import (
    UnsupportedArchitecture,
    count_parameters,
)
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    GradientSync,
    Parallelism,
    Precision,
    TrainingConfiguration,
    Tuning,
)

# config.json fields as published on the hub for each model
LLAMA_31_405B = dict(
    LLAMA_31_8B,
    hidden_size=16384,
    intermediate_size=53248,
    num_hidden_layers=126,
    num_attention_heads=128,
)
LLAMA_2_70B = dict(
    LLAMA_31_8B,
    vocab_size=32000,
    hidden_size=8192,
    intermediate_size=28672,
    num_hidden_layers=80,
    num_attention_heads=64,
)
LLAMA_32_1B = dict(
    LLAMA_31_8B,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    head_dim=64,
    tie_word_embeddings=True,
)
SMOLLM2_135M = dict(
    model_type="llama",
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    tie_word_embeddings=True,
)
MISTRAL_7B = dict(LLAMA_31_8B, model_type="mistral", vocab_size=32000)
MIXTRAL_8X7B = dict(MISTRAL_7B, model_type="mixtral", num_local_experts=8, num_experts_per_tok=2)
GRANITE_31_8B = dict(
    model_type="granite",
    vocab_size=49155,
    hidden_size=4096,
    intermediate_size=12800,
    num_hidden_layers=40,
    num_attention_heads=32,
    num_key_value_heads=8,
    tie_word_embeddings=True,
)
GRANITE_3B_A800M = dict(
    model_type="granitemoe",
    vocab_size=49155,
    hidden_size=1536,
    intermediate_size=512,
    num_hidden_layers=32,
    num_attention_heads=24,
    num_key_value_heads=8,
    num_local_experts=40,
    num_experts_per_tok=8,
    tie_word_embeddings=True,
)
SANTACODER = dict(
    model_type="gpt_bigcode",
    vocab_size=49280,
    n_embd=2048,
    n_layer=24,
    n_head=16,
    n_inner=8192,
    n_positions=2048,
    multi_query=True,
)


@pytest.mark.parametrize(
    "config, published",
    [
        (LLAMA_31_8B, 8_030_261_248),  # Llama-3.1-8B: "8.03B"
        (LLAMA_31_405B, 405_853_388_800),
        (LLAMA_2_70B, 68_976_648_192),
        (LLAMA_32_1B, 1_235_814_400),
        (SMOLLM2_135M, 134_515_008),
        (MISTRAL_7B, 7_241_732_096),
        (MIXTRAL_8X7B, 46_702_792_704),
        (GRANITE_31_8B, 8_170_864_640),
        (GRANITE_3B_A800M, 3_300_000_000),  # "3.3B"
        (SANTACODER, 1_124_886_528),
    ],
)
def test_published_parameter_counts_within_half_a_percent(config, published):
    assert count_parameters(config).total == pytest.approx(published, rel=0.005)


def test_llama_gqa_by_hand():
    counts = count_parameters(LLAMA_31_8B)
    hidden, kv_width = 4096, 8 * 128  # 8 kv heads of 4096 / 32
    assert counts.attention == 32 * (2 * hidden * hidden + 2 * hidden * kv_width)
    assert counts.mlp == 32 * 3 * hidden * 14336  # gated: gate, up, down
    assert counts.norms == 32 * 2 * hidden + hidden
    assert counts.embedding == counts.lm_head == 128256 * hidden  # untied
    shapes = {s.name: (s.inputs, s.outputs, s.count) for s in counts.linears}
    assert shapes["k_proj"] == (hidden, kv_width, 32) and shapes["q_proj"] == (hidden, hidden, 32)


def test_granite_dense_tied_head_counts_once():
    counts = count_parameters(GRANITE_31_8B)
    assert counts.lm_head == 0
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 12800 + 2 * 4096
    assert counts.total == 49155 * 4096 + 40 * per_layer + 4096


def test_moe_experts_and_router_by_hand():
    mixtral = count_parameters(MIXTRAL_8X7B)
    assert mixtral.mlp == 32 * (8 * 3 * 4096 * 14336 + 4096 * 8)
    granite = count_parameters(GRANITE_3B_A800M)
    assert granite.mlp == 32 * (40 * 3 * 1536 * 512 + 1536 * 40)
    # the router stays unquantized; the experts are block weights
    assert mixtral.quantizable == mixtral.attention + mixtral.mlp - 32 * 4096 * 8


def test_gpt_bigcode_multi_query_and_learned_positions():
    counts = count_parameters(SANTACODER)
    qkv = 2048 + 2 * 128
    assert counts.attention == 24 * (2048 * qkv + qkv + 2048 * 2048 + 2048)
    assert counts.embedding == (49280 + 2048) * 2048 and counts.lm_head == 0


def test_multimodal_counts_its_language_model_and_unknown_ones_raise():
    llava = {"model_type": "llava_next", "text_config": MISTRAL_7B, "vision_config": {}}
    assert count_parameters(llava).total == count_parameters(MISTRAL_7B).total
    with pytest.raises(UnsupportedArchitecture, match="granitemoehybrid"):
        count_parameters({"model_type": "granitemoehybrid", "hidden_size": 1})
    with pytest.raises(UnsupportedArchitecture, match="intermediate_size"):
        count_parameters({k: v for k, v in LLAMA_31_8B.items() if k != "intermediate_size"})


def test_weight_bits_read_from_the_configurations_shape():
    def bits(quantization):
        return weight_bits(TrainingConfiguration(config={**LLAMA_31_8B, **quantization}))

    assert bits({}) is None
    assert bits({"quantization_config": {"quant_method": "gptq", "bits": 4}}) == 4
    assert bits({"quantization_config": {"load_in_8bit": True}}) == 8
    with pytest.raises(UnsupportedArchitecture):
        bits({"quantization_config": {"quant_method": "fp8"}})


FULL = TrainingConfiguration()  # every weight trains, bfloat16, AdamW, one device


def test_full_fine_tuning_keeps_weights_gradients_and_two_adamw_states_in_the_model_dtype():
    params = count_parameters(MISTRAL_7B).total
    bf16 = memory_bound(count_parameters(MISTRAL_7B), FULL)
    assert bf16.parts["weights"] == bf16.parts["gradients"] == 2 * params
    assert bf16.parts["optimizer_state"] == 2 * 2 * params
    assert bf16.total == 8 * params + CUDA_CONTEXT_FLOOR_BYTES
    fp32 = memory_bound(
        count_parameters(MISTRAL_7B),
        TrainingConfiguration(precision=Precision(torch_dtype="float32")),
    )
    assert fp32.total == 16 * params + CUDA_CONTEXT_FLOOR_BYTES


@pytest.mark.parametrize(
    "settings, divisor",
    [
        (Parallelism(gpus=8), 8),  # FSDP FULL_SHARD (the default)
        (Parallelism(gpus=8, fsdp_sharding_strategy="SHARD_GRAD_OP"), 8),
        (Parallelism(gpus=8, nodes=2, fsdp_sharding_strategy="HYBRID_SHARD"), 4),
        (Parallelism(gpus=8, fsdp_sharding_strategy="NO_SHARD"), 1),
        (Parallelism(gpus=8, backend="DDP"), 1),
        (Parallelism(gpus=4, backend="None"), 1),  # DataParallel: all on device 0
        (Parallelism(gpus=8, backend="DDP", fast_moe=2), 8),
    ],
)
def test_sharding_follows_the_plan(settings, divisor):
    counts = count_parameters(MIXTRAL_8X7B)
    whole = memory_bound(counts, FULL).total - CUDA_CONTEXT_FLOOR_BYTES
    bound = memory_bound(counts, TrainingConfiguration(parallelism=settings))
    assert bound.shards == divisor
    assert bound.total - CUDA_CONTEXT_FLOOR_BYTES == pytest.approx(whole / divisor)


def test_fsdp_holds_the_gradients_whole_between_micro_batches_the_trainer_does_not_sync():
    """transformers' Trainer runs a step's micro-batches but the last under FSDP's no_sync,
    which accumulates the whole gradients on each device: the bound holds them whole, the
    weights and optimizer state still sharded. One micro-batch a step, or a trainer that
    reduces after each (Composer, DeepSpeed), keeps them sharded."""
    params = count_parameters(MISTRAL_7B).total

    def bound(steps: int, sync: GradientSync = "last") -> MemoryBound:
        return memory_bound(
            count_parameters(MISTRAL_7B),
            TrainingConfiguration(
                parallelism=Parallelism(gpus=4, gradient_sync=sync),
                batch=Batch(gradient_accumulation_steps=steps),
            ),
        )

    accumulated = bound(4)
    assert accumulated.parts["gradients"] == 2 * params  # bf16, whole
    assert accumulated.parts["weights"] == 2 * params / 4
    assert accumulated.gradient_shards == 1 and accumulated.shards == 4
    assert "(over 4 devices (FSDP FULL_SHARD), the gradients whole on each device: more " in (
        accumulated.describe()
    )
    for sharded in (bound(1), bound(4, "each")):
        assert sharded.parts["gradients"] == 2 * params / 4
        assert sharded.gradient_shards == 4 and "whole" not in sharded.describe()
    # NO_SHARD holds everything whole anyway: nothing for fewer micro-batches to win back, so
    # the bound does not say the micro-batches hold them whole (no advice on the accumulation)
    no_shard = memory_bound(
        count_parameters(MISTRAL_7B),
        TrainingConfiguration(
            parallelism=Parallelism(gpus=4, fsdp_sharding_strategy="NO_SHARD"),
            batch=Batch(gradient_accumulation_steps=4),
        ),
    )
    assert no_shard.parts["gradients"] == 2 * params and not no_shard.gradients_whole


def test_lora_trains_adapters_from_r_and_the_target_modules():
    counts = count_parameters(LLAMA_31_8B)
    lora = memory_bound(
        counts,
        TrainingConfiguration(
            tuning=Tuning(method="lora", lora_r=8, target_modules=("q_proj", "v_proj"))
        ),
    )
    adapters = 32 * 8 * ((4096 + 4096) + (4096 + 1024))
    assert lora.parts["gradients"] == 2 * adapters
    assert lora.parts["optimizer_state"] == 4 * adapters
    assert lora.parts["weights"] == 2 * (counts.total + adapters)
    # an unknown module name adds nothing rather than a guess
    unknown = memory_bound(
        counts, TrainingConfiguration(tuning=Tuning(method="lora", target_modules=("mystery",)))
    )
    assert unknown.parts["gradients"] == 0


def test_prompt_tuning_trains_the_virtual_tokens_only():
    bound = memory_bound(
        count_parameters(LLAMA_31_8B), TrainingConfiguration(tuning=Tuning(method="pt"))
    )
    assert bound.parts["gradients"] == 2 * 8 * 4096


def test_optimizers_other_than_adamw_count_less_never_more():
    counts = count_parameters(MISTRAL_7B)
    params = counts.total
    assert (
        memory_bound(counts, TrainingConfiguration(precision=Precision(optim="adamw_8bit"))).parts[
            "optimizer_state"
        ]
        == 2 * params
    )
    sgd = memory_bound(counts, TrainingConfiguration(precision=Precision(optim="sgd")))
    assert sgd.parts["optimizer_state"] == 0 and not sgd.notes  # momentum 0: no state at all
    paged = memory_bound(
        counts, TrainingConfiguration(precision=Precision(optim="paged_adamw_8bit"))
    )
    assert paged.parts["optimizer_state"] == 0
    assert paged.notes == (
        "optimizer state of paged_adamw_8bit not counted: paged to the host when short",
    )
    galore = memory_bound(counts, TrainingConfiguration(precision=Precision(optim="galore_adamw")))
    assert galore.parts["optimizer_state"] == 0
    assert galore.notes[0].startswith(
        "optimizer state of galore_adamw not counted: GaLore projects"
    )
    assert (
        memory_bound(counts, TrainingConfiguration(precision=Precision(optim="lomo"))).parts[
            "gradients"
        ]
        == 0
    )


def test_quantized_block_weights_at_their_bits():
    counts = count_parameters(MISTRAL_7B)
    four_bits = TrainingConfiguration(
        tuning=Tuning(method="lora"),
        precision=Precision(torch_dtype="float16"),
        config={**MISTRAL_7B, "quantization_config": {"quant_method": "gptq", "bits": 4}},
    )
    bound = memory_bound(counts, four_bits)
    assert bound.parts["weights"] == counts.quantizable / 2 + 2 * (
        counts.total - counts.quantizable
    )
    assert bound.notes == ("block weights at 4 bits",)
    # as a trace of the model's code holds them: every weight at the model's dtype
    traced = memory_bound(counts, four_bits, quantized=False)
    assert traced.parts["weights"] == 2 * counts.total and not traced.notes


def test_405b_cannot_fit_one_a100_but_an_8b_does():
    a100 = device_memory_bytes("NVIDIA-A100-SXM4-80GB")
    assert memory_bound(count_parameters(LLAMA_31_405B), FULL).total > a100
    assert (
        memory_bound(
            count_parameters(LLAMA_31_405B), TrainingConfiguration(parallelism=Parallelism(gpus=8))
        ).total
        > a100
    )
    assert memory_bound(count_parameters(LLAMA_31_8B), FULL).total < a100
    assert memory_bound(count_parameters(LLAMA_31_8B), FULL).gib == pytest.approx(
        8 * 8_030_261_248 / GIB + 0.25
    )


def test_every_catalog_gpu_model_has_a_cited_memory():
    for model in filter(None, GPU_MODELS):
        device = memory_table()[model]
        assert device.gib >= 16 and "datasheet" in device.source.lower()
    assert device_memory_bytes("Acme-X1") is None and device_memory_bytes(None) is None


def test_published_runs_all_need_more_than_the_bound_and_oom_is_caught():
    """benchmarks/memory_bound.py on fms-acceleration's A100-80GB reference tables."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "memory_bound.py"
    spec = importlib.util.spec_from_file_location("memory_bound_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    found = module.counts(module.evaluate())
    assert found["ran"] > 200
    assert found["ran_below_bound_violations"] == 0 and found["ran_called_certain_oom"] == 0
    assert found["out_of_memory_caught"] >= 20


def test_the_bound_reads_as_the_reason_and_the_metadata_show_it():
    counts = count_parameters(MISTRAL_7B)
    one = memory_bound(counts, FULL)
    assert one.describe() == (
        "weights 13.49 + gradients 13.49 + optimizer_state 26.98 GiB (one device) + CUDA context 0.25 GiB"
    )
    assert one.as_metadata() == {
        "lower_bound_gib": 54.205,
        "parts_gib": {
            "weights": 13.489,
            "gradients": 13.489,
            "optimizer_state": 26.978,
            "cuda_context": 0.25,
        },
        "shards": 1,
        "sharding": "one device",
        "notes": [],
    }
    two = memory_bound(
        counts,
        TrainingConfiguration(
            parallelism=Parallelism(gpus=2), precision=Precision(optim="paged_adamw_32bit")
        ),
    )
    assert two.describe() == (
        "weights 6.74 + gradients 6.74 + optimizer_state 0.00 GiB "
        "(over 2 devices (FSDP FULL_SHARD)) + CUDA context 0.25 GiB"
    )
    assert two.as_metadata()["notes"] == [
        "optimizer state of paged_adamw_32bit not counted: paged to the host when short"
    ]


@pytest.mark.parametrize("gpus, nodes, shards", [(8, 1, 8), (8, 2, 4), (2, 2, 1)])
def test_hybrid_shard_shards_within_a_node_only(gpus, nodes, shards):
    bound = memory_bound(
        count_parameters(MISTRAL_7B),
        TrainingConfiguration(
            parallelism=Parallelism(gpus=gpus, nodes=nodes, fsdp_sharding_strategy="HYBRID_SHARD")
        ),
    )
    assert bound.shards == shards
    where = (
        "whole on the one device of each node"
        if shards == 1
        else f"over the {shards} devices of a node"
    )
    assert bound.sharding == f"{where} (FSDP HYBRID_SHARD)"


def test_the_entitys_settings_are_what_is_bounded():
    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data

    values = entity_values(
        {
            "model_name": "m",
            "model_max_length": 512,
            "batch_size": 8,
            "number_gpus": 8,
            "number_nodes": 2,
            "gpu_model": "NVIDIA-A100-SXM4-80GB",
            "torch_dtype": "float16",
            "optim": "adamw_8bit",
            "distributed_backend": "DDP",
            "fsdp_sharding_strategy": "HYBRID_SHARD",
            "fast_moe": 2,
            "r": 16,
        }
    )
    lora = catalog_data().experiment("finetune_lora_benchmark-v1.0.0")
    four_bits = {"quantization_config": {"quant_method": "gptq", "bits": 4}}
    configuration = TrainingConfiguration.of(values, lora, four_bits)
    targets = tuple(catalog_data().target_modules("m"))
    tuning = configuration.tuning
    assert (tuning.method, tuning.lora_r, tuning.target_modules) == ("lora", 16, targets)
    assert configuration.precision.torch_dtype == "float16"
    assert configuration.precision.optim == "adamw_8bit"
    assert configuration.parallelism == Parallelism(
        gpus=8,
        nodes=2,
        backend="DDP",
        fsdp_sharding_strategy="HYBRID_SHARD",
        fast_moe=2,
        gpu_model="NVIDIA-A100-SXM4-80GB",
    )
    assert weight_bits(configuration) == 4


def test_a_device_can_allocate_nvidia_smis_total_less_the_cuda_context():
    """The predicted peak is compared with what a training process can allocate; the certain
    bound keeps the datasheet's figure, an upper bound."""
    import pydantic
    import pytest

    from ado_actuators.sfttrainer.metrics import gpu_memory

    mib = 2**20
    assert gpu_memory.allocatable_bytes("L40S") == 46068 * mib - 400 * mib
    assert gpu_memory.allocatable_bytes("NVIDIA-L40S") == gpu_memory.allocatable_bytes("L40S")
    assert device_memory_bytes("L40S") == 48 * 2**30
    assert "46068MiB" in gpu_memory.allocatable_source("L40S")
    # no nvidia-smi reading on record: the datasheet's figure, said so
    assert gpu_memory.allocatable_bytes("NVIDIA-H200") == 141 * 2**30 - 400 * mib
    assert gpu_memory.allocatable_source("NVIDIA-H200").startswith("no nvidia-smi total on record")
    assert gpu_memory.allocatable_bytes("Acme-X1") is None
    assert gpu_memory.allocatable_source(None) is None
    for device in memory_table().values():
        assert (device.total_mib is None) == (device.total_source is None)
        if device.total_mib:
            assert device.total_mib <= device.gib * 1024  # nvidia-smi never above the datasheet
    with pytest.raises(pydantic.ValidationError, match="total_mib and total_source go together"):
        gpu_memory.DeviceMemory(gib=1, source="x", total_mib=100)
