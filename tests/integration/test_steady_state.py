"""Both auto_stop_methods for real: two ranks on CPU through the engine (no ado).
WARMUP_60S_STABLE_120S_OR_10_STEPS trains about three minutes, and every reported figure must
cover the same window; STEADY_CI95_1PCT, capped at STEADY_CAP seconds, must stop both ranks at
the same step, sooner, and report the interval it stopped on."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.contract.outcomes import Measured
from ado_actuators.sfttrainer.contract.trainer_io import RankReport
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.execute.environment import installed_fms_hf_tuning
from ado_actuators.sfttrainer.stopping.steady import STEADY_CI95_1PCT
from ado_actuators.sfttrainer.stopping.warmup_stable import WARMUP_60S_STABLE_120S_OR_10_STEPS

pytestmark = pytest.mark.slow
DATASET = "news-chars-512-entries-4096"
WARMUP, STABLE, STABLE_STEPS = 60.0, 120.0, 10
STEADY_CAP = 25.0


def measure_with(method: dict, root: Path, tiny_model_dir: Path):
    data = root / "data"
    data.mkdir()
    generate(
        data / datasets.dataset_filename(DATASET),
        datasets.get_shape(DATASET),
        entries=64,
        progress=False,
    )
    params = SFTTrainerParameters(
        data_directory=str(data),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map={"tiny": {"Vanilla": str(tiny_model_dir)}},
        stall_timeout_seconds=300,
    )
    entity = {
        "model_name": "tiny",
        "model_max_length": 64,
        "batch_size": 2,
        "number_gpus": 2,
        "gpu_model": "NVIDIA-A100-SXM4-80GB",
        "distributed_backend": "DDP",
        "dataset_id": DATASET,
        "max_steps": -1,
        "num_train_epochs": 10000.0,
        "gradient_accumulation_steps": 1,
        "torch_dtype": "float32",
        "fms_hf_tuning_version": installed_fms_hf_tuning(),
        **method,
    }
    outcome = measure(
        entity, "finetune_full_benchmark-v1.0.0", params, label="steady", use_cpu=True
    )
    assert isinstance(outcome, Measured), getattr(outcome, "reason", outcome)
    reports = RankReport.read_all(Path(outcome.metadata["workdir"]) / "reports")
    return outcome, reports


@contextlib.contextmanager
def one_cpu():
    """This process and the ranks it launches (they inherit its affinity) on one CPU: the
    spec's method trains for three minutes whatever the pace, and both ranks busy on both
    cores would stall the other test worker for all of them. Which steps end each phase does
    not depend on the pace (the assertions below); the adaptive method's noise does, so it
    keeps every CPU."""
    every = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(every)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, every)


@pytest.fixture(scope="module")
def measured(tmp_path_factory, tiny_model_dir):
    method = {"auto_stop_method": WARMUP_60S_STABLE_120S_OR_10_STEPS}
    with one_cpu():
        return measure_with(method, tmp_path_factory.mktemp("steady"), tiny_model_dir)


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory, tiny_model_dir):
    method = {"auto_stop_method": STEADY_CI95_1PCT, "auto_stop_max_seconds": STEADY_CAP}
    return measure_with(method, tmp_path_factory.mktemp("adaptive"), tiny_model_dir)


def test_both_ranks_stopped_together_by_the_method(measured):
    _outcome, reports = measured
    assert len(reports) == 2
    assert len(reports[0].steps) == len(reports[1].steps)
    assert reports[0].steps[-1].step == reports[1].steps[-1].step
    assert all(
        r.stopped_by == f"auto_stop_method={WARMUP_60S_STABLE_120S_OR_10_STEPS}" for r in reports
    )
    assert reports[0].warmup_steps == reports[1].warmup_steps > 0


def agreed_step(reports, first: int, crossed) -> int | None:
    """The step (index) at which ranks that OR their proposals act: the first from `first` on
    where `crossed(report, index)` holds on any rank. Each rank judges by its own clock, so
    the rank that did not propose may see the limit not quite reached."""
    count = len(reports[0].steps)
    return next((i for i in range(first, count) if any(crossed(r, i) for r in reports)), None)


def test_the_window_starts_after_the_warm_up_on_both_ranks(measured):
    _, reports = measured
    warm = reports[0].warmup_steps

    def warmed_up(r, i):  # the step ends WARMUP or more after the rank's first step start
        return r.steps[i].end - r.steps[0].start >= WARMUP

    def measured_enough(r, i):  # STABLE seconds past the warm-up's end, STABLE_STEPS steps
        return r.steps[i].end - r.steps[warm - 1].end >= STABLE and i + 1 - warm >= STABLE_STEPS

    # how many steps fit in a phase depends on the machine; where each phase ends does not
    assert agreed_step(reports, 0, warmed_up) == warm - 1
    assert agreed_step(reports, warm, measured_enough) == len(reports[0].steps) - 1
    assert len(reports[0].steps) - warm >= STABLE_STEPS


def test_step_count_and_tokens_in_the_report_are_the_window(measured):
    outcome, reports = measured
    props, rank0 = outcome.properties, reports[0]
    # the window is a step number on: both ranks' steps from rank 0's first after the warm-up
    first = rank0.steps[rank0.warmup_steps].step
    window = [s for r in reports for s in r.steps if s.step >= first]
    measured_steps = len(rank0.steps) - rank0.warmup_steps
    assert outcome.metadata["measured_steps"] == measured_steps
    assert len(window) == 2 * measured_steps
    runtime = props["train_runtime"]
    assert runtime == pytest.approx(max(s.end for s in window) - min(s.start for s in window))
    assert props["train_steps_per_second"] * runtime == pytest.approx(measured_steps)
    assert props["dataset_tokens_per_second"] * runtime == pytest.approx(
        sum(s.dataset_tokens for s in window)
    )
    assert props["train_samples_per_second"] * runtime == pytest.approx(
        2 * measured_steps
    )  # batch 2
    assert props["train_tokens_per_second"] * runtime == pytest.approx(
        sum(s.padded_tokens for s in window)
    )
    durations = sorted(s.end - s.start for s in rank0.steps[rank0.warmup_steps :])
    assert (
        durations[0]
        <= props["train_step_seconds_p50"]
        <= props["train_step_seconds_p90"]
        <= durations[-1]
    )
    per_token = outcome.metadata["model_flops_per_token"]
    assert props["model_tflops_per_device"] * 1e12 / props[
        "dataset_tokens_per_second_per_gpu"
    ] == pytest.approx(per_token)


def test_steady_ci95_stops_both_ranks_together_and_sooner(adaptive, measured):
    outcome, reports = adaptive
    assert len(reports) == 2
    assert [s.step for s in reports[0].steps] == [s.step for s in reports[1].steps]
    assert all(r.stopped_by == f"auto_stop_method={STEADY_CI95_1PCT}" for r in reports)
    # both judged the same shared series, so both ended the same way at the same step
    assert reports[0].auto_stop == reports[1].auto_stop
    stop = reports[0].auto_stop
    assert stop.method == STEADY_CI95_1PCT and stop.max_seconds == STEADY_CAP
    assert stop.ended_by in {"target", "cap"}  # which one depends on the machine's noise
    assert reports[0].warmup_steps == reports[1].warmup_steps == stop.warmup_steps
    trained = max(s.end for r in reports for s in r.steps) - min(r.steps[0].start for r in reports)
    spec = max(s.end for r in measured[1] for s in r.steps) - min(
        r.steps[0].start for r in measured[1]
    )
    assert trained < spec and spec >= WARMUP + STABLE
    if stop.ended_by == "cap":
        # the first step end past the cap (both counted from the first start all ranks saw),
        # so the step before it ended short of the cap, however long the steps took
        before_last = max(r.steps[-2].end for r in reports) - min(r.steps[0].start for r in reports)
        assert before_last < STEADY_CAP <= trained
    assert outcome.metadata["auto_stop"] == stop.model_dump()


def test_steady_ci95_reports_its_interval_and_its_warm_up(adaptive):
    outcome, reports = adaptive
    props, stop = outcome.properties, reports[0].auto_stop
    assert stop.steady_state_found, "a tiny model on CPU settles within 10 steps of the first"
    warm = stop.warmup_steps
    assert warm >= 11 and props["warmup_seconds"] == pytest.approx(
        reports[0].steps[warm].start - reports[0].steps[0].start
    )
    assert outcome.metadata["measured_steps"] == stop.measured_steps == len(reports[0].steps) - warm
    # the interval the ranks stopped on is the row's: the same steps, the same arithmetic
    assert props["dataset_tokens_per_second_ci95_percent"] == pytest.approx(
        stop.ci95_percent, rel=1e-6
    )
    if stop.ended_by == "target":
        assert stop.ci95_percent <= 1.0 and stop.measured_steps >= 20
    else:
        assert any("target not reached" in n for n in outcome.metadata["notes"])
