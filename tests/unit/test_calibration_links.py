"""Calibration learns a device's link apart from its compute (space/calibration.py's link
factor) from the step split plan/speed/step_time.py exposes (plan/speed/parts.py): rows at one
GPU tell the compute, rows at more the link, and the link moves the other GPU counts' rows as
much as their collectives weigh."""

from __future__ import annotations

import dataclasses
import math

import pytest
from test_device_links import SEVEN_B  # a Llama-2-7B-like model trained in full

from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    Parallelism,
    TrainingConfiguration,
)
from ado_actuators.sfttrainer.plan.speed.devices import device_named
from ado_actuators.sfttrainer.plan.speed.parts import LinkTraffic, StepParts
from ado_actuators.sfttrainer.plan.speed.step_time import step_time
from ado_actuators.sfttrainer.space.calibration import (
    LINK_SD_PCIE,
    REFERENCE_DEVICE,
    Row,
    calibrate,
    log_gain,
    prior_for,
)

L40S = "L40S"
PRICED = device_named(L40S)
# the node's link three times slower than the table says, its compute 10 % slower
TRUE = dataclasses.replace(
    PRICED,
    bus_gbps=PRICED.bus_gbps / 3,
    host_gbps=PRICED.host_gbps / 3,
    gemm_tflops=PRICED.gemm_tflops * 0.9,
)


def configuration(gpus: int, batch: int) -> TrainingConfiguration:
    return TrainingConfiguration(
        batch=Batch(per_device_batch=batch, sample_tokens=1024),
        kernels=Kernels(flash_attention=True, attention="flash_attention_2"),
        parallelism=Parallelism(gpus=gpus, backend="FSDP"),
    )


def row(gpus: int, batch: int) -> Row:
    """A configuration as the table prices it, measured on the true device."""
    priced = step_time(SEVEN_B, configuration(gpus, batch), PRICED)
    true = step_time(SEVEN_B, configuration(gpus, batch), TRUE)
    return Row(
        L40S,
        priced.tokens_per_second_per_gpu,
        true.tokens_per_second_per_gpu,
        "full",
        parts=priced.step_parts,
    )


def test_the_step_splits_into_compute_and_the_collectives_within_the_node():
    one = step_time(SEVEN_B, configuration(1, 2), PRICED)
    assert one.step_parts.link is None and one.step_parts.comm_seconds == 0.0
    assert one.step_parts.seconds == pytest.approx(one.seconds)
    four = step_time(SEVEN_B, configuration(4, 2), PRICED)
    assert four.step_parts.comm_seconds == pytest.approx(four.parts["communication"])
    assert four.step_parts.seconds == pytest.approx(four.seconds)
    # across nodes the collectives cross the network: the node's link factor leaves them
    nodes = dataclasses.replace(configuration(8, 2), parallelism=Parallelism(gpus=8, nodes=2))
    assert step_time(SEVEN_B, nodes, PRICED).step_parts.link is None


def test_a_slower_link_exposes_more_of_the_traffic():
    parts = StepParts(0.8, LinkTraffic(0.5, 0.6, 10))  # the compute hides all but a tenth
    # a tenth, and the slowed compute's share of the rest: 0.45 x 0.189 / 1.189
    assert parts.seconds == pytest.approx(0.8 + 0.05 + 0.0715, abs=1e-4)
    assert parts.seconds_at(link=3.0) == pytest.approx(0.8 + 1.5 - 0.6)  # busy throughout
    gain, by_compute, by_link, by_beside = log_gain(parts, 0.0, math.log(3.0))
    assert gain == pytest.approx(-math.log((0.8 + 0.9) / parts.seconds))
    assert by_link < 0 < by_compute
    assert by_beside == pytest.approx(0.0)  # the link sets the pace: no compute to slow
    assert log_gain(None, 0.2, 1.0) == (0.2, 1.0, 0.0, 0.0)


def test_compute_slowed_more_beside_the_collectives_pays_more_of_the_traffic_it_hides():
    parts = StepParts(0.8, LinkTraffic(0.5, 0.6, 10))
    # s = 0.189 x 5: the step pays s / (1 + s) of the 0.45 the compute hides
    assert parts.seconds_at(beside=5.0) == pytest.approx(0.8 + 0.05 + 0.45 * 0.945 / 1.945)
    assert parts.seconds_at(beside=1e9) == pytest.approx(0.8 + 0.5)  # none of it hidden
    _, _, by_link, by_beside = log_gain(parts, 0.0, 0.0)
    assert by_beside < 0 and by_link < 0


def test_rows_at_one_and_two_gpus_move_four_and_eight_as_the_link_says():
    measured = [row(1, 1), row(1, 4), row(2, 1), row(2, 4)]
    found = calibrate(L40S, measured, prior_for(L40S))
    assert found.link_factor == pytest.approx(1 / 3, rel=0.25)
    for gpus in (4, 8):
        for batch in (1, 2, 4):
            target = row(gpus, batch)
            interval = found.interval(target.predicted, 0.95, "full", parts=target.parts)
            assert interval.central == pytest.approx(target.measured, rel=0.05)
            assert interval.low <= target.measured <= interval.high
            # uncalibrated, the slow link leaves these far too fast
            assert target.predicted / target.measured > 1.3


def test_without_the_link_factor_the_compute_factor_cannot_follow_the_gpu_count():
    measured = [row(1, 1), row(1, 4), row(2, 1), row(2, 4)]
    prior = dataclasses.replace(prior_for(L40S), link_sd=0.0)
    found = calibrate(L40S, measured, prior)
    target = row(8, 2)
    central = found.interval(target.predicted, 0.95, "full", parts=target.parts).central
    assert abs(central / target.measured - 1) > 0.15


def test_with_rows_at_one_gpu_only_the_link_keeps_its_prior():
    found = calibrate(L40S, [row(1, 1), row(1, 4)], prior_for(L40S))
    assert found.link_factor == pytest.approx(1.0)
    one, eight = row(1, 2), row(8, 2)
    narrow = found.interval(one.predicted, 0.95, "full", parts=one.parts)
    wide = found.interval(eight.predicted, 0.95, "full", parts=eight.parts)
    assert wide.half_width / wide.central > narrow.half_width / narrow.central
    assert prior_for(L40S).link_sd == LINK_SD_PCIE


def test_the_fitted_device_keeps_today_s_calibration():
    assert prior_for(REFERENCE_DEVICE).link_sd == 0.0
    rows = [dataclasses.replace(row(g, 2), device=REFERENCE_DEVICE) for g in (1, 2)]
    bare = [dataclasses.replace(r, parts=None) for r in rows]
    assert calibrate(REFERENCE_DEVICE, rows).mean == calibrate(REFERENCE_DEVICE, bare).mean


def test_the_preview_names_the_device_s_link_beside_its_attention_kernel():
    from ado_actuators.sfttrainer.cli.preview_calibrated import _device_line

    measured = [row(1, 1), row(1, 4), row(2, 1), row(2, 4)]
    found = calibrate(L40S, measured, prior_for(L40S))
    assert found.attention_factor == pytest.approx(math.exp(found.mean[-3]))
    assert f"link x{found.link_factor:.2f}" in _device_line(L40S, found)
    assert "link x0.3" in _device_line(L40S, found)
    assert f"collectives overlapped {found.overlapped_share:.0%}" in _device_line(L40S, found)


def serial_row(gpus: int, batch: int) -> Row:
    """A configuration as the table prices it, measured on a node whose compute hides none of
    the collectives' traffic (its link as the table prices it, its compute 10 % slower)."""
    priced = step_time(SEVEN_B, configuration(gpus, batch), PRICED)
    parts = priced.step_parts
    hidden_none = parts.seconds_at(compute=1 / 0.9, beside=1e9)
    measured = priced.tokens_per_second_per_gpu * parts.seconds / hidden_none
    return Row(L40S, priced.tokens_per_second_per_gpu, measured, "full", parts=parts)


def test_rows_where_the_compute_hides_no_traffic_teach_the_overlap_apart_from_the_link():
    # at 2 GPUs and 4-16 samples the compute outlasts the traffic: what shows is the overlap
    measured = [serial_row(1, 4), serial_row(1, 16), serial_row(2, 4), serial_row(2, 16)]
    found = calibrate(L40S, measured, prior_for(L40S))
    without = calibrate(L40S, measured, dataclasses.replace(prior_for(L40S), beside_sd=0.0))
    assert found.overlapped_share < 0.5 < without.overlapped_share
    for gpus in (4, 8):
        for batch in (2, 8, 16):
            target = serial_row(gpus, batch)
            interval = found.interval(target.predicted, 0.95, "full", parts=target.parts)
            assert interval.low <= target.measured <= interval.high
            if batch < 8:  # the traffic outlasts the compute: the link, which no row showed
                continue
            assert interval.central == pytest.approx(target.measured, rel=0.05)
            assert target.predicted / target.measured > 1.4  # uncalibrated: far too fast
    for gpus in (4, 8):  # a link factor alone leaves the largest batches far off
        target = serial_row(gpus, 16)
        old = without.interval(target.predicted, 0.95, "full", parts=target.parts)
        assert old.central / target.measured > 1.25
