"""The throughput properties of a benchmark row, named once: metrics/aggregate.py computes the
measured ones from the rank reports, plan/speed/prediction.py predicts one before launch, and
report/ and space/ read them back from ado's store (the picture, the answers, the calibration,
the guided walk). catalog/experiments.yaml declares them as targets."""

from __future__ import annotations

THROUGHPUT = "dataset_tokens_per_second"
"""Every non-padding token trained, over the measured window's seconds, all devices together."""
THROUGHPUT_PER_GPU = "dataset_tokens_per_second_per_gpu"
"""THROUGHPUT over max(1, number_gpus)."""
THROUGHPUT_PREDICTED = "dataset_tokens_per_second_per_gpu_predicted"
"""The speed model's THROUGHPUT_PER_GPU, computed before launch: a prediction, never measured."""
THROUGHPUT_CI95 = "dataset_tokens_per_second_ci95_percent"
"""The relative half-width of THROUGHPUT's 95 % interval over batch means (stats/batch_means.py)."""
CPU_OTHERS = "cpu_others_utilization"
"""What other processes used of the training's busiest node's CPUs over the measured window,
100 = one core: a CPU measurement beside other work is slower and noisier than alone."""
CPU_BUSY_THRESHOLD = 50.0
"""CPU_OTHERS from which a CPU row is said to have been measured on a busy host (half a core:
Ray's and ado's own processes use about a tenth of one while a measurement runs)."""
RACED_BEHIND = "raced_behind_percent"
"""Only on a row whose measurement stopped once it could not win its answer group (racing,
stopping/racing.py): how far its THROUGHPUT lay below the group's measured fastest, in percent.
Its figure is measured, its interval wider than the stop method's target: never the fastest."""
RACED_SAVED = "raced_saved_seconds"
"""Beside RACED_BEHIND: the training seconds the stop method would still have spent to reach its
target (or its cap), at the pace of the steps measured: what racing saved, per device."""
