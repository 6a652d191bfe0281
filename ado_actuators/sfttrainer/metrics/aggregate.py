"""RankReports -> the measured properties of the benchmark experiments. Pure."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from ado_actuators.sfttrainer.contract import GpuSample, RankReport

GPU_SERIES = {
    "gpu_compute_utilization": "compute_percent",
    "gpu_memory_utilization": "memory_percent",
    "gpu_power_watts": "power_watts",
    "gpu_power_percent": "power_percent",
}


class NoTrainingSteps(ValueError):
    """The run reported success but no completed step: nothing to compute throughput from."""


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.fmean(values) if values else 0.0


def gpu_properties(samples: list[GpuSample]) -> dict[str, float]:
    """The spec's note 1: min/avg/max over the in-use GPUs of each GPU's time-average.

    Every GPU property is 0.0 when no GPU was used.
    """
    per_gpu: dict[tuple, list[GpuSample]] = defaultdict(list)
    for sample in samples:
        per_gpu[(sample.node, sample.index)].append(sample)
    props: dict[str, float] = {}
    for name, attribute in GPU_SERIES.items():
        averages = [_mean(getattr(s, attribute) for s in series) for series in per_gpu.values()]
        props[f"{name}_min"] = min(averages, default=0.0)
        props[f"{name}_avg"] = _mean(averages)
        props[f"{name}_max"] = max(averages, default=0.0)
    props["gpu_memory_utilization_peak"] = max((s.memory_percent for s in samples), default=0.0)
    return props


def warmup_end(reports: list[RankReport]) -> float | None:
    """When the measured window starts, if the stop policy reported warm-up steps."""
    rank0 = min(reports, key=lambda r: r.rank)
    if 0 < rank0.warmup_steps < len(rank0.steps):
        return rank0.steps[rank0.warmup_steps].start
    return None


def benchmark_properties(
    reports: list[RankReport],
    *,
    devices: int,
    stop_after_seconds: float,
    since: float | None = None,
) -> dict[str, float]:
    """Properties of a successful run, over every rank of every node.

    `devices`: what batch_size was split over (the GPUs; with number_gpus 0 the CPU ranks).
    `since` excludes everything before it (warm-up)."""
    steps = [s for r in reports for s in r.steps if since is None or s.start >= since]
    if not steps:
        raise NoTrainingSteps("the trainer completed no optimisation step")
    runtime = max(s.end for s in steps) - min(s.start for s in steps)
    if runtime <= 0:
        raise NoTrainingSteps(f"non-positive training time {runtime}")
    tokens = sum(s.dataset_tokens for s in steps)
    devices = max(1, devices)

    def in_window(time: float) -> bool:
        return since is None or time >= since

    rank0 = min(reports, key=lambda r: r.rank)
    hf = rank0.hf_metrics
    props: dict[str, float] = {
        "train_runtime": runtime,
        "dataset_tokens_per_second": tokens / runtime,
        "dataset_tokens_per_second_per_gpu": tokens / runtime / devices,
        "cpu_compute_utilization": _mean(
            _mean(p.cpu_percent for p in r.process_samples if in_window(p.time))
            for r in reports
        ),
        "cpu_memory_utilization": _mean(
            _mean(p.memory_percent for p in r.process_samples if in_window(p.time))
            for r in reports
        ),
        **gpu_properties([g for r in reports for g in r.gpu_samples if in_window(g.time)]),
        "is_valid": 1,
    }
    if hf.train_samples_per_second is not None:
        props["train_samples_per_second"] = hf.train_samples_per_second
    if hf.train_steps_per_second is not None:
        props["train_steps_per_second"] = hf.train_steps_per_second
    if stop_after_seconds <= 0 and hf.train_tokens_per_second is not None:
        # Hugging Face's figure is per process, estimated from the first padded batch; one
        # DP process feeds several GPUs.
        total = hf.train_tokens_per_second * rank0.world_size
        props["train_tokens_per_second"] = total
        props["train_tokens_per_gpu_per_second"] = total / devices
    return props
