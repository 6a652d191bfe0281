"""space/calibration.py: a device's factor from its rows, shrunk towards the speed model's fit,
and intervals that narrow as rows accumulate."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ado_actuators.sfttrainer.space.calibration import (
    ATTENTION_KERNEL_SD,
    CPU,
    DATASHEET_DEVICE,
    FITTED_DEVICE,
    FRAMEWORK_SHIFT_SD,
    GROUP_SD,
    OFF_SOURCE_GROUP_SD,
    OFF_SOURCE_SUBGROUP_SD,
    OFF_SOURCE_WITHIN,
    OTHER_FRAMEWORK,
    REFERENCE_DEVICE,
    SUBGROUP_SD,
    UNPRICED_DEVICE,
    WITHIN_SUBGROUP,
    Row,
    calibrate,
    calibrate_devices,
    fit_level_spreads,
    prior_for,
    scaled,
)
from ado_actuators.sfttrainer.stats.interval import t_quantile

L40 = "NVIDIA-L40"


def rows(ratio: float, count: int, device: str = L40, method: str = "lora") -> list[Row]:
    return [Row(device, 1000.0 * (i + 1), 1000.0 * (i + 1) * ratio, method) for i in range(count)]


def test_no_rows_is_the_prior_alone():
    found = calibrate(L40, [])
    assert found.rows == 0 and found.factor() == 1.0
    interval = found.interval(1000.0)
    prior = DATASHEET_DEVICE
    # the device's and method's factors normal; the levels carried from the A100 (group,
    # subgroup, row) Student's t with `weight` degrees of freedom
    known = prior.shift_sd**2 + prior.method_sd**2
    carried = prior.group_sd**2 + prior.subgroup_sd**2 + prior.spread**2
    half = math.sqrt(1.959964**2 * known + 3.182446**2 * carried)
    assert interval.central == 1000.0
    assert interval.high == pytest.approx(1000.0 * math.exp(half), rel=2e-3)
    fitted = calibrate(REFERENCE_DEVICE, []).interval(1000.0)
    prior = FITTED_DEVICE
    levels = (prior.shift_sd, prior.method_sd, prior.group_sd, prior.subgroup_sd, prior.spread)
    sd = math.sqrt(sum(v**2 for v in levels))
    assert fitted.high == pytest.approx(1000.0 * math.exp(1.959964 * sd), rel=1e-5)


@pytest.mark.parametrize(
    ("freedom", "expected"), [(3, 3.182446), (5, 2.570582), (10, 2.228139), (math.inf, 1.959964)]
)
def test_t_quantiles(freedom, expected):
    assert t_quantile(0.975, freedom) == pytest.approx(expected, rel=2e-3)


def test_t_intervals_narrow_towards_normal_as_rows_accumulate():
    few, many = calibrate(L40, rows(0.8, 1)), calibrate(L40, rows(0.8, 30))
    assert (
        few.freedom == DATASHEET_DEVICE.weight + 1 and many.freedom == DATASHEET_DEVICE.weight + 30
    )
    assert calibrate(REFERENCE_DEVICE, rows(0.8, 1, REFERENCE_DEVICE)).freedom == math.inf


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
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0] / 2


def test_the_spread_comes_from_the_rows_left_out():
    steady = calibrate(L40, rows(0.8, 8))
    scattered = calibrate(
        L40, [Row(L40, 1000.0, 1000.0 * r, "lora") for r in (0.6, 1.0, 0.7, 0.95, 0.65, 0.9)]
    )
    assert steady.spread == DATASHEET_DEVICE.spread < scattered.spread


def test_carried_spreads_only_widen_and_known_ones_narrow_too():
    """The first rows a walk measures are chosen alike: their agreement does not narrow spreads
    carried from elsewhere, but it does narrow the fitted device's own."""
    agreeing = [Row(L40, 1000.0, 800.0 * (1 + 0.001 * i), "lora") for i in range(8)]
    assert calibrate(L40, agreeing).spread == DATASHEET_DEVICE.spread
    known = dataclasses.replace(DATASHEET_DEVICE, known_spreads=True)
    assert calibrate(L40, agreeing, known).spread < DATASHEET_DEVICE.spread


def test_off_the_fitted_source_the_spreads_are_the_validations():
    other = prior_for(REFERENCE_DEVICE, fitted_framework=False)
    assert other is OTHER_FRAMEWORK and other.shift_sd == FRAMEWORK_SHIFT_SD
    for prior in (DATASHEET_DEVICE, OTHER_FRAMEWORK):
        assert (prior.group_sd, prior.subgroup_sd, prior.spread) == (
            OFF_SOURCE_GROUP_SD,
            OFF_SOURCE_SUBGROUP_SD,
            OFF_SOURCE_WITHIN,
        )
        assert not prior.known_spreads
        assert prior.attention_sd == ATTENTION_KERNEL_SD
    # the kernel priced is the one the fitted runs used; a CPU has no attention kernel priced
    assert FITTED_DEVICE.attention_sd == 0 and UNPRICED_DEVICE.attention_sd == 0
    total = math.hypot(OFF_SOURCE_GROUP_SD, OFF_SOURCE_SUBGROUP_SD, OFF_SOURCE_WITHIN)
    assert total > math.hypot(GROUP_SD, SUBGROUP_SD, WITHIN_SUBGROUP)  # wider off the source


def test_the_attention_kernels_spread_spans_the_published_kernels():
    """ATTENTION_KERNEL_SD from the kernels' published H100 rates (metrics/gpu_peaks.yaml):
    forward and backward at 4,096 tokens, the backward 2.5 times the forward's FLOPs; the
    farther of standard attention and flash-attention 3, against flash-attention 2, at 1.96
    spreads."""
    from ado_actuators.sfttrainer.plan.speed.prediction import device_of

    h100 = device_of("NVIDIA-H100-80GB-HBM3")

    def rate(kernel: str) -> float:
        forward, backward = (
            h100.attention_tflops(kernel, 128, 4096, False, d) for d in ("forward", "backward")
        )
        return 3.5 / (1 / forward + 2.5 / backward)

    apart = [math.log(rate(k) / rate("fa2")) for k in ("eager", "fa3")]
    assert apart[0] < 0 < apart[1]
    assert max(abs(a) for a in apart) / 1.96 == pytest.approx(ATTENTION_KERNEL_SD, abs=0.005)


def test_rows_at_long_sequences_teach_the_attention_kernels_factor():
    """A device whose long runs (60 % of the step in attention) run 30 % slower than predicted
    and whose short ones (5 %) run as predicted: its attention kernel is slower than the one
    priced. Another long configuration is predicted slower, a short one barely moves; before
    any row, the long one's interval is the wider."""
    prior = dataclasses.replace(DATASHEET_DEVICE, group_sd=0.0, subgroup_sd=0.0)
    before = calibrate(L40, [], prior)
    long_width = before.interval(1000.0, attention_share=0.6).half_width
    assert long_width > before.interval(1000.0, attention_share=0.05).half_width
    measured = [Row(L40, 1000.0, 1000.0, "lora", attention_share=0.05) for _ in range(3)]
    measured += [Row(L40, 1000.0, 700.0, "lora", attention_share=0.6) for _ in range(3)]
    found = calibrate(L40, measured, prior)
    long, short = (found.interval(1000.0, 0.95, "lora", attention_share=s) for s in (0.6, 0.05))
    assert long.central < 800.0 and 950.0 < short.central < 1050.0
    assert found.factor("lora", attention_share=0.6) == pytest.approx(long.central / 1000.0)
    # the fitted device prices its own kernel: no attention factor, the share changes nothing
    fitted = calibrate(
        REFERENCE_DEVICE, [dataclasses.replace(r, device=REFERENCE_DEVICE) for r in measured]
    )
    assert fitted.factor("lora", attention_share=0.6) == fitted.factor("lora", attention_share=0.05)


def test_a_wider_spread_moves_the_device_factor_less():
    """One row 30 % fast: another group's predicted factor follows it less when a group's and
    a row's own error may be larger (the first rows are no more than one group's word)."""
    row = [Row(L40, 1000.0, 1300.0, "lora", "g", "g 1")]
    narrow = dataclasses.replace(
        DATASHEET_DEVICE, group_sd=GROUP_SD, subgroup_sd=SUBGROUP_SD, spread=WITHIN_SUBGROUP
    )
    moved = [calibrate(L40, row, p).factor("lora", "h", "h 1") for p in (narrow, DATASHEET_DEVICE)]
    assert 1.0 < moved[1] < moved[0] < 1.3


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


def test_level_spreads_from_rows():
    # two groups at +-0.1; in each, two GPU counts at +-0.03 about it; rows +-0.01 about those
    def group(level: float) -> list[list[float]]:
        return [
            [level + 0.03 + 0.01, level + 0.03 - 0.01],
            [level - 0.03 + 0.01, level - 0.03 - 0.01],
        ]

    found_group, found_sub, within = fit_level_spreads([group(0.1), group(-0.1)])
    assert within == pytest.approx(math.sqrt(8 * 0.01**2 / 4))
    # subgroup means +-0.03 about the group's: sum of squares 2 * 0.03^2 over 1 degree, less noise
    assert found_sub == pytest.approx(math.sqrt(2 * 0.03**2 - within**2 / 2 * 2 / 2))
    expected = 0.1**2 - (2 * (found_sub**2 + within**2 / 2)) / 4
    assert found_group == pytest.approx(math.sqrt(expected))
    assert fit_level_spreads([[[0.0, 0.1, -0.1]]])[0] == 0.0  # a mean within its rows' noise


def test_one_row_of_a_group_calibrates_the_rest_of_it():
    prior = FITTED_DEVICE
    seen = [Row(REFERENCE_DEVICE, 1000.0, 1100.0, "lora", "g", "g 2")]
    found = calibrate(REFERENCE_DEVICE, seen)
    same, other_gpus = (
        found.interval(2000.0, 0.95, "", "g", "g 2"),
        found.interval(2000.0, 0.95, "", "g", "g 4"),
    )
    stranger = found.interval(2000.0, 0.95, "", "h", "h 2")
    assert same.central > other_gpus.central > 2000.0 * 1.03 > stranger.central
    assert same.half_width < other_gpus.half_width < stranger.half_width
    # the group's factor: its share of the row's variance, a Gaussian mean
    total = prior.group_sd**2 + prior.subgroup_sd**2 + prior.spread**2
    share = prior.group_sd**2 / total
    assert math.log(found.factor("", "g")) == pytest.approx(math.log(1.1) * share, rel=0.05)


def test_rows_without_a_group_count_its_spread_as_noise():
    named = calibrate(REFERENCE_DEVICE, [Row(REFERENCE_DEVICE, 1000.0, 1200.0, "", "g", "s")])
    bare = calibrate(REFERENCE_DEVICE, [Row(REFERENCE_DEVICE, 1000.0, 1200.0)])
    assert bare.groups == () and named.groups == ("g",) and named.subgroups == ("s",)
    assert bare.interval(1000.0).half_width == pytest.approx(
        named.interval(1000.0, 0.95, "", "h", "t").half_width, rel=0.02
    )


def test_rows_that_stray_more_than_the_prior_says_widen_every_level():
    def rows_of(spread: float) -> list[Row]:
        return [
            Row(L40, 1000.0, 1000.0 * math.exp(sign * spread), "lora", "g", "s")
            for sign in (1, -1, 1, -1, 1, -1)
        ]

    wild, tame = calibrate(L40, rows_of(0.3)), calibrate(L40, rows_of(0.001))
    prior = DATASHEET_DEVICE
    assert wild.spread > prior.spread == tame.spread
    assert wild.group_sd / prior.group_sd == pytest.approx(wild.spread / prior.spread)
    assert wild.subgroup_sd / prior.subgroup_sd == pytest.approx(wild.spread / prior.spread)
    assert (
        scaled(prior, 2.0).group_sd == 2 * prior.group_sd
        and scaled(prior, 2.0).shift_sd == prior.shift_sd
    )


def test_the_left_out_residuals_are_exact():
    """Sherman-Morrison's left-out residuals against refitting without each row."""
    from ado_actuators.sfttrainer.space import calibration as c

    given = [
        Row(L40, 1000.0, 1000.0 * r, m, g, g + s)
        for r, m, g, s in [
            (0.8, "lora", "a", "1"),
            (0.9, "lora", "a", "2"),
            (0.7, "full", "b", "1"),
            (0.75, "full", "c", "1"),
        ]
    ]
    prior = dataclasses.replace(DATASHEET_DEVICE, known_spreads=True)
    levels = c._Levels.of(given, prior)
    squares = 0.0
    for i, row in enumerate(given):
        fit = c._posterior([*given[:i], *given[i + 1 :]], levels, prior)
        x = levels.columns([row])[0]
        noise = prior.spread**2 + levels.unshared([row], prior)[0]
        squares += (row.log_ratio - x @ fit.mean) ** 2 / (x @ fit.covariance @ x + noise)
    expected = math.sqrt((prior.weight + squares) / (prior.weight + 4))
    assert c._left_out_scale(given, levels, prior) == pytest.approx(expected)
    carried = dataclasses.replace(prior, known_spreads=False)
    assert c._left_out_scale(given, levels, carried) == pytest.approx(max(expected, 1.0))


def test_the_preview_groups_a_csvs_rows_as_it_groups_its_own():
    """space/calibrated.py: a measured CSV's strings and a space's entity values name the same
    group; how long a run lasts names none; the GPU count and length name the subgroup."""
    from ado_actuators.sfttrainer.space.calibrated import groups_of as group_of

    lora = "finetune_lora_benchmark-v1.0.0"
    entity = {
        "model_name": "llama3.1-8b",
        "number_gpus": 4,
        "gpu_model": "NVIDIA-H100-80GB-HBM3",
        "model_max_length": 2048,
        "batch_size": 8,
        "auto_stop_method": "STEADY_CI95_1PCT",
        "auto_stop_max_seconds": 600,
    }
    csv = {"model_name": "llama3.1-8b", "number_gpus": "4.0", "model_max_length": "2048"}
    assert group_of(lora, entity) == group_of(lora, {**csv, "batch_size": "32"})
    other_gpus = group_of(lora, {**csv, "number_gpus": "8"})
    assert other_gpus[0] == group_of(lora, csv)[0] and other_gpus[1] != group_of(lora, csv)[1]
    assert group_of(lora, {**csv, "torch_dtype": "float16"})[0] != group_of(lora, csv)[0]
    assert group_of("finetune_full_benchmark-v1.0.0", csv)[0] != group_of(lora, csv)[0]
