"""One-process trainings of the tiny Llama through the real wrapper, fms-hf-tuning and AIM."""

from __future__ import annotations

import itertools
import json
import shutil
import statistics

import pytest
from tiny_model import write_text_dataset

from ado_actuators.sfttrainer.contract.trainer_io import RankOutcome, TrainerJob
from ado_actuators.sfttrainer.metrics.aggregate import benchmark_properties

pytestmark = pytest.mark.slow

BATCH, ACCUM, STEPS, MAX_SEQ = 2, 2, 3, 64
ENTRIES = BATCH * ACCUM * STEPS  # every entry is trained exactly once


def make_job(workdir, **fields) -> TrainerJob:
    return TrainerJob(report_dir=workdir / "reports", **fields)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, tiny_model_dir, trainer_tools):
    workdir = tmp_path_factory.mktemp("full")
    data = write_text_dataset(workdir / "data.jsonl", ENTRIES, max_words=120)
    job = make_job(
        workdir,
        aim_repo=str(workdir / "aim"),
        run_labels={"entity": "tiny-full", "experiment": "finetune_full_benchmark-v1.0.0"},
        sample_interval_seconds=0.1,
    )
    argv = trainer_tools.spec_fms_args(
        tiny_model_dir,
        data,
        max_steps=STEPS,
        batch_size=BATCH,
        grad_accum=ACCUM,
        max_seq_length=MAX_SEQ,
        log_level="debug",
    )
    run = trainer_tools.run_trainer(workdir, job, argv)
    run.data = data
    return run


def test_a_successful_run_writes_one_ok_report_and_exits_0(full_run):
    assert full_run.returncode == 0, full_run.describe()
    report = full_run.report
    assert report.outcome is RankOutcome.OK and report.failure is None
    assert (report.rank, report.local_rank, report.world_size) == (0, 0, 1)
    assert report.stopped_by is None and report.warmup_steps == 0


def test_every_optimisation_step_is_timed_in_order(full_run):
    steps = full_run.report.steps
    assert [s.step for s in steps] == [1, 2, 3]
    for s in steps:
        assert s.start < s.end and s.dataset_tokens > 0
    for a, b in itertools.pairwise(steps):
        assert a.end <= b.start


def test_dataset_tokens_are_exactly_the_spec_count_of_the_trained_entries(
    full_run, tiny_model_dir, trainer_tools
):
    expected = trainer_tools.spec_dataset_tokens(tiny_model_dir, full_run.data, MAX_SEQ)
    assert len(expected) == ENTRIES
    # the data exercise both truncation and the EOS fms appends to untruncated entries
    assert any(n == MAX_SEQ for n in expected) and any(n < MAX_SEQ for n in expected)
    assert sum(s.dataset_tokens for s in full_run.report.steps) == sum(expected)


def test_steps_carry_samples_positions_and_sequence_lengths(
    full_run, trainer_tools, tiny_model_dir
):
    steps = full_run.report.steps
    assert [s.samples for s in steps] == [BATCH * ACCUM] * STEPS
    assert all(s.padded_tokens >= s.dataset_tokens + s.samples - 1 for s in steps)
    # every sequence is at most MAX_SEQ long, and the EOS fms appends is a trained position
    assert all(
        s.dataset_tokens**2 / s.samples <= s.sequence_tokens_squared <= s.samples * MAX_SEQ**2
        for s in steps
    )


def test_parameters_are_counted_before_training(full_run):
    params = full_run.report.model_parameters
    assert params.total == params.trainable > params.matmul == params.trainable_matmul > 0
    assert (params.layers, params.attention_width) == (2, 64)
    assert full_run.report.gpu_memory_max_allocated_bytes == 0  # no CUDA here


def test_hf_end_of_train_metrics_and_library_versions_are_reported(full_run):
    hf = full_run.report.hf_metrics
    assert hf.train_runtime > 0 and hf.train_samples_per_second > 0
    assert hf.train_steps_per_second > 0 and hf.train_tokens_per_second > 0
    versions = full_run.report.versions
    assert versions["fms-hf-tuning"] == "3.2.2"
    assert {"torch", "transformers", "trl", "peft", "accelerate"} <= set(versions)


def test_process_is_sampled_during_training(full_run):
    report = full_run.report
    samples = report.process_samples
    assert samples, "no samples"
    assert max(s.cpu_percent for s in samples) > 0
    assert all(0 < s.memory_percent < 100 for s in samples)
    # A 3-step run can be shorter than the sampling interval: then the sample taken when
    # training ends is the only one, and it still covers the training.
    assert samples[-1].time >= report.steps[-1].end
    assert report.gpu_samples == []  # no gpu_indices


def test_figures_average_only_the_samples_in_the_measured_window(full_run):
    """First step start to last step end, as runtime: the closing sample (after the last step)
    and any taken during setup are left out; the window always holds one (taken before the
    first step's end where the sampler had not sampled yet)."""
    report = full_run.report
    start, end = report.steps[0].start, report.steps[-1].end
    inside = [s for s in report.process_samples if start <= s.time <= end]
    outside = [s for s in report.process_samples if not start <= s.time <= end]
    assert inside and outside
    props = benchmark_properties([report], number_gpus=0, stop_after_seconds=-1)
    assert props["cpu_compute_utilization"] == pytest.approx(
        statistics.fmean(s.cpu_percent for s in inside)
    )
    assert props["cpu_compute_utilization"] > 0


def test_flash_attention_request_is_adapted_on_cpu(full_run):
    report = full_run.report
    assert report.flash_attention is False
    assert any("use_flash_attn=True" in n and "CUDA is not available" in n for n in report.notes)


def test_aim_run_holds_the_labels_and_the_samples(full_run):
    import aim
    from aim.sdk.index_manager import RepoIndexManager

    report = full_run.report
    assert report.aim_run_hash
    repo = aim.Repo.from_path(str(full_run.workdir / "aim"))
    RepoIndexManager.get_index_manager(repo).index(report.aim_run_hash)
    run = repo.get_run(report.aim_run_hash)
    assert run is not None
    assert run["entity"] == "tiny-full"
    assert run["experiment"] == "finetune_full_benchmark-v1.0.0"
    assert run["outcome"] == "ok"
    metrics = {(m.name, json.dumps(m.context.to_dict())): m for m in run.metrics()}
    cpu = metrics[("cpu_percent", json.dumps({"rank": 0}))]
    memory = metrics[("memory_percent", json.dumps({"rank": 0}))]
    _, cpu_values = cpu.values.sparse_numpy()
    _, memory_values = memory.values.sparse_numpy()
    assert sorted(cpu_values) == sorted(s.cpu_percent for s in report.process_samples)
    assert len(memory_values) == len(report.process_samples)


# ---- LoRA, bfloat16, truncation by the tokenizer's model_max_length ---------------------------

SHORT_MODEL_MAX = 40


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir, trainer_tools):
    workdir = tmp_path_factory.mktemp("lora")
    model = shutil.copytree(tiny_model_dir, workdir / "model")
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["model_max_length"] = SHORT_MODEL_MAX  # smaller than --max_seq_length: it wins
    config_path.write_text(json.dumps(config))
    data = write_text_dataset(workdir / "data.jsonl", ENTRIES, max_words=60, seed=1)
    argv = trainer_tools.spec_fms_args(
        model,
        data,
        max_steps=STEPS,
        batch_size=BATCH,
        grad_accum=ACCUM,
        max_seq_length=512,
        peft_method="lora",
        torch_dtype="bfloat16",
        extra=("--target_modules", "q_proj", "v_proj", "--r", "4", "--lora_alpha", "16"),
    )
    run = trainer_tools.run_trainer(workdir, make_job(workdir), argv)
    run.data, run.model = data, model
    return run


def test_lora_in_bfloat16_trains(lora_run):
    assert lora_run.returncode == 0, lora_run.describe()
    assert lora_run.report.outcome is RankOutcome.OK
    assert len(lora_run.report.steps) == STEPS
    assert lora_run.report.aim_run_hash is None  # no aim_repo, no AIM


def test_tokens_are_exact_when_model_max_length_truncates(lora_run, trainer_tools):
    expected = trainer_tools.spec_dataset_tokens(lora_run.model, lora_run.data, 512)
    assert any(n == SHORT_MODEL_MAX for n in expected) and any(
        n < SHORT_MODEL_MAX for n in expected
    )
    assert sum(s.dataset_tokens for s in lora_run.report.steps) == sum(expected)


# ---- prompt tuning -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pt_run(tmp_path_factory, tiny_model_dir, trainer_tools):
    workdir = tmp_path_factory.mktemp("pt")
    data = write_text_dataset(workdir / "data.jsonl", BATCH * 2, max_words=80, seed=2)
    argv = trainer_tools.spec_fms_args(
        tiny_model_dir,
        data,
        max_steps=2,
        batch_size=BATCH,
        grad_accum=1,
        peft_method="pt",
    )
    run = trainer_tools.run_trainer(workdir, make_job(workdir), argv)
    run.data = data
    return run


def test_prompt_tuning_trains_despite_trls_token_accuracy_bug(
    pt_run, tiny_model_dir, trainer_tools
):
    assert pt_run.returncode == 0, pt_run.describe()
    report = pt_run.report
    assert report.outcome is RankOutcome.OK and len(report.steps) == 2
    assert any("prompt tuning" in n and "virtual tokens" in n for n in report.notes)
    # TRL's accuracy metric ran (and was logged) on aligned logits
    assert "mean_token_accuracy" in pt_run.output
    # virtual tokens are the model's, not the dataset's
    expected = trainer_tools.spec_dataset_tokens(tiny_model_dir, pt_run.data, MAX_SEQ)
    assert sum(s.dataset_tokens for s in report.steps) == sum(expected)
    # the virtual-token table is trainable but looked up: no weight-gradient matmuls
    params = report.model_parameters
    assert params.trainable > 0 and params.trainable_matmul == 0
