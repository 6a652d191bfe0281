"""RankReports -> measured properties."""

import pytest

from ado_actuators.sfttrainer.contract.trainer_io import (
    GpuSample,
    HfTrainMetrics,
    ProcessSample,
    RankOutcome,
    RankReport,
    StepTiming,
)
from ado_actuators.sfttrainer.metrics.aggregate import (
    NoTrainingSteps,
    benchmark_properties,
    warmup_end,
)


def report(rank, steps, *, world=2, cpu=(50.0, 150.0), gpu=(), hf=None):
    return RankReport(
        rank=rank,
        local_rank=rank,
        world_size=world,
        hostname="n0",
        outcome=RankOutcome.OK,
        steps=[
            StepTiming(step=i + 1, start=s, end=e, dataset_tokens=t)
            for i, (s, e, t) in enumerate(steps)
        ],
        process_samples=[
            ProcessSample(time=100 + i, cpu_percent=c, memory_percent=2.0)
            for i, c in enumerate(cpu)
        ],
        gpu_samples=list(gpu),
        hf_metrics=hf
        or HfTrainMetrics(
            train_samples_per_second=3.0, train_steps_per_second=0.5, train_tokens_per_second=1000.0
        ),
    )


def test_dataset_throughput_sums_ranks_over_the_training_span():
    reports = [report(0, [(100, 101, 300), (101, 102, 200)]), report(1, [(100, 102, 500)])]
    props = benchmark_properties(reports, number_gpus=2, stop_after_seconds=-1)
    assert props["train_runtime"] == pytest.approx(2.0)
    assert props["dataset_tokens_per_second"] == pytest.approx(1000 / 2.0)
    assert props["dataset_tokens_per_second_per_gpu"] == pytest.approx(250.0)
    assert props["train_tokens_per_gpu_per_second"] == 1000.0
    assert props["train_tokens_per_second"] == 2000.0  # rank 0's x number of processes
    assert props["cpu_compute_utilization"] == pytest.approx(100.0)
    assert props["cpu_memory_utilization"] == pytest.approx(2.0)
    assert props["is_valid"] == 1


def test_gpu_properties_are_zero_without_gpus_and_present():
    props = benchmark_properties(
        [report(0, [(0, 1, 10)], world=1)], number_gpus=0, stop_after_seconds=-1
    )
    for name in ("compute_utilization", "memory_utilization", "power_watts", "power_percent"):
        for agg in ("min", "avg", "max"):
            assert props[f"gpu_{name}_{agg}"] == 0.0
    assert props["gpu_memory_utilization_peak"] == 0.0


def test_gpu_min_avg_max_are_over_per_gpu_time_averages():
    samples = [
        GpuSample(
            time=1,
            index=0,
            compute_percent=10,
            memory_percent=20,
            power_watts=100,
            power_percent=25,
        ),
        GpuSample(
            time=2,
            index=0,
            compute_percent=30,
            memory_percent=40,
            power_watts=200,
            power_percent=50,
        ),
        GpuSample(
            time=1,
            index=1,
            compute_percent=90,
            memory_percent=60,
            power_watts=300,
            power_percent=75,
        ),
    ]
    props = benchmark_properties(
        [report(0, [(0, 2, 10)], world=1, gpu=samples)], number_gpus=2, stop_after_seconds=-1
    )
    assert (props["gpu_compute_utilization_min"], props["gpu_compute_utilization_max"]) == (20, 90)
    assert props["gpu_compute_utilization_avg"] == pytest.approx(55)
    assert props["gpu_memory_utilization_peak"] == 60
    assert props["gpu_power_watts_avg"] == pytest.approx((150 + 300) / 2)


def test_token_estimates_are_omitted_when_stopped_by_time():
    props = benchmark_properties(
        [report(0, [(0, 1, 10)], world=1)], number_gpus=1, stop_after_seconds=30
    )
    assert "train_tokens_per_second" not in props
    assert "train_tokens_per_gpu_per_second" not in props
    assert props["dataset_tokens_per_second"] == 10


def test_time_bounded_runs_count_samples_and_steps_instead_of_hf_planned_figures():
    # HF divides the steps it planned (num_train_epochs' worth) by the runtime: 5e4 samples/s
    planned = HfTrainMetrics(train_samples_per_second=5e4, train_steps_per_second=2.5e4)
    steps = [
        StepTiming(step=i + 1, start=i, end=i + 1, dataset_tokens=10, samples=4) for i in range(3)
    ]
    r = report(0, [], world=1, hf=planned).model_copy(update={"steps": steps})
    props = benchmark_properties([r], number_gpus=1, stop_after_seconds=3)
    assert props["train_runtime"] == 3
    assert props["train_samples_per_second"] == pytest.approx(12 / 3)
    assert props["train_steps_per_second"] == pytest.approx(3 / 3)


def test_warm_up_can_be_excluded():
    reports = [report(0, [(0, 50, 10_000), (60, 61, 100), (61, 62, 100)], world=1, cpu=(0, 0, 0))]
    props = benchmark_properties(reports, number_gpus=1, stop_after_seconds=-1, since=60)
    assert props["train_runtime"] == pytest.approx(2)
    assert props["dataset_tokens_per_second"] == pytest.approx(100)


def test_a_peer_starting_its_first_window_step_early_keeps_it():
    # rank 1 starts step 2 a millisecond before rank 0 does: the window is rank 0's step 2 on
    r0 = report(0, [(0, 50, 10_000), (60.000, 61, 100), (61, 62, 100)], world=2)
    r1 = report(1, [(0, 50, 10_000), (59.999, 61, 100), (61, 62, 100)], world=2)
    props = benchmark_properties(
        [r0, r1], number_gpus=2, stop_after_seconds=-1, since=warmup_end([r0]) or 60.0
    )
    assert props["dataset_tokens_per_second"] * props["train_runtime"] == pytest.approx(400)


def test_no_completed_step_is_an_error():
    with pytest.raises(NoTrainingSteps):
        benchmark_properties([report(0, [], world=1)], number_gpus=1, stop_after_seconds=-1)


def test_reported_warm_up_steps_start_the_window():
    warm = report(0, [(0, 50, 10_000), (60, 61, 100)], world=1)
    assert warmup_end([warm]) is None
    warm.warmup_steps = 1
    assert warmup_end([warm]) == 60


# ---- the window, the new properties, GPU sampling that failed ---------------------------------

from ado_actuators.sfttrainer.contract.trainer_io import (  # noqa: E402
    GpuEnergy,
    GpuSampleFailure,
    ModelParameters,
)
from ado_actuators.sfttrainer.metrics.aggregate import gpu_sampling_problem, model_flops_per_token  # noqa: E402


def step(i, start, end, tokens, samples=4, padded=512, squares=0):
    return StepTiming(
        step=i,
        start=start,
        end=end,
        dataset_tokens=tokens,
        samples=samples,
        padded_tokens=padded,
        sequence_tokens_squared=squares,
    )


def test_with_warm_up_excluded_hf_figures_come_from_the_window():
    r0 = report(0, [], world=2)
    r1 = report(1, [], world=2)
    # step 1 is warm-up (slow); steps 2-3 are the window [10, 14)
    r0.steps = [
        step(1, 0, 9, 999, samples=4, padded=512),
        step(2, 10, 12, 100),
        step(3, 12, 14, 100),
    ]
    r1.steps = [
        step(1, 0, 9, 999, samples=4, padded=512),
        step(2, 10, 12, 100),
        step(3, 12, 14, 100),
    ]
    r0.warmup_steps = r1.warmup_steps = 1
    props = benchmark_properties(
        [r0, r1], number_gpus=2, stop_after_seconds=-1, since=warmup_end([r0])
    )
    assert props["train_runtime"] == 4
    assert props["train_samples_per_second"] == (4 * 4) / 4  # 4 steps x 4 samples over 4 s
    assert props["train_steps_per_second"] == 2 / 4  # rank 0's optimisation steps
    assert props["train_tokens_per_second"] == 4 * 512 / 4  # padded positions, counted
    assert props["train_tokens_per_gpu_per_second"] == 4 * 512 / 4 / 2
    assert props["dataset_tokens_per_second"] == 400 / 4
    assert props["train_step_seconds_p50"] == props["train_step_seconds_p90"] == 2
    assert props["train_step_seconds_cv_percent"] == 0


def test_step_time_spread_is_rank_0s_steps():
    r0 = report(0, [(0, 1, 10), (1, 3, 10), (3, 4, 10), (4, 8, 10)], world=2)
    r1 = report(1, [(0, 9, 10)], world=2)
    props = benchmark_properties([r0, r1], number_gpus=2, stop_after_seconds=-1)
    # durations 1, 2, 1, 4 -> sorted 1 1 2 4: p50 1.5, p90 at 2.7 -> 2 + 0.7 * 2 = 3.4
    assert props["train_step_seconds_p50"] == pytest.approx(1.5)
    assert props["train_step_seconds_p90"] == pytest.approx(3.4)


TINY = ModelParameters(
    total=147_776,
    trainable=147_776,
    matmul=115_008,
    trainable_matmul=115_008,
    layers=2,
    attention_width=64,
)


def test_model_flops_per_device_and_utilisation():
    r = report(0, [], world=1)
    # two steps, each 2 sequences of 100 tokens: sum s^2 = 40000, sum s = 400 -> s = 100
    r.steps = [step(1, 0, 1, 200, squares=20_000), step(2, 1, 2, 200, squares=20_000)]
    r.model_parameters = TINY
    r.gpu_indices = [0]
    per_token = 6 * 115_008 + 12 * 2 * 64 * 100  # 843648, as in test_flops
    assert model_flops_per_token([r], None) == per_token
    props = benchmark_properties(
        [r], number_gpus=1, stop_after_seconds=-1, gpu_model="NVIDIA-A100-SXM4-80GB"
    )
    assert props["model_tflops_per_device"] == pytest.approx(per_token * 400 / 2 / 1e12)
    assert props["model_flops_utilization"] == pytest.approx(props["model_tflops_per_device"] / 312)
    # the consistency a user can check: TFLOP/s x 1e12 / tokens per second per device
    assert props["model_tflops_per_device"] * 1e12 / props[
        "dataset_tokens_per_second_per_gpu"
    ] == pytest.approx(per_token)


def test_no_utilisation_without_a_known_peak_and_on_cpu():
    r = report(0, [(0, 1, 10)], world=1)
    r.model_parameters = TINY
    on_cpu = benchmark_properties([r], number_gpus=0, stop_after_seconds=-1)
    assert on_cpu["model_tflops_per_device"] > 0 and "model_flops_utilization" not in on_cpu
    stand_in = benchmark_properties(
        [r], number_gpus=1, stop_after_seconds=-1, gpu_model="NVIDIA-A100-SXM4-80GB"
    )
    assert "model_flops_utilization" not in stand_in  # use_cpu: no GPU was sampled
    r.gpu_indices = [0]
    unknown = benchmark_properties([r], number_gpus=1, stop_after_seconds=-1, gpu_model="Acme-X1")
    assert "model_flops_utilization" not in unknown


def test_energy_per_token_sums_the_gpus_and_memory_is_the_max_over_ranks():
    r0, r1 = report(0, [(0, 2, 300)]), report(1, [(0, 2, 100)])
    r0.gpu_indices = [0, 1]
    r0.gpu_energy = [
        GpuEnergy(
            index=i,
            start_time=0,
            start_millijoules=1_000,
            end_time=2,
            end_millijoules=1_000 + 200_000 * (i + 1),
        )
        for i in (0, 1)
    ]
    r0.gpu_memory_max_allocated_bytes, r1.gpu_memory_max_allocated_bytes = 3 * 2**30, 5 * 2**30
    props = benchmark_properties([r0, r1], number_gpus=2, stop_after_seconds=-1)
    assert props["gpu_energy_joules_per_token"] == pytest.approx((200 + 400) / 400)
    assert props["gpu_memory_max_allocated_gib"] == 5.0
    cpu = benchmark_properties(
        [report(0, [(0, 1, 10)], world=1)], number_gpus=0, stop_after_seconds=-1
    )
    assert cpu["gpu_energy_joules_per_token"] == 0.0 and cpu["gpu_memory_max_allocated_gib"] == 0.0


def test_energy_is_omitted_when_a_counter_was_unreadable():
    r = report(0, [(0, 1, 10)], world=1)
    r.gpu_indices = [0]
    assert "gpu_energy_joules_per_token" not in benchmark_properties(
        [r], number_gpus=1, stop_after_seconds=-1
    )


def gpu_report(good_times=(), failed_times=(), problem=None):
    r = report(0, [(0, 4, 5), (4, 30, 5)], world=1)
    r.gpu_indices = [0]
    r.gpu_sampling_problem = problem
    r.gpu_samples = [
        GpuSample(
            time=t,
            index=0,
            compute_percent=50,
            memory_percent=50,
            power_watts=100,
            power_percent=25,
        )
        for t in good_times
    ]
    r.gpu_sample_failures = [
        GpuSampleFailure(time=t, index=0, error="NVMLError: GPU is lost") for t in failed_times
    ]
    return r


def test_gpu_sampling_that_never_started_is_a_problem():
    why = gpu_sampling_problem(
        [gpu_report(problem="NVML failed to start (NVMLError_LibraryNotFound)")]
    )
    assert "GPU sampling failed" in why and "LibraryNotFound" in why


def test_a_gpu_without_readings_in_the_window_is_a_problem():
    why = gpu_sampling_problem([gpu_report(good_times=[1], failed_times=[5, 6])], since=4)
    assert (
        "GPU 0" in why
        and "no readings in the measured window, 2 failed" in why
        and "GPU is lost" in why
    )


def test_more_than_a_tenth_of_failed_readings_is_a_problem_fewer_is_not():
    assert gpu_sampling_problem([gpu_report(good_times=range(9), failed_times=[20])]) is None
    why = gpu_sampling_problem([gpu_report(good_times=range(8), failed_times=[20, 21])])
    assert "2 of 10 readings failed" in why


def test_ranks_that_sample_no_gpu_have_no_problem():
    assert gpu_sampling_problem([report(0, [(0, 1, 10)])]) is None


def test_two_nodes_gpus_all_count_and_dp_tokens_are_per_gpu():
    def gpu(node, index, compute):
        return GpuSample(
            time=100,
            index=index,
            node=node,
            compute_percent=compute,
            memory_percent=10,
            power_watts=100,
            power_percent=25,
        )

    # node-local index 0 exists on both nodes: two GPUs, not one
    reports = [
        report(0, [(100, 101, 300)], gpu=[gpu("a#0", 0, 20)]),
        report(1, [(100, 101, 100)], gpu=[gpu("a#1", 0, 60)]),
    ]
    props = benchmark_properties(reports, number_gpus=2, stop_after_seconds=-1)
    assert (props["gpu_compute_utilization_min"], props["gpu_compute_utilization_max"]) == (20, 60)
    assert props["dataset_tokens_per_second"] == 400
    # DP: one process drives 4 GPUs; Hugging Face's per-process figure covers all of them
    dp = benchmark_properties(
        [report(0, [(0, 1, 10)], world=1)], number_gpus=4, stop_after_seconds=-1
    )
    assert dp["train_tokens_per_second"] == 1000.0
    assert dp["train_tokens_per_gpu_per_second"] == 250.0
    # number_gpus 0 on two nodes: batch_size is split over the two CPU ranks
    cpu = benchmark_properties(reports, number_gpus=0, devices=2, stop_after_seconds=-1)
    assert cpu["dataset_tokens_per_second_per_gpu"] == 200


def test_samples_outside_the_window_are_not_counted():
    """GPU idle during setup (model load) and after the last step must not lower the averages
    runtime and energy do not cover: one window, first step start to last step end."""

    def gpu(time, compute, memory=50.0):
        return GpuSample(
            time=time,
            index=0,
            compute_percent=compute,
            memory_percent=memory,
            power_watts=compute * 4,
            power_percent=compute,
        )

    samples = [gpu(90, 0, memory=99), gpu(100, 80), gpu(104, 60), gpu(110, 80), gpu(111, 0)]
    r = report(0, [(100, 105, 10), (105, 110, 10)], world=1, gpu=samples)
    r.process_samples = [
        ProcessSample(time=t, cpu_percent=c, memory_percent=1.0)
        for t, c in ((95, 5.0), (101, 100.0), (109, 300.0), (112, 1.0))
    ]
    props = benchmark_properties([r], number_gpus=1, stop_after_seconds=-1)
    assert props["gpu_compute_utilization_avg"] == pytest.approx(220 / 3)
    assert props["gpu_power_watts_avg"] == pytest.approx(4 * 220 / 3)
    assert props["gpu_memory_utilization_peak"] == 50  # the 99 % at setup is outside
    assert props["cpu_compute_utilization"] == pytest.approx(200)
    # with warm-up excluded the window starts at the first measured step
    r.warmup_steps = 1
    warm = benchmark_properties([r], number_gpus=1, stop_after_seconds=-1, since=warmup_end([r]))
    assert warm["gpu_compute_utilization_avg"] == 80  # only the sample at 110 is in [105, 110]
    assert warm["cpu_compute_utilization"] == pytest.approx(300)


def test_readings_a_mig_slice_does_not_support_are_omitted_not_zero():
    mig = [
        GpuSample(
            time=t,
            index=0,
            compute_percent=None,
            memory_percent=m,
            power_watts=None,
            power_percent=None,
        )
        for t, m in ((1, 30.0), (2, 50.0))
    ]
    r = report(0, [(0, 3, 10)], world=1, gpu=mig)
    r.gpu_indices = [0]
    props = benchmark_properties([r], number_gpus=1, stop_after_seconds=-1)
    assert props["gpu_memory_utilization_avg"] == 40 and props["gpu_memory_utilization_peak"] == 50
    for name in ("compute_utilization", "power_watts", "power_percent"):
        assert not any(key.startswith(f"gpu_{name}") for key in props)
    assert gpu_sampling_problem([r]) is None  # the run trained: what was measured is stored
