"""Failing ranks: injected faults (FAULT_ENV), bad arguments and SIGTERM, each a real process."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from tiny_model import write_text_dataset

from ado_actuators.sfttrainer.contract.trainer_io import FAULT_ENV, RankOutcome, TrainerJob

pytestmark = pytest.mark.slow

# fault runs share the CPU at once (import time dominates); one thread each keeps them fair
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
FAULTS = {"exception": "exception@2", "oom": "oom@1", "kill": "kill@1"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_text_dataset(tmp_path_factory.mktemp("fault-data") / "data.jsonl", 12)


@pytest.fixture(scope="module")
def fault_runs(tmp_path_factory, tiny_model_dir, data, trainer_tools):
    argv = trainer_tools.spec_fms_args(tiny_model_dir, data)
    started = {}
    for name, fault in FAULTS.items():
        workdir = tmp_path_factory.mktemp(f"fault-{name}")
        job = TrainerJob(report_dir=workdir / "reports", aim_repo=str(workdir / "aim"))
        env = {FAULT_ENV: fault, **ONE_THREAD}
        started[name] = (trainer_tools.start_trainer(workdir, job, argv, env=env), workdir, job)
    return {name: trainer_tools.finish_trainer(*args) for name, args in started.items()}


def test_exception_at_step_2_reports_error_after_one_timed_step(fault_runs):
    run = fault_runs["exception"]
    assert run.returncode not in (0, None), run.describe()
    report = run.report
    assert report.outcome is RankOutcome.ERROR
    assert report.failure.exception_type == "builtins.RuntimeError"
    assert "Injected trainer crash" in report.failure.message
    assert "step 2" in report.failure.message
    assert "maybe_fire" in report.failure.traceback_tail
    assert [s.step for s in report.steps] == [1]  # what ran before the crash is kept
    assert report.process_samples  # sampling stopped cleanly, not lost
    assert report.aim_run_hash  # AIM was opened and closed despite the crash


def test_cuda_oom_at_step_1_reports_gpu_oom(fault_runs):
    run = fault_runs["oom"]
    assert run.returncode not in (0, None), run.describe()
    assert run.report.outcome is RankOutcome.GPU_OOM
    assert "CUDA out of memory" in run.report.failure.message
    assert run.report.steps == []


def test_killed_rank_dies_by_sigkill_and_reports_nothing(fault_runs):
    run = fault_runs["kill"]
    assert run.returncode == -signal.SIGKILL, run.describe()
    assert run.reports == []


def test_arguments_fms_rejects_still_give_a_report(tmp_path, tiny_model_dir, data, trainer_tools):
    argv = trainer_tools.spec_fms_args(tiny_model_dir, data, peft_method="not-a-method")
    job = TrainerJob(report_dir=tmp_path / "reports")
    run = trainer_tools.run_trainer(tmp_path, job, argv)
    assert run.returncode not in (0, None), run.describe()
    assert run.report.outcome is RankOutcome.ERROR
    assert run.report.failure.exception_type == "builtins.SystemExit"
    assert "not-a-method" in run.output  # argparse said why


def test_sigterm_while_hung_still_writes_a_report(tmp_path, tiny_model_dir, data, trainer_tools):
    """accelerate/torchrun SIGTERMs the surviving ranks when one dies: they report too."""
    argv = trainer_tools.spec_fms_args(tiny_model_dir, data)
    job = TrainerJob(report_dir=tmp_path / "reports")
    proc = trainer_tools.start_trainer(tmp_path, job, argv, env={FAULT_ENV: "hang@2"})
    watchdog = threading.Timer(240, proc.kill)
    watchdog.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "sfttrainer: hanging" in line:
                os.kill(proc.pid, signal.SIGTERM)
                break
    finally:
        watchdog.cancel()
    run = trainer_tools.finish_trainer(proc, tmp_path, job, timeout=60)
    assert run.returncode == 1, "".join(lines)[-3000:] + run.describe()
    assert run.report.outcome is RankOutcome.ERROR
    assert "terminated by signal SIGTERM" in run.report.failure.message
    assert [s.step for s in run.report.steps] == [1]


def test_arguments_fms_would_silently_drop_refuse_the_run(
    tmp_path, tiny_model_dir, data, trainer_tools
):
    argv = trainer_tools.spec_fms_args(tiny_model_dir, data, extra=("--not_an_fms_flag", "1"))
    job = TrainerJob(report_dir=tmp_path / "reports")
    run = trainer_tools.run_trainer(tmp_path, job, argv)
    assert run.returncode == 1, run.describe()
    failure = run.report.failure
    assert failure.exception_type.endswith("adapt.SettingUnavailable")
    assert "does not recognise --not_an_fms_flag 1: it would train without them" in failure.message
    assert run.report.steps == []


def test_flash_attention_missing_on_cuda_refuses_the_run(
    tmp_path, tiny_model_dir, data, trainer_tools, monkeypatch
):
    """In-process, with CUDA's presence the only thing stood in for (no GPU here)."""
    from ado_actuators.sfttrainer.contract.trainer_io import JOB_FLAG, RankReport
    from ado_actuators.sfttrainer.trainer import adapt
    from ado_actuators.sfttrainer.trainer.__main__ import main

    monkeypatch.setattr(adapt, "cuda_available", lambda: True)
    monkeypatch.setattr(adapt, "flash_attn_installed", lambda: False)
    monkeypatch.setenv("TERMINATION_LOG_FILE", str(tmp_path / "termination.log"))
    monkeypatch.chdir(tmp_path)
    job = TrainerJob(report_dir=tmp_path / "reports")
    (tmp_path / "job.json").write_text(job.model_dump_json())
    argv = trainer_tools.spec_fms_args(tiny_model_dir, data)
    assert main([JOB_FLAG, str(tmp_path / "job.json"), *argv]) == 1
    (report,) = RankReport.read_all(job.report_dir)
    assert report.outcome is RankOutcome.ERROR and report.steps == []
    assert report.failure.exception_type.endswith("adapt.SettingUnavailable")
    assert "flash_attn: false" in report.failure.message
