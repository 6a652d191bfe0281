"""RankReports -> the measured properties of the benchmark experiments. Pure.

Every figure covers one window: all optimisation steps, or, when the stop policy reported
warm-up steps (auto_stop_method), those from the first measured step of rank 0 on (`since`).
Step-based figures take the window's steps; sampled ones (CPU, GPU utilisation, memory, power)
only the samples a rank took between its first window step's start and its last step's end
(each rank against its own steps: nodes' clocks may differ), never setup or teardown.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

from ado_actuators.sfttrainer.contract.properties import (
    CPU_OTHERS,
    RACED_BEHIND,
    RACED_SAVED,
    THROUGHPUT,
    THROUGHPUT_CI95,
    THROUGHPUT_PER_GPU,
)
from ado_actuators.sfttrainer.contract.trainer_io import (
    GpuSample,
    ProcessSample,
    RaceOutcome,
    RankReport,
    StepTiming,
)
from ado_actuators.sfttrainer.contract.units import GIB
from ado_actuators.sfttrainer.metrics import flops, gpu_peaks, loss, precision
from ado_actuators.sfttrainer.metrics.steps import step_time_properties
from ado_actuators.sfttrainer.stats import batch_means

GPU_SERIES = {
    "gpu_compute_utilization": "compute_percent",
    "gpu_memory_utilization": "memory_percent",
    "gpu_power_watts": "power_watts",
    "gpu_power_percent": "power_percent",
}
MAX_FAILED_SAMPLE_FRACTION = 0.1
"""A GPU whose readings failed more often than this has no trustworthy average."""


class NoTrainingSteps(ValueError):
    """The run reported success but no completed step: nothing to compute throughput from."""


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.fmean(values) if values else 0.0


def gpu_properties(samples: list[GpuSample]) -> dict[str, float]:
    """The spec's note 1: min/avg/max over the in-use GPUs of each GPU's time-average.

    Every GPU property is 0.0 when no GPU was used. A reading NVML does not support on the
    GPUs (None: utilisation and power on MIG) leaves its properties out, never 0.0.
    """
    per_gpu: dict[tuple, list[GpuSample]] = defaultdict(list)
    for sample in samples:
        per_gpu[(sample.node, sample.index)].append(sample)
    props: dict[str, float] = {}
    for name, attribute in GPU_SERIES.items():
        read = [
            [v for s in series if (v := getattr(s, attribute)) is not None]
            for series in per_gpu.values()
        ]
        averages = [_mean(values) for values in read if values]
        if samples and not averages:
            continue
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


def window_steps(
    reports: list[RankReport], report: RankReport, since: float | None
) -> list[StepTiming]:
    """`report`'s steps in the window: from rank 0's first step starting at `since` on, by
    step number, not by clock (ranks start the same step a few milliseconds apart: a clock cut
    would drop a peer's first window step)."""
    if since is None:
        return report.steps
    rank0 = min(reports, key=lambda r: r.rank)
    first = next((s.step for s in rank0.steps if s.start >= since), None)
    return [s for s in report.steps if first is not None and s.step >= first]


def window_image_tokens(reports: list[RankReport], since: float | None) -> tuple[int, int] | None:
    """(image tokens, dataset tokens) over every rank's steps in the window: how much of a
    vision-language model's figure its images make. None where no step counted image tokens
    (a text model)."""
    steps = [s for r in reports for s in window_steps(reports, r, since)]
    if all(s.image_tokens is None for s in steps):
        return None
    return sum(s.image_tokens or 0 for s in steps), sum(s.dataset_tokens for s in steps)


def sample_window(
    reports: list[RankReport], report: RankReport, since: float | None
) -> tuple[float, float] | None:
    """The span `report`'s samples must fall in: its first window step's start to its last
    step's end; None where it has no step in the window."""
    steps = window_steps(reports, report, since)
    if not steps:
        return None
    return min(s.start for s in steps), max(s.end for s in steps)


def in_window(time: float, window: tuple[float, float] | None) -> bool:
    return window is not None and window[0] <= time <= window[1]


def gpu_sampling_problem(reports: list[RankReport], since: float | None = None) -> str | None:
    """Why the GPU figures cannot be trusted, or None.

    Every GPU a rank was asked to sample must have readings in the window, and at most
    MAX_FAILED_SAMPLE_FRACTION of its readings may have failed: a GPU NVML could not read
    must not look idle (0 %).
    """
    problems = []
    for report in reports:
        if not report.gpu_indices:
            continue
        if report.gpu_sampling_problem:
            problems.append(f"on {report.hostname}: {report.gpu_sampling_problem}")
            continue
        window = sample_window(reports, report, since)
        for index in report.gpu_indices:
            good = sum(
                1 for s in report.gpu_samples if s.index == index and in_window(s.time, window)
            )
            failed = [
                f
                for f in report.gpu_sample_failures
                if f.index == index and in_window(f.time, window)
            ]
            where = f"GPU {index} on {report.hostname}"
            if good == 0:
                first = f" (e.g. {failed[0].error})" if failed else ""
                problems.append(
                    f"{where}: no readings in the measured window, {len(failed)} failed{first}"
                )
            elif len(failed) > MAX_FAILED_SAMPLE_FRACTION * (good + len(failed)):
                problems.append(
                    f"{where}: {len(failed)} of {good + len(failed)} readings "
                    f"failed (e.g. {failed[0].error})"
                )
    if not problems:
        return None
    return "GPU sampling failed, so the GPU figures would be wrong: " + "; ".join(problems)


def _energy_joules(reports: list[RankReport]) -> tuple[float | None, str | None]:
    """NVML's energy counters over the window, summed over the sampled GPUs."""
    total = 0.0
    for report in reports:
        by_index = {e.index: e for e in report.gpu_energy}
        for index in report.gpu_indices:
            energy = by_index.get(index)
            if energy is None or energy.joules is None:
                return None, f"GPU {index} on {report.hostname}: no energy counter readings"
            total += energy.joules
    return total, None


def window_image_tiles(reports: list[RankReport], since: float | None) -> int | None:
    """Tiles a vision tower encoded over every rank's steps in the window; None where no step
    counted tiles (a text model, or a text dataset)."""
    steps = [s for r in reports for s in window_steps(reports, r, since)]
    if all(s.image_tiles is None for s in steps):
        return None
    return sum(s.image_tiles or 0 for s in steps)


def model_flops_per_token(reports: list[RankReport], since: float | None) -> float | None:
    rank0 = min(reports, key=lambda r: r.rank)
    if rank0.model_parameters is None:
        return None
    steps = [s for r in reports for s in window_steps(reports, r, since)]
    tokens = sum(s.dataset_tokens for s in steps)
    mean_length = flops.token_weighted_sequence_length(
        sum(s.sequence_tokens_squared for s in steps), tokens
    )
    per_token = flops.flops_per_token(rank0.model_parameters, mean_length)
    tower = rank0.model_parameters.image_tower
    if per_token is None or tower is None or not tokens:
        return per_token
    # the vision tower's and projector's work, per tile, over the window's tokens
    tiles = window_image_tiles(reports, since) or 0
    return per_token + flops.flops_per_tile(tower) * tiles / tokens


def throughput_interval(reports: list[RankReport], since: float | None) -> batch_means.Interval:
    """The 95 % interval of dataset_tokens_per_second over the window's steps (stats/batch_means.py)."""
    return batch_means.throughput_interval(
        *precision.step_series(window_steps(reports, r, since) for r in reports)
    )


def benchmark_properties(
    reports: list[RankReport],
    *,
    number_gpus: int,
    stop_after_seconds: float,
    since: float | None = None,
    gpu_model: str | None = None,
    devices: int | None = None,
) -> dict[str, float]:
    """Properties of a successful run over every rank of every node. `since` excludes
    everything before it (warm-up). `devices`: what batch_size was split over, when not the
    GPUs (number_gpus 0 on several nodes: one CPU rank each)."""
    per_rank = {r.rank: window_steps(reports, r, since) for r in reports}
    steps = [s for rank_steps in per_rank.values() for s in rank_steps]
    if not steps:
        raise NoTrainingSteps("the trainer completed no optimisation step")
    runtime = max(s.end for s in steps) - min(s.start for s in steps)
    if runtime <= 0:
        raise NoTrainingSteps(f"non-positive training time {runtime}")
    tokens = sum(s.dataset_tokens for s in steps)
    devices = max(1, number_gpus if devices is None else devices)
    rank0 = min(reports, key=lambda r: r.rank)
    rank0_steps = per_rank[rank0.rank]
    props: dict[str, float] = {
        "train_runtime": runtime,
        THROUGHPUT: tokens / runtime,
        THROUGHPUT_PER_GPU: tokens / runtime / devices,
        **_sampled_properties(reports, since),
        "is_valid": 1,
    }
    counted = since is not None or stop_after_seconds > 0
    props |= _hugging_face_figures(reports, steps, rank0_steps, runtime, counted, devices)
    if stop_after_seconds > 0:
        # the spec omits them when training is stopped by time
        props.pop("train_tokens_per_second", None)
        props.pop("train_tokens_per_gpu_per_second", None)
    if rank0_steps:
        props |= step_time_properties([s.end - s.start for s in rank0_steps])
        # rank 0's own clock at both ends (nodes' clocks may differ); 0.0 with nothing excluded
        props["warmup_seconds"] = rank0_steps[0].start - rank0.steps[0].start
    interval = throughput_interval(reports, since)
    if interval.percent is not None:
        props[THROUGHPUT_CI95] = interval.percent
    props |= raced_properties(rank0.race)
    props |= _device_properties(
        reports, since, (tokens, runtime, devices), number_gpus=number_gpus, gpu_model=gpu_model
    )
    props["gpu_memory_max_allocated_gib"] = (
        max(r.gpu_memory_max_allocated_bytes for r in reports) / GIB
    )
    props |= loss.report_loss(reports, rank0_steps).properties()
    return props


def _sampled_properties(reports: list[RankReport], since: float | None) -> dict[str, float]:
    """The system monitor's figures over each rank's measured window: CPU, then GPU."""
    windows = {r.rank: sample_window(reports, r, since) for r in reports}
    process = [
        [p for p in r.process_samples if in_window(p.time, windows[r.rank])] for r in reports
    ]
    others = cpu_others(reports, process)
    return {
        "cpu_compute_utilization": _mean(_mean(p.cpu_percent for p in ps) for ps in process),
        "cpu_memory_utilization": _mean(_mean(p.memory_percent for p in ps) for ps in process),
        **({CPU_OTHERS: others} if others is not None else {}),
        **gpu_properties(
            [g for r in reports for g in r.gpu_samples if in_window(g.time, windows[r.rank])]
        ),
    }


def raced_properties(outcome: RaceOutcome | None) -> dict[str, float]:
    """RACED_BEHIND and RACED_SAVED where the run stopped once it could not win its group."""
    if outcome is None:
        return {}
    return {RACED_BEHIND: outcome.behind_percent, RACED_SAVED: outcome.saved_seconds}


def cpu_others(reports: list[RankReport], process: list[list[ProcessSample]]) -> float | None:
    """What other processes used of the busiest node's CPUs over the window, 100 == one core:
    the node's use (each rank reads it; their mean) less every rank's own there, never below
    0. None when no rank read the node's use (a report from before the reading existed)."""
    readings: dict[str, list[float]] = defaultdict(list)
    own: dict[str, float] = defaultdict(float)
    for report, samples in zip(reports, process, strict=True):
        own[report.hostname] += _mean(p.cpu_percent for p in samples)
        machine = [p.machine_cpu_percent for p in samples if p.machine_cpu_percent is not None]
        if machine:
            readings[report.hostname].append(statistics.fmean(machine))
    if not readings:
        return None
    return max(max(0.0, statistics.fmean(r) - own[host]) for host, r in readings.items())


def _device_properties(
    reports: list[RankReport],
    since: float | None,
    window: tuple[int, float, int],
    *,
    number_gpus: int,
    gpu_model: str | None,
) -> dict[str, float]:
    """What the devices did: model_tflops_per_device, model_flops_utilization where the GPU's
    peak is known, gpu_energy_joules_per_token (0.0 where no GPU was used, absent where it is
    not known). `window`: the tokens, seconds and devices of the measured window."""
    tokens, runtime, devices = window
    props: dict[str, float] = {}
    per_token = model_flops_per_token(reports, since)
    if per_token is not None:
        props["model_tflops_per_device"] = per_token * tokens / runtime / devices / 1e12
        # CPU processes standing in for GPUs (use_cpu) sample no GPU and have no GPU peak
        on_gpus = number_gpus > 0 and any(r.gpu_indices for r in reports)
        peak = gpu_peaks.peak_tflops(gpu_model) if on_gpus else None
        if peak:
            props["model_flops_utilization"] = props["model_tflops_per_device"] / peak
    if number_gpus == 0 or not any(r.gpu_indices for r in reports):
        props["gpu_energy_joules_per_token"] = 0.0
    else:
        joules, _why = _energy_joules(reports)
        if joules is not None and tokens:
            props["gpu_energy_joules_per_token"] = joules / tokens
    return props


def _hugging_face_figures(
    reports, steps, rank0_steps, runtime, counted, devices
) -> dict[str, float]:
    """train_samples/steps/tokens_*: Hugging Face's whole-run figures, or counted ones.

    `counted`: with warm-up excluded, HF's figures would cover a different span than every
    other property, and with a time limit HF divides the samples and steps it *planned*
    (num_train_epochs' worth) by the runtime. Both are recomputed from the steps measured
    instead (tokens padded, as HF counts them, but counted, not estimated from one batch).
    """
    rank0 = min(reports, key=lambda r: r.rank)
    if counted:
        padded = sum(s.padded_tokens for s in steps)
        return {
            "train_samples_per_second": sum(s.samples for s in steps) / runtime,
            "train_steps_per_second": len(rank0_steps) / runtime,
            "train_tokens_per_second": padded / runtime,
            "train_tokens_per_gpu_per_second": padded / runtime / devices,
        }
    hf, props = rank0.hf_metrics, {}
    if hf.train_samples_per_second is not None:
        props["train_samples_per_second"] = hf.train_samples_per_second
    if hf.train_steps_per_second is not None:
        props["train_steps_per_second"] = hf.train_steps_per_second
    if hf.train_tokens_per_second is not None:
        # Hugging Face's figure is per process, estimated from the first padded batch; one
        # DP process feeds several GPUs.
        total = hf.train_tokens_per_second * rank0.world_size
        props["train_tokens_per_second"] = total
        props["train_tokens_per_gpu_per_second"] = total / devices
    return props


def energy_note(reports: list[RankReport]) -> str | None:
    """Why gpu_energy_joules_per_token is missing where GPUs were sampled."""
    if not any(r.gpu_indices for r in reports):
        return None
    return _energy_joules(reports)[1]
