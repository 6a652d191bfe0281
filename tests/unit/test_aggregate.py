"""RankReports -> measured properties."""

import pytest

from ado_actuators.sfttrainer.contract import (
    GpuSample,
    HfTrainMetrics,
    Outcome,
    ProcessSample,
    RankReport,
    StepTiming,
)
from ado_actuators.sfttrainer.metrics.aggregate import NoTrainingSteps, benchmark_properties, warmup_end


def report(rank, steps, *, world=2, cpu=(50.0, 150.0), gpu=(), hf=None):
    return RankReport(
        rank=rank, local_rank=rank, world_size=world, hostname="n0", outcome=Outcome.OK,
        steps=[StepTiming(step=i + 1, start=s, end=e, dataset_tokens=t) for i, (s, e, t) in enumerate(steps)],
        process_samples=[ProcessSample(time=100 + i, cpu_percent=c, memory_percent=2.0) for i, c in enumerate(cpu)],
        gpu_samples=list(gpu),
        hf_metrics=hf or HfTrainMetrics(train_samples_per_second=3.0, train_steps_per_second=0.5,
                                        train_tokens_per_second=1000.0),
    )  # fmt: skip


def test_dataset_throughput_sums_ranks_over_the_training_span():
    reports = [report(0, [(100, 101, 300), (101, 102, 200)]), report(1, [(100.5, 102, 500)])]
    props = benchmark_properties(reports, devices=2, stop_after_seconds=-1)
    assert props["train_runtime"] == pytest.approx(2.0)
    assert props["dataset_tokens_per_second"] == pytest.approx(1000 / 2.0)
    assert props["dataset_tokens_per_second_per_gpu"] == pytest.approx(250.0)
    assert props["train_tokens_per_gpu_per_second"] == 1000.0
    assert props["train_tokens_per_second"] == 2000.0  # rank 0's x number of processes
    assert props["cpu_compute_utilization"] == pytest.approx(100.0)
    assert props["cpu_memory_utilization"] == pytest.approx(2.0)
    assert props["is_valid"] == 1


def test_gpu_properties_are_zero_without_gpus_and_present():
    props = benchmark_properties([report(0, [(0, 1, 10)], world=1)], devices=0, stop_after_seconds=-1)
    for name in ("compute_utilization", "memory_utilization", "power_watts", "power_percent"):
        for agg in ("min", "avg", "max"):
            assert props[f"gpu_{name}_{agg}"] == 0.0
    assert props["gpu_memory_utilization_peak"] == 0.0


def test_gpu_min_avg_max_are_over_per_gpu_time_averages():
    samples = [
        GpuSample(time=1, index=0, compute_percent=10, memory_percent=20, power_watts=100, power_percent=25),
        GpuSample(time=2, index=0, compute_percent=30, memory_percent=40, power_watts=200, power_percent=50),
        GpuSample(time=1, index=1, compute_percent=90, memory_percent=60, power_watts=300, power_percent=75),
    ]
    props = benchmark_properties([report(0, [(0, 1, 10)], world=1, gpu=samples)], devices=2, stop_after_seconds=-1)
    assert (props["gpu_compute_utilization_min"], props["gpu_compute_utilization_max"]) == (20, 90)
    assert props["gpu_compute_utilization_avg"] == pytest.approx(55)
    assert props["gpu_memory_utilization_peak"] == 60
    assert props["gpu_power_watts_avg"] == pytest.approx((150 + 300) / 2)


def test_token_estimates_are_omitted_when_stopped_by_time():
    props = benchmark_properties([report(0, [(0, 1, 10)], world=1)], devices=1, stop_after_seconds=30)
    assert "train_tokens_per_second" not in props
    assert "train_tokens_per_gpu_per_second" not in props
    assert props["dataset_tokens_per_second"] == 10


def test_warm_up_can_be_excluded():
    reports = [report(0, [(0, 50, 10_000), (60, 61, 100), (61, 62, 100)], world=1, cpu=(0, 0, 0))]
    props = benchmark_properties(reports, devices=1, stop_after_seconds=-1, since=60)
    assert props["train_runtime"] == pytest.approx(2)
    assert props["dataset_tokens_per_second"] == pytest.approx(100)


def test_no_completed_step_is_an_error():
    with pytest.raises(NoTrainingSteps):
        benchmark_properties([report(0, [], world=1)], devices=1, stop_after_seconds=-1)


def test_reported_warm_up_steps_start_the_window():
    warm = report(0, [(0, 50, 10_000), (60, 61, 100)], world=1)
    assert warmup_end([warm]) is None
    warm.warmup_steps = 1
    assert warmup_end([warm]) == 60


def test_two_nodes_gpus_all_count_and_dp_tokens_are_per_gpu():
    def gpu(node, index, compute):
        return GpuSample(time=100, index=index, node=node, compute_percent=compute,
                         memory_percent=10, power_watts=100, power_percent=25)  # fmt: skip

    # node-local index 0 exists on both nodes: two GPUs, not one
    reports = [report(0, [(100, 101, 300)], gpu=[gpu("a#0", 0, 20)]),
               report(1, [(100, 101, 100)], gpu=[gpu("a#1", 0, 60)])]  # fmt: skip
    props = benchmark_properties(reports, devices=2, stop_after_seconds=-1)
    assert (props["gpu_compute_utilization_min"], props["gpu_compute_utilization_max"]) == (20, 60)
    assert props["dataset_tokens_per_second"] == 400
    # DP: one process drives 4 GPUs; Hugging Face's per-process figure covers all of them
    dp = benchmark_properties([report(0, [(0, 1, 10)], world=1)], devices=4, stop_after_seconds=-1)
    assert dp["train_tokens_per_second"] == 1000.0
    assert dp["train_tokens_per_gpu_per_second"] == 250.0
