"""A device learned from its own measured rows: the predicted throughput corrected by a factor
per device and training method, with an interval that narrows as the device's rows accumulate.

The model, per device d, training method m and row i:
log(measured_i) = log(predicted_i) + shift_d + shift_dm + noise_i. The speed model's fit is the
prior: shift_d is 0 give or take `Prior.shift_sd` (small on the
device the constants were fitted on, wider on a device priced from its datasheet, wide on a
device the speed model cannot price), each method's shift_dm 0 give or take
`Prior.method_sd` (LoRA's adapters and full fine-tuning's optimizer run at rates of their own on
each device), so a device with one row moves only part of the way
towards it and a device with many rows follows them (a Gaussian prior on a Gaussian mean).

The noise is how far one configuration strays from its device's factor. Its spread comes from
the rows themselves, each predicted with the factor fitted on the others (leave one out), pooled
with the prior's spread counted as `Prior.weight` rows; so it is honest with two rows and
settles as rows accumulate. An interval adds the factor's own uncertainty to that spread.

Pure: rows in, calibrations out (numpy for a 4 x 4 solve). Every figure it returns is a
prediction.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist

import numpy as np

from ado_actuators.sfttrainer.plan.speed.devices import REFERENCE_NAME as REFERENCE_DEVICE

CPU = "CPU"
"""The device name of rows trained on CPUs (number_gpus 0)."""


@dataclasses.dataclass(frozen=True)
class Prior:
    """What is believed of a device before any of its rows: its factor's spread (log scale),
    each training method's own factor's spread on top of it, and one row's spread about them,
    worth `weight` rows."""

    shift_sd: float
    spread: float
    method_sd: float = 0.10
    weight: float = 3.0


FITTED_DEVICE = Prior(shift_sd=0.01, spread=0.07, method_sd=0.01)
"""The reference device: the left-one-family-out error is 3.3 % median, 10 % at the 90th
percentile (docs/benchmarks/throughput.md), and no family strays as a whole: its factor barely
moves."""
DATASHEET_DEVICE = Prior(shift_sd=0.35, spread=0.10, method_sd=0.2)
"""A device priced from what it achieves, the framework's constants fitted on another: the L40's
runs were up to 33 % slower than predicted before calibration, LoRA's more than full
fine-tuning's."""
UNPRICED_DEVICE = Prior(shift_sd=4.0, spread=1.0, method_sd=0.3)
"""A device the speed model cannot price (CPUs): the reference device's prediction says only
which configuration is faster, not by how much (a tiny model's batch 32 over batch 1: 30 times
on the reference GPU, 3 times measured on 2 CPU cores); the first row sets the scale."""


def prior_for(device: str) -> Prior:
    if device == REFERENCE_DEVICE:
        return FITTED_DEVICE
    if device == CPU or not device:
        return UNPRICED_DEVICE
    return DATASHEET_DEVICE


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured configuration: its device, its training method, the speed model's
    prediction and what was measured (any throughput unit, the same for both)."""

    device: str
    predicted: float
    measured: float
    method: str = ""

    @property
    def log_ratio(self) -> float:
        return math.log(self.measured / self.predicted)


@dataclasses.dataclass(frozen=True)
class Interval:
    """A predicted throughput and its interval (low, high), at `coverage`."""

    central: float
    low: float
    high: float
    coverage: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A device's factors (log scale): the device's own and each method's on top of it, their
    joint posterior, the spread of one row about them, and how many rows made them."""

    device: str
    rows: int
    methods: tuple[str, ...]
    mean: tuple[float, ...]  # the device's shift, then one per method
    covariance: tuple[tuple[float, ...], ...]
    spread: float
    method_sd: float

    def _shift(self, method: str) -> tuple[float, float]:
        """The log factor of `method` on this device, and its variance."""
        index = [0] + ([1 + self.methods.index(method)] if method in self.methods else [])
        mean = sum(self.mean[i] for i in index)
        variance = sum(self.covariance[i][j] for i in index for j in index)
        if method not in self.methods:
            variance += self.method_sd**2
        return mean, variance

    def factor(self, method: str = "") -> float:
        return math.exp(self._shift(method)[0])

    def interval(self, predicted: float, coverage: float = 0.95, method: str = "") -> Interval:
        """The calibrated prediction of a configuration the speed model predicts at
        `predicted`, and its interval."""
        z = NormalDist().inv_cdf(0.5 + coverage / 2)
        shift, variance = self._shift(method)
        sd = math.sqrt(variance + self.spread**2)
        central = predicted * math.exp(shift)
        return Interval(central, central * math.exp(-z * sd), central * math.exp(z * sd), coverage)


def _design(rows: Sequence[Row], methods: Sequence[str]) -> np.ndarray:
    return np.array([[1.0] + [float(r.method == m) for m in methods] for r in rows])


def _posterior(
    rows: Sequence[Row], methods: Sequence[str], prior: Prior, spread: float
) -> tuple[np.ndarray, np.ndarray]:
    """The factors' posterior mean and covariance (a Gaussian prior, Gaussian rows)."""
    x = _design(rows, methods).reshape(len(rows), 1 + len(methods))
    y = np.array([r.log_ratio for r in rows])
    prior_precision = np.diag([prior.shift_sd**-2] + [prior.method_sd**-2] * len(methods))
    covariance = np.linalg.inv(prior_precision + x.T @ x / spread**2)
    return covariance @ (x.T @ y) / spread**2, covariance


def _left_out_spread(rows: Sequence[Row], methods: Sequence[str], prior: Prior) -> float:
    """One row's spread about the factors: each row against the factors fitted without it,
    less those factors' own uncertainty, pooled with the prior's spread worth `prior.weight`
    rows."""
    if len(rows) < 2:
        return prior.spread
    squares = 0.0
    for i, row in enumerate(rows):
        mean, covariance = _posterior([*rows[:i], *rows[i + 1 :]], methods, prior, prior.spread)
        x = _design([row], methods)[0]
        squares += max((row.log_ratio - float(x @ mean)) ** 2 - float(x @ covariance @ x), 0.0)
    return math.sqrt((prior.weight * prior.spread**2 + squares) / (prior.weight + len(rows)))


def calibrate(device: str, rows: Iterable[Row], prior: Prior | None = None) -> Calibration:
    """The device's calibration from its measured rows (none: the prior alone)."""
    prior = prior or prior_for(device)
    kept = [r for r in rows if r.predicted > 0 and r.measured > 0]
    methods = sorted({r.method for r in kept})
    spread = _left_out_spread(kept, methods, prior)
    mean, covariance = _posterior(kept, methods, prior, spread)
    return Calibration(
        device,
        len(kept),
        tuple(methods),
        tuple(float(v) for v in mean),
        tuple(tuple(float(v) for v in line) for line in covariance),
        spread,
        prior.method_sd,
    )


def calibrate_devices(rows: Iterable[Row]) -> dict[str, Calibration]:
    """One calibration per device the rows name."""
    by_device: dict[str, list[Row]] = {}
    for row in rows:
        by_device.setdefault(row.device, []).append(row)
    return {device: calibrate(device, found) for device, found in sorted(by_device.items())}
