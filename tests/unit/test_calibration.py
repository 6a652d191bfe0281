"""ledger/calibration.py: a device's factor from its rows, shrunk towards the speed model's fit,
and intervals that narrow as rows accumulate."""

from __future__ import annotations

import math

import pytest

from ado_actuators.sfttrainer.ledger.calibration import (
    CPU,
    DATASHEET_DEVICE,
    FITTED_DEVICE,
    REFERENCE_DEVICE,
    Row,
    calibrate,
    calibrate_devices,
    prior_for,
)

L40 = "NVIDIA-L40"


def rows(ratio: float, count: int, device: str = L40, method: str = "lora") -> list[Row]:
    return [Row(device, 1000.0 * (i + 1), 1000.0 * (i + 1) * ratio, method) for i in range(count)]


def test_no_rows_is_the_prior_alone():
    found = calibrate(L40, [])
    assert found.rows == 0 and found.factor() == 1.0
    interval = found.interval(1000.0)
    sd = math.sqrt(DATASHEET_DEVICE.shift_sd**2 + DATASHEET_DEVICE.method_sd**2)
    sd = math.hypot(sd, DATASHEET_DEVICE.spread)
    assert interval.central == 1000.0
    assert interval.high == pytest.approx(1000.0 * math.exp(1.959964 * sd), rel=1e-5)


def test_few_rows_stay_near_the_prior_and_many_follow_the_rows():
    one, many = calibrate(L40, rows(0.75, 1)), calibrate(L40, rows(0.75, 40))
    assert 0.75 < one.factor("lora") < 1.0
    assert many.factor("lora") == pytest.approx(0.75, rel=0.01)
    assert abs(math.log(one.factor("lora"))) < abs(math.log(many.factor("lora")))


def test_the_fitted_device_barely_moves():
    found = calibrate(REFERENCE_DEVICE, rows(0.9, 2, REFERENCE_DEVICE))
    assert found.factor("lora") > 0.97
    assert prior_for(REFERENCE_DEVICE) is FITTED_DEVICE


def test_a_cpu_follows_its_first_row():
    found = calibrate(CPU, rows(0.001, 1, CPU))
    assert 0.0005 < found.factor("lora") < 0.002  # a thousandth: most of the way at once


@pytest.mark.parametrize("ratio", [0.7, 1.2])
def test_intervals_narrow_as_rows_accumulate(ratio):
    widths = [
        calibrate(L40, rows(ratio, n)).interval(1000.0, method="lora").half_width / 1000
        for n in (0, 1, 2, 4, 16)
    ]
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0] / 3


def test_the_spread_comes_from_the_rows_left_out():
    steady = calibrate(L40, rows(0.8, 8))
    scattered = calibrate(
        L40, [Row(L40, 1000.0, 1000.0 * r, "lora") for r in (0.6, 1.0, 0.7, 0.95, 0.65, 0.9)]
    )
    assert steady.spread < DATASHEET_DEVICE.spread < scattered.spread


def test_a_method_without_rows_keeps_its_own_uncertainty():
    found = calibrate(L40, rows(0.75, 6, method="lora"))
    seen, unseen = found.interval(1000.0, method="lora"), found.interval(1000.0, method="full")
    assert unseen.half_width / unseen.central > seen.half_width / seen.central
    assert found.factor("full") == pytest.approx(found.factor(""), rel=1e-9)


def test_coverage_widens_the_interval():
    found = calibrate(L40, rows(0.8, 3))
    assert found.interval(1.0, 0.99).high > found.interval(1.0, 0.95).high > 1.0 * found.factor()


def test_one_calibration_per_device():
    found = calibrate_devices(rows(0.8, 2) + rows(0.5, 3, CPU))
    assert sorted(found) == [CPU, L40] and found[CPU].rows == 3
