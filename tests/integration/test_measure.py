"""One entity, end to end below ado: resolve, validate, plan, launch real training, classify.

Faults are real: a missing file, an exception raised in the trainer at step k, a rank that
kills itself or hangs (FAULT_ENV is read by the trainer process).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.contract.guided import race_group
from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.contract.trainer_io import FAULT_ENV
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.execute.environment import installed_fms_hf_tuning
from ado_actuators.sfttrainer.ledger.dominance import configuration
from ado_actuators.sfttrainer.ledger.record import Record

pytestmark = pytest.mark.slow
DATASET = "news-chars-512-entries-4096"
FULL = "finetune_full_benchmark-v1.0.0"


@pytest.fixture(scope="module")
def params(tmp_path_factory, tiny_model_dir) -> SFTTrainerParameters:
    root = tmp_path_factory.mktemp("measure")
    data = root / "data"
    data.mkdir()
    generate(
        data / datasets.dataset_filename(DATASET),
        datasets.get_shape(DATASET),
        entries=64,
        progress=False,
    )
    return SFTTrainerParameters(
        data_directory=str(data),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map={"tiny": {"Vanilla": str(tiny_model_dir)}},
        stall_timeout_seconds=120,
        # these tests inject one fault after another into the same entity: each must launch
        oom_dominance=False,
    )


def entity(**overrides):
    return {
        "model_name": "tiny",
        "model_max_length": 96,
        "batch_size": 2,
        "number_gpus": 0,
        "dataset_id": DATASET,
        "max_steps": 2,
        "gradient_accumulation_steps": 1,
        "torch_dtype": "float32",
        "fms_hf_tuning_version": installed_fms_hf_tuning(),
        **overrides,
    }


def run(params, experiment="finetune_full_benchmark-v1.0.0", use_cpu=False, **overrides):
    return measure(entity(**overrides), experiment, params, label="t", use_cpu=use_cpu)


@pytest.mark.parametrize(
    "experiment",
    [
        "finetune_full_benchmark-v1.0.0",
        "finetune_lora_benchmark-v1.0.0",
        "finetune_pt_benchmark-v1.0.0",
    ],
)
def test_full_lora_and_prompt_tuning_measure(params, experiment):
    outcome = run(
        params.model_copy(update={"aim_dashboard_url": "https://aim.example"}), experiment
    )
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    assert outcome.metadata["distributed_type"] == "NO"  # one process: no distributed mode
    props = outcome.properties
    assert props["is_valid"] == 1
    assert props["dataset_tokens_per_second"] > 0
    assert props["dataset_tokens_per_second_per_gpu"] == props["dataset_tokens_per_second"]
    assert props["cpu_compute_utilization"] > 0
    assert 0 < props["cpu_memory_utilization"] < 100
    assert props["gpu_memory_utilization_peak"] == 0.0
    assert props["train_tokens_per_second"] > 0
    # beyond the spec: present, and consistent with each other
    assert props["train_step_seconds_p50"] <= props["train_step_seconds_p90"]
    assert props["train_step_seconds_cv_percent"] >= 0
    assert (
        props["gpu_energy_joules_per_token"] == 0.0 and props["gpu_memory_max_allocated_gib"] == 0.0
    )
    assert "model_flops_utilization" not in props  # no peak for a CPU
    per_token = outcome.metadata["model_flops_per_token"]
    assert per_token > 0
    assert props["model_tflops_per_device"] * 1e12 / props[
        "dataset_tokens_per_second_per_gpu"
    ] == pytest.approx(per_token)
    assert outcome.metadata["flash_attention"] is False
    assert any("flash" in note for note in outcome.metadata["notes"])
    assert outcome.metadata["steps"] == 2
    # what the row cost: the devices were held for the training and all around it
    assert props["measurement_seconds"] > props["train_runtime"]
    assert props["warmup_seconds"] == 0.0  # no auto_stop_method: nothing left out
    # two steps are too few for an interval: none, and a note says why (never a 0)
    assert "dataset_tokens_per_second_ci95_percent" not in props
    assert (
        "dataset_tokens_per_second_ci95_percent omitted: 2 measured step(s): an interval "
        "needs at least 6 (3 batches of 2 steps)"
    ) in outcome.metadata["notes"]
    assert outcome.metadata["aim_dashboard_url"] == "https://aim.example"
    # without aim_db no AIM repository is written (it would be deleted unread); the
    # samples are in the rank reports, which stay with the logs
    assert outcome.metadata.get("aim_run_hash") is None
    workdir = Path(outcome.metadata["workdir"])
    assert not (workdir / "aim").exists() and (workdir / "reports" / "rank-0.json").exists()


def test_two_ranks_over_gloo_with_fsdp_and_ddp_configs(params):
    """What this covers on CPU: both accelerate configs render, launch 2 ranks and measure.
    What it does not: FSDP sharding. accelerate runs either config on CPU as MULTI_CPU, plain
    DDP over gloo, and the trainer's report says so (on GPUs it says FSDP / MULTI_GPU)."""
    for backend in ("FSDP", "DDP"):
        outcome = run(
            params,
            use_cpu=True,
            number_gpus=2,
            batch_size=4,
            distributed_backend=backend,
            gpu_model="NVIDIA-A100-SXM4-80GB",
        )
        assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
        assert outcome.metadata["distributed_type"] == "MULTI_CPU", backend
        config = Path(outcome.metadata["workdir"], "accelerate_config.yaml").read_text()
        assert f"distributed_type: {'FSDP' if backend == 'FSDP' else 'MULTI_GPU'}" in config
        props = outcome.properties
        assert props["dataset_tokens_per_second_per_gpu"] == pytest.approx(
            props["dataset_tokens_per_second"] / 2
        )
        assert props["train_tokens_per_second"] == pytest.approx(
            2 * props["train_tokens_per_gpu_per_second"]
        )


def test_stop_after_seconds_stops_early_and_omits_token_estimates(params):
    outcome = run(params, max_steps=-1, num_train_epochs=50.0, stop_after_seconds=2)
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    assert "train_tokens_per_second" not in outcome.properties
    assert "train_tokens_per_gpu_per_second" not in outcome.properties
    assert outcome.metadata["stopped_by"]
    # stopped long before 50 epochs of 64 entries at batch size 2 (counted in steps, not seconds)
    assert outcome.metadata["steps"] < 50 * 64 // 2
    assert outcome.properties["train_runtime"] >= 2
    # counted over the steps that ran, not HF's planned 50 epochs over the runtime
    props = outcome.properties
    assert props["train_steps_per_second"] * props["train_runtime"] == pytest.approx(
        outcome.metadata["steps"]
    )
    # how precise the throughput is, over every step this machine had time for
    steps, counted = (
        outcome.metadata["steps"],
        outcome.metadata.get("dataset_tokens_per_second_ci95"),
    )
    if steps >= 6:
        assert props["dataset_tokens_per_second_ci95_percent"] >= 0
        assert counted["batches"] * counted["steps_per_batch"] + counted["steps_left_out"] == steps
    else:
        assert "dataset_tokens_per_second_ci95_percent" not in props and counted is None
    assert props["measurement_seconds"] > props["train_runtime"]


LABELLED_LENGTH = 512
"""Where the tiny tokenizer reaches the responses of news-chars-512 (385 to 437 tokens in),
which fms-hf-tuning trains on: at shorter lengths every label is masked (the next test)."""


def as_row(outcome: Measured) -> dict:
    """A measured outcome as ado's table of properties has it, with what sources.py adds from
    the result's metadata."""
    from ado_actuators.sfttrainer.report.machine import fingerprint
    from ado_actuators.sfttrainer.report.table import MACHINE

    fields = entity(model_max_length=LABELLED_LENGTH, max_steps=8)
    return {
        "experiment_id": "SFTTrainer.finetune_full_benchmark-v1.0.0",
        **{k: str(v) for k, v in (fields | outcome.properties).items()},
        MACHINE: [fingerprint(outcome.metadata)],
    }


def test_the_same_configuration_twice_starts_from_the_same_loss_on_the_same_machine(params):
    """Real training, twice, one seed: the loss properties and the machine block of each row,
    and the comparison of the two finds no loss parity broken and no machine apart."""
    from ado_actuators.sfttrainer.report.compare import compare
    from ado_actuators.sfttrainer.report.table import space_table

    first, second = (run(params, max_steps=8, model_max_length=LABELLED_LENGTH) for _ in range(2))
    for outcome in (first, second):
        assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
        props = outcome.properties
        assert props["train_loss_finite"] == 1.0 and props["train_loss_rose"] in (0.0, 1.0)
        assert props["train_loss_first_step"] > 0 and props["train_loss_last_tenth"] > 0
        window = outcome.metadata["train_loss"]
        assert (window["window_steps"], window["tenth_steps"]) == (8, 3)
        machine = outcome.metadata["machine"]
        assert machine["cpu_model"] and machine["cpu_cores_usable"] >= 1
        assert (machine["gpus"], machine["interconnect"]) == ([], "no GPU")
        assert machine["torch_threads"] >= 1 and machine["nodes"] == 1
    (pair,) = compare(space_table([as_row(first)]), space_table([as_row(second)]), "again").pairs
    assert pair.parity.dtype == "float32" and pair.parity.holds, pair.parity.text()
    assert pair.loss_flags == () and pair.machine_differences == ()
    assert dict(pair.point.machine)["fms-hf-tuning"] == installed_fms_hf_tuning()


def test_a_length_that_cuts_every_response_off_trains_nothing_and_says_so(params):
    """fms-hf-tuning trains only what follows the response template; at 96 tokens the tiny
    tokenizer has not reached it in any entry: every label is masked, the loss is 0 / 0."""
    outcome = run(params, max_steps=2)
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    assert outcome.properties["train_loss_finite"] == 0.0
    assert "train_loss_first_step" not in outcome.properties
    assert outcome.metadata["train_loss"]["unlabelled_steps"] == [1, 2]
    assert any(
        "every label of those steps' batches was masked" in note
        for note in outcome.metadata["notes"]
    )


def test_configuration_invalid_entity_is_answered_without_launching(params):
    values = entity(number_gpus=2, batch_size=3, gpu_model="NVIDIA-A100-SXM4-80GB")
    outcome = measure(values, "finetune_full_benchmark-v1.0.0", params, label="invalid-entity")
    assert isinstance(outcome, Invalid) and not outcome.gpu_oom
    assert "batch_size 3 is not divisible by number_gpus 2" in outcome.reason
    assert not list(Path(params.output_dir).glob("*/invalid-entity-*"))  # nothing launched


def with_record(params, path: Path):
    return params.model_copy(update={"oom_dominance": True, "oom_record_path": str(path)})


def test_gpu_out_of_memory_is_invalid_and_answers_its_larger_neighbours(
    params, monkeypatch, tmp_path
):
    monkeypatch.setenv(FAULT_ENV, "oom@1")
    recording = with_record(params, tmp_path / "ooms.jsonl")
    outcome = run(recording)
    assert isinstance(outcome, Invalid) and outcome.gpu_oom
    assert outcome.metadata["oom_record"] == {"recorded": str(tmp_path / "ooms.jsonl")}
    # a larger batch is answered from the record, naming the run's log, and launches nothing
    launched = set(Path(params.output_dir).glob("*/*"))
    larger = run(recording, batch_size=4)
    assert isinstance(larger, Invalid) and larger.gpu_oom, larger
    assert larger.metadata["answered_by"] == "oom_dominance"
    assert (
        f"Its log: {outcome.metadata['log']} (workdir {outcome.metadata['workdir']}"
        in larger.reason
    )
    assert Path(outcome.metadata["log"]).is_file()
    assert set(Path(params.output_dir).glob("*/*")) == launched


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
    outcome = run(
        params,
        use_cpu=True,
        number_gpus=2,
        batch_size=4,
        distributed_backend="DDP",
        gpu_model="NVIDIA-A100-SXM4-80GB",
    )
    assert isinstance(outcome, Failed)
    assert "without a report" in outcome.reason or "SIGKILL" in outcome.reason


def test_hung_rank_is_stopped_by_the_watchdog(params, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "hang@1")
    quick = params.model_copy(update={"stall_timeout_seconds": 8})
    outcome = run(quick)  # a missed stop would hang here until pytest's timeout fails it
    assert isinstance(outcome, Failed) and "(stall timeout 8 s)" in outcome.reason


def test_missing_dataset_names_the_file_and_the_command(params):
    outcome = run(params, dataset_id="news-chars-2048-entries-4096")
    assert isinstance(outcome, Failed)
    assert "news-chars-2048-entries-4096.jsonl does not exist" in outcome.reason
    assert (
        "sfttrainer_generate_dataset_text --dataset-id news-chars-2048-entries-4096 -o"
        in outcome.reason
    )


def test_missing_model_directory_fails_with_a_reason(params, tmp_path):
    gone = params.model_copy(update={"model_map": {"tiny": {"Vanilla": str(tmp_path / "nothing")}}})
    outcome = run(gone)
    assert isinstance(outcome, Failed)
    assert "nothing" in outcome.reason


def test_a_version_without_a_registry_release_fails_saying_so(params):
    outcome = run(params, fms_hf_tuning_version="3.0.0.1")
    assert isinstance(outcome, Failed)
    assert "fms-hf-tuning 3.0.0.1 has no release on the package registry" in outcome.reason
    assert "choose another fms_hf_tuning_version" in outcome.reason


def test_stability_reports_fractions_over_five_runs_with_mixed_outcomes(
    params, monkeypatch, tmp_path
):
    # repeats 0 and 1 run out of GPU memory, repeat 2 crashes, repeats 3 and 4 run clean
    monkeypatch.setenv(FAULT_ENV, "0:oom@1,1:oom@2,2:exception@1")
    # a record whose OOM of a smaller batch would answer this configuration, were it asked:
    # the stability experiment never asks it, and its OOMs are not recorded
    stability = "finetune_full_stability-v1.0.0"
    record = Record(tmp_path / "ooms.jsonl")
    smaller = configuration(
        entity_values(entity(batch_size=1)), stability, params.model_map["tiny"]["Vanilla"]
    )
    record.add(smaller, {"label": "seeded"})
    seeded = record.path.read_text()
    outcome = run(with_record(params, record.path), stability)
    assert record.path.read_text() == seeded
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    assert outcome.properties == {
        "f_gpu_oom": 0.4,
        "f_other_error": 0.2,
        "f_no_error": 0.4,
        "is_valid": 1,
    }
    runs = outcome.metadata["runs"]
    assert [(r["repeat"], r["outcome"]) for r in runs] == [
        (0, "gpu_oom"),
        (1, "gpu_oom"),
        (2, "error"),
        (3, "completed"),
        (4, "completed"),
    ]
    assert "CUDA out of memory" in runs[0]["reason"] and "step 2" in runs[1]["reason"]
    assert "Injected trainer crash" in runs[2]["reason"]
    assert runs[3]["reason"] is None and len({r["workdir"] for r in runs}) == 5


def test_gpus_requested_where_the_trainer_sees_no_cuda_fail_before_training(params):
    """number_gpus 1 where torch has no CUDA: it would train on the CPU and be stored as a GPU
    figure. (That GPUs which cannot be sampled fail too is covered with NVML's own failure and
    a stand-in NVML in tests/unit: on this machine the CUDA check comes first.)"""
    # flash_attn off: with it on, the environment check refuses the run even earlier
    outcome = run(params, number_gpus=1, gpu_model="NVIDIA-A100-SXM4-80GB", flash_attn=False)
    assert isinstance(outcome, Failed), outcome
    assert outcome.reason.startswith("the configuration cannot run as requested: number_gpus > 0")
    assert "measure on the CPU with number_gpus: 0" in outcome.reason


@pytest.mark.parametrize("offline", [True, False])
def test_uncached_hub_model_names_the_download_command(params, monkeypatch, offline):
    """Offline by setting, or online with a hub that refuses connections (the other branch:
    huggingface_hub fixes its offline mode and endpoint at import, so both are switched
    where it reads them, and the endpoint is a port held bound, so nothing else takes it)."""
    import socket

    from huggingface_hub import constants

    refusing = socket.socket()
    refusing.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    if not offline:
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{refusing.getsockname()[1]}")
    hub = params.model_copy(update={"model_map": {"tiny": {"Vanilla": "example-org/not-cached"}}})
    try:
        outcome = run(hub)
    finally:
        refusing.close()
    assert isinstance(outcome, Failed)
    assert "example-org/not-cached is not in the cache" in outcome.reason
    if offline:
        assert "offline mode is on" in outcome.reason
    else:
        assert "the hub did not serve it (ConnectionError" in outcome.reason, outcome.reason
        assert "Connection refused" in outcome.reason and "Offline" not in outcome.reason
    assert f"sfttrainer_download_hf_weights -i models.yaml -o {params.hf_home}" in outcome.reason
    assert "`tiny: {Vanilla: example-org/not-cached}`" in outcome.reason


def test_with_racing_on_a_plain_walks_measurement_races_its_groups_recorded_fastest(params):
    """`racing: true` without a guided walk: the record of measured speeds (ledger/
    measured_speeds.py, under data_directory) names the group's fastest, here a batch-8 row far
    faster than a CPU runs, and the measurement stops after its warm-up and 20 measured steps,
    valid, its row saying by how much it lost and to what. Its own row then joins the record,
    never as the group's fastest."""
    from ado_actuators.sfttrainer.contract.outcomes import Measured as Row
    from ado_actuators.sfttrainer.engine.race import Race
    from ado_actuators.sfttrainer.ledger.measured_speeds import MeasuredSpeeds

    racing = params.model_copy(update={"racing": True})
    steady = {
        "auto_stop_method": "STEADY_CI95_1PCT",
        "auto_stop_max_seconds": 120,  # far past the race: only a stalled warm-up reaches it
        "num_train_epochs": 10000,
        "max_steps": -1,
    }
    incumbent = {"is_valid": 1, "dataset_tokens_per_second": 1e9, "train_loss_finite": 1}
    Race(racing, FULL, entity(**steady, batch_size=8), None).record(Row(properties=incumbent))
    outcome = run(racing, **steady, model_max_length=16)
    assert isinstance(outcome, Measured), getattr(outcome, "reason", "")
    props, notes = outcome.properties, "\n".join(outcome.metadata["notes"])
    assert props["is_valid"] == 1 and props["raced_behind_percent"] > 99
    assert "batch_size 8, model_max_length 96, number_gpus 0" in notes, notes
    assert outcome.metadata["measured_steps"] == 20  # STEADY's own window would need more
    record = MeasuredSpeeds(racing.measured_speeds_file())  # type: ignore[arg-type]
    found = record.fastest(race_group(FULL, entity(**steady)), excluding="")
    assert found is not None and found.speed == 1e9  # the raced row leads nothing
