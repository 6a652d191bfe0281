"""Which measured properties the picture shows, in order, with their axis labels and units."""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.contract.properties import (
    THROUGHPUT,
    THROUGHPUT_PER_GPU,
    THROUGHPUT_PREDICTED,
)


@dataclasses.dataclass(frozen=True)
class Metric:
    column: str  # the target property
    label: str  # y-axis label, unit included
    title: str  # the column heading in the HTML table
    scale: float = 1.0  # stored value x scale = plotted value
    # Plotted in the same panel, dashed (e.g. p90 beside p50).
    companions: tuple[str, ...] = ()
    # A table needs one of the required metrics; the others are plotted only when present
    # (newer actuator versions add them) and, as GPU-only figures read 0.0 on CPU, not zero.
    required: bool = False


METRICS: tuple[Metric, ...] = (
    Metric(
        THROUGHPUT,
        "dataset tokens/s, all devices",
        "dataset tokens/s",
        required=True,
    ),
    # The prediction beside the measurement (plan/speed/step_time.py), as for memory below.
    Metric(
        THROUGHPUT_PER_GPU,
        "dataset tokens/s per GPU: measured —, predicted - -",
        "dataset tokens/s per GPU",
        companions=(THROUGHPUT_PREDICTED,),
        required=True,
    ),
    Metric(
        "train_step_seconds_p50",
        "step time (s): p50 —, p90 - -",
        "step time p50 (s)",
        companions=("train_step_seconds_p90",),
    ),
    Metric("train_step_seconds_cv_percent", "step-time spread: CV (%)", "step time CV (%)"),
    Metric("model_tflops_per_device", "model TFLOP/s per device", "model TFLOP/s per device"),
    # Stored as a fraction of the device's dense peak (issue 8); shown in percent.
    Metric("model_flops_utilization", "MFU (% of device peak)", "MFU (%)", scale=100.0),
    # The prediction beside the measurement, so its error on this hardware is in sight.
    Metric(
        "gpu_memory_max_allocated_gib",
        "GPU memory/device (GiB): measured —, predicted - -",
        "GPU memory measured (GiB)",
        companions=("gpu_memory_predicted_gib",),
    ),
)

PREDICTED_METRICS: tuple[Metric, ...] = (
    Metric(
        THROUGHPUT_PREDICTED,
        "dataset tokens/s per GPU (predicted)",
        "dataset tokens/s per GPU predicted",
        required=True,
    ),
    Metric(
        "gpu_memory_predicted_gib",
        "GPU memory/device (GiB, predicted)",
        "GPU memory predicted (GiB)",
        required=True,
    ),
)
"""What `sfttrainer_preview --html` draws on the same page: nothing measured yet."""

COMPANION_TITLES = {
    THROUGHPUT_PREDICTED: "dataset tokens/s per GPU predicted",
    "train_step_seconds_p90": "step time p90 (s)",
    "gpu_memory_predicted_gib": "GPU memory predicted (GiB)",
}
