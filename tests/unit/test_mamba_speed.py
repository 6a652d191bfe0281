"""A hybrid's Mamba-2 layers in the step time: which scan path a version runs, and its price."""

from __future__ import annotations

import dataclasses

import pytest

from ado_actuators.sfttrainer.plan.model.mamba import (
    MambaLayers,
    layer_kinds,
    mamba_layers,
    scan_note,
    scan_path,
)
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    Parallelism,
    TrainingConfiguration,
    Tuning,
)
from ado_actuators.sfttrainer.plan.speed.devices import device_named
from ado_actuators.sfttrainer.plan.speed.mamba import mamba_parts
from ado_actuators.sfttrainer.plan.speed.step_time import ModelShape, step_time

H100 = device_named("NVIDIA-H100-80GB-HBM3")
# granite-4.0-h-tiny's Mamba layers (catalog/model_shapes.yaml)
TINY = MambaLayers(layers=36, hidden=1536, heads=48, head_dim=64, state=128)
SHAPE = ModelShape(
    layers=40,
    attention_width=1536,
    activated_width=1536 + 2 * 1024,
    matmul_params=1_000_000_000,
    total_params=7_000_000_000,
    trainable_params=1_000_000,
    attention_layers=4,
    hidden=1536,
    mamba=TINY,
)


def configuration(
    version: str, length: int = 4096, checkpointing: bool = False
) -> TrainingConfiguration:
    return TrainingConfiguration(
        tuning=Tuning(method="lora"),
        parallelism=Parallelism(gpus=1, gpu_model="NVIDIA-H100-80GB-HBM3"),
        batch=Batch(per_device_batch=2, model_max_length=length, sample_tokens=length),
        kernels=Kernels(checkpointing="non_reentrant" if checkpointing else "none"),
        fms_hf_tuning_version=version,
    )


def test_the_package_list_decides_the_scan_path():
    # 3.0.0 to 3.1.0 pin mamba-ssm and causal-conv1d; 3.2.2's list has neither
    assert scan_path("3.1.0") == "fused" and scan_path("3.0.0") == "fused"
    assert scan_path("3.2.2") == "torch"
    assert scan_path("no-such-version") == "torch"
    assert "fused kernels" in scan_note("fused", "3.1.0")
    assert "torch path" in scan_note("torch", "3.2.2") and "3.2.2" in scan_note("torch", "3.2.2")


def test_the_mamba_layers_are_read_from_config_json():
    config = {
        "model_type": "granitemoehybrid",
        "hidden_size": 1536,
        "layer_types": ["mamba"] * 3 + ["attention"],
        "mamba_n_heads": 48,
        "mamba_d_state": 128,
    }
    found = mamba_layers(config)
    assert found is not None
    assert (found.layers, found.heads, found.head_dim, found.state) == (3, 48, 64, 128)
    assert found.projected == 2 * 3072 + 2 * 128 + 48  # z, x B C, dt
    assert mamba_layers({**config, "layer_types": ["attention"] * 4}) is None
    assert mamba_layers({"model_type": "llama", "hidden_size": 8}) is None
    bamba = {"model_type": "bamba", "num_hidden_layers": 4, "attn_layer_indices": [2]}
    assert layer_kinds(bamba) == ["mamba", "mamba", "attention", "mamba"]


def test_the_fused_scan_is_many_times_faster_than_the_torch_path():
    fused = mamba_parts(TINY, configuration("3.1.0"), H100)
    torch = mamba_parts(TINY, configuration("3.2.2"), H100)
    assert set(fused) == {"mamba_scan", "mamba_conv"}
    assert torch["mamba_scan"] > 20 * fused["mamba_scan"]
    assert torch["mamba_conv"] > fused["mamba_conv"]
    whole_fused = step_time(SHAPE, configuration("3.1.0"), H100)
    whole_torch = step_time(SHAPE, configuration("3.2.2"), H100)
    assert whole_torch.tokens_per_second_per_gpu < whole_fused.tokens_per_second_per_gpu / 5
    # a model without Mamba layers is priced as before, whatever the version
    plain = dataclasses.replace(SHAPE, mamba=None)
    assert "mamba_scan" not in step_time(plain, configuration("3.2.2"), H100).parts


@pytest.mark.parametrize("version", ["3.1.0", "3.2.2"])
def test_the_scan_costs_more_with_length_and_recompute(version):
    short = mamba_parts(TINY, configuration(version, 1024), H100)["mamba_scan"]
    long = mamba_parts(TINY, configuration(version, 8192), H100)["mamba_scan"]
    assert long > 7 * short  # eight times the tokens
    again = mamba_parts(TINY, configuration(version, 8192, checkpointing=True), H100)
    assert again["mamba_scan"] == pytest.approx(long * 4 / 3)  # forward, recompute, backward x2


def test_the_torch_paths_inter_chunk_states_grow_faster_than_the_tokens():
    per_token = [
        mamba_parts(TINY, configuration("3.2.2", n), H100)["mamba_scan"] / n for n in (2048, 65536)
    ]
    assert per_token[1] > per_token[0]


def test_a_hybrid_row_says_which_scan_path_it_assumed():
    pytest.importorskip("transformers")
    from ado_actuators.sfttrainer.plan.speed.prediction import predict_speed

    config = {
        "model_type": "granitemoehybrid",
        "vocab_size": 100,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "layer_types": ["mamba", "attention"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 16,
        "shared_intermediate_size": 32,
        "mamba_n_heads": 4,
        "mamba_d_head": 32,
        "mamba_d_state": 8,
        "mamba_expand": 2,
    }
    found = predict_speed(dataclasses.replace(configuration("3.2.2"), config=config, shape=None))
    assert found.step is not None and "mamba_scan" in found.step.parts
    assert any(note.startswith("Mamba-2 scan: transformers' torch path") for note in found.notes)
    assert found.notes[0].startswith("regime not validated: a Mamba-2 hybrid")
