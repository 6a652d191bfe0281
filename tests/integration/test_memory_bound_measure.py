"""The certain-OOM check through the real measurement path (measure(), below ado).

A model directory that holds only config.json reaches the bound before any check that needs
a tokenizer or weights: too big for one GPU -> is_valid = 0, nothing launched; small enough
-> measured as today (here: refused by the node for its missing tokenizer, not invalid).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.execute.environment import installed_fms_hf_tuning
from ado_actuators.sfttrainer.plan.memory.verdict import PROPERTY

pytestmark = pytest.mark.slow
DATASET = "news-chars-512-entries-4096"
A100 = "NVIDIA-A100-SXM4-80GB"
LLAMA_405B = dict(
    model_type="llama",
    vocab_size=128256,
    hidden_size=16384,
    intermediate_size=53248,
    num_hidden_layers=126,
    num_attention_heads=128,
    num_key_value_heads=8,
    tie_word_embeddings=False,
    torch_dtype="bfloat16",
)
LLAMA_8B = dict(
    LLAMA_405B,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
)


@pytest.fixture(scope="module")
def params(tmp_path_factory, tiny_model_dir) -> SFTTrainerParameters:
    root = tmp_path_factory.mktemp("membound")
    data = root / "data"
    data.mkdir()
    generate(
        data / datasets.dataset_filename(DATASET),
        datasets.get_shape(DATASET),
        entries=32,
        progress=False,
    )
    models = {"tiny": {"Vanilla": str(tiny_model_dir)}}
    for name, config in {"llama3.1-405b": LLAMA_405B, "llama-8b-config-only": LLAMA_8B}.items():
        directory = root / "models" / name
        directory.mkdir(parents=True)
        (directory / "config.json").write_text(json.dumps(config))  # and nothing else
        models[name] = {"Vanilla": str(directory)}
    return SFTTrainerParameters(
        data_directory=str(data),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map=models,
        stall_timeout_seconds=120,
    )


def entity(**overrides):
    return {
        "model_name": "tiny",
        "model_max_length": 64,
        "batch_size": 2,
        "number_gpus": 1,
        "gpu_model": A100,
        "dataset_id": DATASET,
        "max_steps": 2,
        "gradient_accumulation_steps": 1,
        "torch_dtype": "float32",
        "fms_hf_tuning_version": installed_fms_hf_tuning(),
        **overrides,
    }


def launched(params: SFTTrainerParameters, label: str) -> list[Path]:
    return list(Path(params.output_dir).glob(f"*/{label}-*"))


@pytest.mark.parametrize(
    "experiment", ["finetune_full_benchmark-v1.0.0", "finetune_lora_benchmark-v1.0.0"]
)
def test_a_config_only_405b_model_is_invalid_without_launching(params, experiment):
    outcome = measure(
        entity(model_name="llama3.1-405b", torch_dtype="bfloat16"), experiment, params, label="big"
    )
    assert isinstance(outcome, Invalid) and outcome.gpu_oom, outcome
    assert "certain GPU out of memory" in outcome.reason and "has 80 GiB" in outcome.reason
    assert outcome.properties[PROPERTY] > 80
    assert not launched(params, "big")


def test_turned_off_the_same_model_goes_on_to_the_node_as_today(params):
    off = params.model_copy(update={"memory_bound_check": False})
    outcome = measure(
        entity(model_name="llama3.1-405b"), "finetune_full_benchmark-v1.0.0", off, label="off"
    )
    assert isinstance(outcome, Failed) and "tokenizer" in outcome.reason


def test_a_config_only_model_that_fits_is_measured_as_today(params):
    """Today: the node refuses a model directory without a tokenizer (not is_valid = 0)."""
    outcome = measure(
        entity(model_name="llama-8b-config-only", torch_dtype="bfloat16"),
        "finetune_full_benchmark-v1.0.0",
        params,
        label="fits",
    )
    assert isinstance(outcome, Failed) and "tokenizer" in outcome.reason


def test_a_model_that_fits_trains_and_reports_its_bound(params):
    outcome = measure(
        entity(), "finetune_full_benchmark-v1.0.0", params, label="tiny", use_cpu=True
    )
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    bound = outcome.properties[PROPERTY]
    assert 0.25 < bound < 0.3  # a ~130k-parameter model: the CUDA context allowance dominates
    record = outcome.metadata["gpu_memory_bound"]
    assert record["checked"] is True and record["device_memory_gib"] == 80
