"""One entity, end to end below ado: resolve, validate, plan, launch real training, classify.

Faults are real: a missing file, an exception raised in the trainer at step k, a rank that
kills itself or hangs (FAULT_ENV is read by the trainer process).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.contract import FAULT_ENV
from ado_actuators.sfttrainer.measurement import installed_fms_hf_tuning, measure
from ado_actuators.sfttrainer.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.parameters import SFTTrainerParameters

pytestmark = pytest.mark.slow
DATASET = "news-chars-512-entries-4096"


@pytest.fixture(scope="module")
def params(tmp_path_factory, tiny_model_dir) -> SFTTrainerParameters:
    root = tmp_path_factory.mktemp("measure")
    data = root / "data"
    data.mkdir()
    generate(data / datasets.dataset_filename(DATASET), datasets.get_shape(DATASET),
             entries=64, progress=False)  # fmt: skip
    return SFTTrainerParameters(
        data_directory=str(data),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map={"tiny": {"Vanilla": str(tiny_model_dir)}},
        stall_timeout_seconds=120,
    )


def entity(**overrides):
    return {
        "model_name": "tiny", "model_max_length": 96, "batch_size": 2, "number_gpus": 0,
        "dataset_id": DATASET, "max_steps": 2, "gradient_accumulation_steps": 1,
        "torch_dtype": "float32", "fms_hf_tuning_version": installed_fms_hf_tuning(),
        **overrides,
    }  # fmt: skip


def run(params, experiment="finetune_full_benchmark-v1.0.0", use_cpu=False, **overrides):
    return measure(entity(**overrides), experiment, params, label="t", use_cpu=use_cpu)


@pytest.mark.parametrize(
    "experiment",
    ["finetune_full_benchmark-v1.0.0", "finetune_lora_benchmark-v1.0.0", "finetune_pt_benchmark-v1.0.0"],
)
def test_full_lora_and_prompt_tuning_measure(params, experiment):
    outcome = run(params.model_copy(update={"aim_dashboard_url": "https://aim.example"}), experiment)
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    props = outcome.properties
    assert props["is_valid"] == 1
    assert props["dataset_tokens_per_second"] > 0
    assert props["dataset_tokens_per_second_per_gpu"] == props["dataset_tokens_per_second"]
    assert props["cpu_compute_utilization"] > 0
    assert 0 < props["cpu_memory_utilization"] < 100
    assert props["gpu_memory_utilization_peak"] == 0.0
    assert props["train_tokens_per_second"] > 0
    assert outcome.metadata["flash_attention"] is False
    assert any("flash" in note for note in outcome.metadata["notes"])
    assert outcome.metadata["steps"] == 2
    assert outcome.metadata["aim_dashboard_url"] == "https://aim.example"
    # without aim_db no AIM repository is written (it would be deleted unread); the
    # samples are in the rank reports, which stay with the logs
    assert outcome.metadata.get("aim_run_hash") is None
    workdir = Path(outcome.metadata["workdir"])
    assert not (workdir / "aim").exists() and (workdir / "reports" / "rank-0.json").exists()


def test_two_ranks_over_gloo_with_fsdp_and_ddp_configs(params):
    for backend in ("FSDP", "DDP"):
        outcome = run(params, use_cpu=True, number_gpus=2, batch_size=4, distributed_backend=backend,
                      gpu_model="NVIDIA-A100-SXM4-80GB")
        assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
        props = outcome.properties
        assert props["dataset_tokens_per_second_per_gpu"] == pytest.approx(props["dataset_tokens_per_second"] / 2)
        assert props["train_tokens_per_second"] == pytest.approx(2 * props["train_tokens_per_gpu_per_second"])


def test_stop_after_seconds_stops_early_and_omits_token_estimates(params):
    outcome = run(params, max_steps=-1, num_train_epochs=50.0, stop_after_seconds=2)
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    assert "train_tokens_per_second" not in outcome.properties
    assert "train_tokens_per_gpu_per_second" not in outcome.properties
    assert outcome.metadata["stopped_by"]
    assert outcome.properties["train_runtime"] < 30


def test_configuration_invalid_entity_is_answered_without_launching(params):
    started = time.monotonic()
    values = entity(number_gpus=2, batch_size=3, gpu_model="NVIDIA-A100-SXM4-80GB")
    outcome = measure(values, "finetune_full_benchmark-v1.0.0", params, label="invalid-entity")
    assert isinstance(outcome, Invalid) and not outcome.gpu_oom
    assert "batch_size 3 is not divisible by number_gpus 2" in outcome.reason
    assert time.monotonic() - started < 5
    assert not list(Path(params.output_dir).glob("*/invalid-entity-*"))


def test_gpu_out_of_memory_is_invalid(params, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "oom@1")
    outcome = run(params)
    assert isinstance(outcome, Invalid) and outcome.gpu_oom


def test_illegal_memory_access_is_invalid(params, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "illegal_memory@2")
    assert isinstance(run(params), Invalid)


def test_exception_at_step_k_fails_with_the_reason(params, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "exception@2")
    outcome = run(params)
    assert isinstance(outcome, Failed)
    assert "RuntimeError" in outcome.reason


def test_killed_rank_fails(params, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "kill@1")
    outcome = run(params, use_cpu=True, number_gpus=2, batch_size=4, distributed_backend="DDP",
                  gpu_model="NVIDIA-A100-SXM4-80GB")
    assert isinstance(outcome, Failed)
    assert "without a report" in outcome.reason or "SIGKILL" in outcome.reason


def test_hung_rank_is_stopped_by_the_watchdog(params, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "hang@1")
    quick = params.model_copy(update={"stall_timeout_seconds": 8})
    started = time.monotonic()
    outcome = run(quick)
    assert isinstance(outcome, Failed) and "stall timeout" in outcome.reason
    assert time.monotonic() - started < 90


def test_missing_dataset_names_the_file_and_the_command(params):
    outcome = run(params, dataset_id="news-chars-2048-entries-4096")
    assert isinstance(outcome, Failed)
    assert "news-chars-2048-entries-4096.jsonl does not exist" in outcome.reason
    assert "sfttrainer_generate_dataset_text --dataset-id news-chars-2048-entries-4096 -o" in outcome.reason


def test_missing_model_directory_fails_with_a_reason(params, tmp_path):
    gone = params.model_copy(update={"model_map": {"tiny": {"Vanilla": str(tmp_path / "nothing")}}})
    outcome = run(gone)
    assert isinstance(outcome, Failed)
    assert "nothing" in outcome.reason


def test_other_fms_hf_tuning_version_fails_saying_what_is_installed(params):
    outcome = run(params, fms_hf_tuning_version="2.1.2")
    assert isinstance(outcome, Failed)
    assert f"fms-hf-tuning {installed_fms_hf_tuning()}" in outcome.reason
    assert "fms_hf_tuning_version" in outcome.reason


def test_stability_reports_fractions_over_five_runs(params, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "oom@1")
    outcome = run(params, "finetune_full_stability-v1.0.0")
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    assert outcome.properties == {"f_gpu_oom": 1.0, "f_other_error": 0.0, "f_no_error": 0.0, "is_valid": 1}
    assert len(outcome.metadata["runs"]) == 5


@pytest.mark.parametrize("offline", [True, False])
def test_uncached_hub_model_names_the_download_command(params, monkeypatch, offline):
    """Offline by setting, or because the hub does not answer (no network here)."""
    if not offline:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on discard
    hub = params.model_copy(update={"model_map": {"tiny": {"Vanilla": "example-org/not-cached"}}})
    outcome = run(hub)
    assert isinstance(outcome, Failed)
    assert "example-org/not-cached is not in the cache" in outcome.reason
    assert f"sfttrainer_download_hf_weights -i models.yaml -o {params.hf_home}" in outcome.reason
    assert "`tiny: {Vanilla: example-org/not-cached}`" in outcome.reason
