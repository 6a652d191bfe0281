"""RankReports -> properties, at the edges: an empty or zero-length window, a time limit of 0 or
1 s, Hugging Face's own figures, the units of TFLOP/s, and the reasons GPU sampling fails."""

import pytest

from ado_actuators.sfttrainer.contract.trainer_io import (
    GpuSample,
    GpuSampleFailure,
    HfTrainMetrics,
    ModelParameters,
    RankOutcome,
    RankReport,
    StepTiming,
)
from ado_actuators.sfttrainer.metrics.aggregate import (
    NoTrainingSteps,
    benchmark_properties,
    energy_note,
    gpu_sampling_problem,
    model_flops_per_token,
    warmup_end,
)

HF = HfTrainMetrics(
    train_samples_per_second=3.0, train_steps_per_second=0.5, train_tokens_per_second=1000.0
)


def step(i, start, end, tokens=100, samples=4, padded=512, squares=0):
    return StepTiming(
        step=i,
        start=start,
        end=end,
        dataset_tokens=tokens,
        samples=samples,
        padded_tokens=padded,
        sequence_tokens_squared=squares,
    )


def report(rank=0, steps=(), world=1, host="n0", hf=HF, **fields):
    return RankReport(
        rank=rank,
        local_rank=rank,
        world_size=world,
        hostname=host,
        outcome=RankOutcome.OK,
        steps=list(steps),
        hf_metrics=hf,
        **fields,
    )


def props(reports, number_gpus=1, stop_after_seconds=-1, **kw):
    return benchmark_properties(
        reports, number_gpus=number_gpus, stop_after_seconds=stop_after_seconds, **kw
    )


TWO_STEPS = [step(1, 0, 1), step(2, 1, 2)]


# ---- the window -------------------------------------------------------------------------------


def test_warm_up_that_took_every_step_leaves_the_whole_run_as_the_window():
    r = report(steps=TWO_STEPS, warmup_steps=2)
    assert warmup_end([r]) is None
    r.warmup_steps = 1
    assert warmup_end([r]) == 1


def test_the_window_starts_at_rank_0s_first_step_whatever_order_the_reports_come_in():
    r0, r1 = (
        report(0, [step(1, 0, 5), step(2, 10, 12)], 2),
        report(1, [step(1, 0, 9), step(2, 9, 12)], 2),
    )
    r0.warmup_steps, r1.warmup_steps = 1, 3  # only rank 0's count is read
    assert warmup_end([r1, r0]) == 10


def test_a_window_that_starts_after_the_last_step_has_no_steps():
    with pytest.raises(NoTrainingSteps, match="the trainer completed no optimisation step"):
        props([report(steps=TWO_STEPS)], since=5)


def test_steps_without_duration_are_no_training_time():
    with pytest.raises(NoTrainingSteps, match="non-positive training time 0"):
        props([report(steps=[step(1, 3, 3)])])


# ---- time limits and Hugging Face's figures ---------------------------------------------------


def test_without_warm_up_or_time_limit_hugging_faces_figures_are_kept():
    found = props([report(steps=TWO_STEPS)])
    assert (found["train_samples_per_second"], found["train_steps_per_second"]) == (3.0, 0.5)
    assert found["train_tokens_per_second"] == 1000.0


def test_figures_hugging_face_did_not_report_are_left_out_not_zero():
    found = props([report(steps=TWO_STEPS, hf=HfTrainMetrics())])
    for name in (
        "train_samples_per_second",
        "train_steps_per_second",
        "train_tokens_per_second",
        "train_tokens_per_gpu_per_second",
    ):
        assert name not in found


def test_a_time_limit_of_0_is_no_limit_and_of_1_s_is_one():
    # the trainer stops by time only for stop_after_seconds > 0 (stopping/seconds.py)
    unlimited = props([report(steps=TWO_STEPS)], stop_after_seconds=0)
    assert (
        unlimited["train_samples_per_second"] == 3.0
        and unlimited["train_tokens_per_second"] == 1000.0
    )
    limited = props([report(steps=TWO_STEPS)], stop_after_seconds=1)
    assert limited["train_samples_per_second"] == 8 / 2 and limited["train_steps_per_second"] == 1
    assert (
        "train_tokens_per_second" not in limited
        and "train_tokens_per_gpu_per_second" not in limited
    )


# ---- how precise the throughput is, and how long the warm-up lasted ---------------------------

T2 = 4.302653  # Student's t, 97.5 %, 2 degrees of freedom (3 batches)
INTERVAL = "dataset_tokens_per_second_ci95_percent"


def test_the_interval_counts_each_step_as_its_slowest_rank_ends_it():
    r0 = report(0, [step(i, i - 1, i) for i in range(1, 7)], world=2)  # ends 1, 2, ..., 6
    ends = [1.5, 2, 3, 4.5, 5, 6]
    r1 = report(1, [step(i, [0, *ends][i - 1], ends[i - 1]) for i in range(1, 7)], world=2)
    both = props([r0, r1], number_gpus=2)
    # the slowest ends 1.5 2 3 4.5 5 6 from 0: steps of 1.5 .5 1 1.5 .5 1 s, which add up to the
    # runtime; batches of 2 steps (200 tokens each): 2, 2.5, 1.5 s, mean 2, sd 0.5
    assert both["train_runtime"] == 6
    assert both[INTERVAL] == pytest.approx(100 * T2 * 0.5 / 3**0.5 / 2, rel=1e-12)
    assert props([r0, r1.model_copy(update={"steps": r0.steps})], number_gpus=2)[INTERVAL] == 0.0
    assert INTERVAL not in props([report(0, [step(i, i - 1, i) for i in range(1, 6)])])  # 5 steps


def test_the_warm_up_is_left_out_of_the_interval_and_its_length_reported():
    # warm-up from 5 s to 50 s, then six steps of 1 s from 60 s
    r = report(0, [step(1, 5, 50), *(step(i, 58 + i, 59 + i) for i in range(2, 8))], warmup_steps=1)
    measured = props([r], since=warmup_end([r]))
    assert measured["warmup_seconds"] == 60 - 5
    assert measured[INTERVAL] == 0.0
    whole = props([r])  # steps of 45 s, 11 s and 5 x 1 s: the first left out, batches 12, 2, 2 s
    assert whole["warmup_seconds"] == 0.0
    # mean 16/3 s, sd sqrt(100/3) s: t(2) sqrt(100/3) / sqrt(3) of 16/3 = t(2) 10/16
    assert whole[INTERVAL] == pytest.approx(100 * T2 * 10 / 16, rel=1e-12)


# ---- model FLOPs ------------------------------------------------------------------------------

# 4N + 2T with T = 0 (a frozen model: prompt tuning) and no attention term (s = 0)
FROZEN = ModelParameters(
    total=250_000, trainable=0, matmul=250_000, trainable_matmul=0, layers=1, attention_width=1
)


def test_tflops_are_flops_per_second_per_device_over_10_to_the_12():
    # 1e6 FLOPs per token x 2e6 tokens in 1 s over 2 devices: exactly 1 TFLOP/s each
    r = report(steps=[step(1, 0, 1, tokens=2_000_000)], model_parameters=FROZEN)
    assert model_flops_per_token([r], None) == 1e6
    assert props([r], number_gpus=2)["model_tflops_per_device"] == 1.0


def test_the_sequence_length_of_the_flops_is_the_windows():
    warm = step(1, 0, 10, tokens=1000, squares=1000**2)  # one sequence of 1000 tokens
    window = [
        step(2, 10, 11, tokens=100, squares=100**2),
        step(3, 11, 12, tokens=100, squares=100**2),
    ]
    params = FROZEN.model_copy(update={"layers": 2, "attention_width": 64})
    r0 = report(0, [warm, *window], 2, model_parameters=params, warmup_steps=1)
    r1 = report(1, [warm, *window], 2)
    since = warmup_end([r0, r1])
    per_token = 1e6 + 12 * 2 * 64 * 100
    assert model_flops_per_token([r0, r1], since) == per_token
    assert props([r0, r1], number_gpus=2, since=since)["model_tflops_per_device"] == pytest.approx(
        per_token * 400 / 2 / 2 / 1e12
    )


# ---- GPU sampling -----------------------------------------------------------------------------


def sampled(rank=0, host="n0", indices=(0,), good=(), failed=(), problem=None, world=4):
    r = report(rank, [step(1, 0, 4), step(2, 4, 30)], world, host)
    r.gpu_indices, r.gpu_sampling_problem = list(indices), problem
    r.gpu_samples = [
        GpuSample(
            time=t,
            index=i,
            compute_percent=50,
            memory_percent=50,
            power_watts=100,
            power_percent=25,
        )
        for i, t in good
    ]
    r.gpu_sample_failures = [
        GpuSampleFailure(time=t, index=i, error=f"NVMLError: lost {t}") for i, t in failed
    ]
    return r


def test_every_nodes_sampling_problem_is_named_after_ranks_that_sample_nothing():
    # one sampling rank per node: ranks 1 and 3 sample no GPU
    reports = [
        sampled(0, "a", problem="NVML failed to start"),
        report(1, TWO_STEPS, 4, "a"),
        sampled(2, "b", problem="NVMLError_DriverNotLoaded"),
        report(3, TWO_STEPS, 4, "b"),
    ]
    assert gpu_sampling_problem(reports) == (
        "GPU sampling failed, so the GPU figures would be wrong: on a: NVML failed to start; "
        "on b: NVMLError_DriverNotLoaded"
    )


def test_one_gpus_failed_readings_are_not_held_against_another():
    good = [(0, t) for t in range(1, 20)] + [(1, t) for t in range(1, 20)]
    why = gpu_sampling_problem(
        [sampled(indices=(0, 1), good=good, failed=[(1, 21), (1, 22), (1, 23)])]
    )
    assert why.endswith(": GPU 1 on n0: 3 of 22 readings failed (e.g. NVMLError: lost 21)")
    assert "GPU 0" not in why


def test_a_gpu_without_any_reading_says_how_many_failed_and_the_first_error():
    assert gpu_sampling_problem([sampled()]).endswith(
        "GPU 0 on n0: no readings in the measured window, 0 failed"
    )
    assert gpu_sampling_problem([sampled(failed=[(0, 5)])]).endswith(
        "GPU 0 on n0: no readings in the measured window, 1 failed (e.g. NVMLError: lost 5)"
    )
    few = gpu_sampling_problem([sampled(good=[(0, t) for t in (1, 2, 3, 4)], failed=[(0, 5)])])
    assert few.endswith("GPU 0 on n0: 1 of 5 readings failed (e.g. NVMLError: lost 5)")


def test_energy_notes_are_about_sampled_gpus_only():
    assert energy_note([report(steps=TWO_STEPS)]) is None  # no GPU sampled: nothing to explain
    assert energy_note([sampled()]) == "GPU 0 on n0: no energy counter readings"
