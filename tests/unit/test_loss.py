"""The loss of a row's window (metrics/loss.py): its first step, its last tenth, whether it was
finite, and the rule that says it rose across the window."""

from __future__ import annotations

import math
import re

import pytest

from ado_actuators.sfttrainer.contract import loss as names
from ado_actuators.sfttrainer.contract.trainer_io import RankOutcome, RankReport, StepTiming
from ado_actuators.sfttrainer.metrics import loss
from ado_actuators.sfttrainer.metrics.aggregate import benchmark_properties
from ado_actuators.sfttrainer.stats.batch_means import T_975


def steps(losses, labelled=None):
    return [
        StepTiming(
            step=1 + i,
            start=i,
            end=i + 1,
            dataset_tokens=10,
            loss=value,
            labelled_tokens=labelled[i] if labelled else None,
        )
        for i, value in enumerate(losses)
    ]


def rank(number, losses, labelled=None):
    return RankReport(
        rank=number,
        local_rank=number,
        world_size=2,
        hostname="n0",
        outcome=RankOutcome.OK,
        steps=steps(losses, labelled),
    )


def judged(losses, warmup=0, labelled=None):
    trained = [rank(0, losses, labelled)]
    return loss.report_loss(trained, trained[0].steps[warmup:])


def test_first_step_last_tenth_and_finite_are_read_from_the_steps_losses():
    found = judged([3.0, 2.5, 2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1, 1.0])
    # 13 steps: a tenth is at least 3 steps
    assert (found.first_step, found.tenth) == (3.0, 3)
    assert found.last_tenth == pytest.approx((1.2 + 1.1 + 1.0) / 3)
    assert found.properties() == {
        names.FIRST_STEP: 3.0,
        names.LAST_TENTH: pytest.approx(1.1),
        names.FINITE: 1.0,
        names.ROSE: 0.0,
    }
    assert found.note() is None and found.why_not_judged() is None


@pytest.mark.parametrize(("count", "tenth"), [(1, 1), (2, 2), (30, 3), (31, 4), (45, 5), (200, 20)])
def test_the_last_tenth_holds_at_least_3_steps_or_every_step_of_a_shorter_window(count, tenth):
    found = judged([2.0] * count)
    assert found.tenth == tenth and found.last_tenth == 2.0


def test_warm_up_is_out_of_the_window_but_the_first_step_is_the_first_trained():
    found = judged([9.0, 8.0, 7.0, 2.0, 2.0, 2.0], warmup=3)
    assert found.first_step == 9.0  # the initial weights on the first batch
    assert found.last_tenth == 2.0 and found.window_steps == 3
    assert found.rise is None  # 3 window steps: fewer than two tenths of 3
    assert (
        found.why_not_judged()
        == "train_loss_rose omitted: 3 measured step(s) with a loss, the rule needs 6"
    )
    assert names.ROSE not in found.properties()


def test_a_loss_that_is_not_finite_anywhere_is_said_and_no_loss_figure_is_invented():
    found = judged([2.0, float("nan"), float("nan"), 2.0, 1.9, float("inf"), 1.8])
    assert found.not_finite == (2, 3, 6) and not found.finite
    # the last tenth (1.9, inf, 1.8) is not finite either: left out, never reported as a number
    assert found.properties() == {names.FIRST_STEP: 2.0, names.FINITE: 0.0}
    assert found.rise is None
    assert found.note() == (
        "training loss not finite at 3 of 7 steps (step 2, 3, 6): the run is not training, so "
        "its speed answers nothing; it is never named fastest"
    )


def test_a_step_whose_every_label_was_masked_is_said_to_have_trained_nothing():
    """0 / 0: fms-hf-tuning masks every position before the response template, and a batch
    cut off before it has no label left."""
    found = judged([float("nan")] * 3, labelled=[0, 0, 0])
    assert found.unlabelled == (1, 2, 3) and found.properties()[names.FINITE] == 0.0
    assert found.note() == (
        "training loss not finite at 3 of 3 steps (step 1, 2, 3): every label of those steps' "
        "batches was masked, so the loss is 0 / 0 (fms-hf-tuning trains only what follows the "
        "response template; here it is cut off at model_max_length, or missing): the run is not "
        "training, so its speed answers nothing; it is never named fastest"
    )
    diverged = judged([2.0, float("nan")], labelled=[40, 40])
    assert "masked" not in diverged.note()


def test_a_steps_loss_is_the_mean_over_the_ranks_as_hugging_face_logs_it():
    """HF gathers each rank's summed micro-step losses and logs their mean; a NaN on any rank
    makes the step's loss NaN."""
    reports = [rank(1, [2.0, float("nan"), 1.0], [5, 5, 0]), rank(0, [3.0, 1.0, None], [5, 5, 0])]
    merged = loss.merged(reports)
    assert [(m.step, m.labelled_tokens) for m in merged] == [(1, 10), (2, 10), (3, 0)]
    assert merged[0].loss == 2.5 and math.isnan(merged[1].loss) and merged[2].loss == 1.0
    found = loss.report_loss(reports, reports[1].steps)
    assert found.first_step == 2.5 and found.not_finite == (2,)


@pytest.mark.parametrize(
    ("count", "said"), [(5, "(step 1, 2, 3, 4, 5)"), (6, "(step 1, 2, 3, 4, 5, ...)")]
)
def test_the_note_names_the_first_five_steps_not_finite(count, said):
    assert said in judged([float("nan")] * count).note()


def test_without_a_step_in_the_window_the_window_has_no_loss():
    trained = [rank(0, [2.0, 2.0])]
    found = loss.report_loss(trained, [])
    assert (found.first_step, found.last_tenth, found.window_steps) == (2.0, None, 0)


def test_a_non_finite_warm_up_step_counts():
    assert judged([float("nan"), 2.0, 2.0, 2.0], warmup=1).properties()[names.FINITE] == 0.0


def test_without_a_loss_there_are_no_loss_properties_and_a_note_says_why():
    found = judged([None, None])
    assert found.properties() == {} and found.metadata() is None
    assert found.why_not_judged() == (
        "train_loss_first_step, train_loss_last_tenth, train_loss_finite, train_loss_rose "
        "omitted: the trainer reported no training loss (training_step returned none)"
    )


def noise(count, seed=0, scale=0.05):
    """Deterministic zero-mean jitter."""
    return [scale * math.sin(7.3 * (i + seed)) for i in range(count)]


def test_a_decreasing_or_steady_loss_did_not_rise():
    assert not judged([2.0 - 0.01 * i + e for i, e in enumerate(noise(60))]).rise.rose
    assert not judged([2.0 + e for e in noise(60)]).rise.rose


def test_a_loss_climbing_past_the_spread_rose_and_is_said():
    found = judged([2.0 + 0.05 * i + e for i, e in enumerate(noise(60))])
    assert found.rise.rose and found.properties()[names.ROSE] == 1.0
    r = found.rise
    assert found.note() == (
        f"training loss rose across the measured window: the last 6 steps' mean {r.tail:.4g} is "
        f"{r.tail - r.head:.3g} above the first 6 steps' {r.head:.4g}, beyond the window's own "
        f"spread ({r.threshold:.3g}; a step's standard deviation is {r.deviation:.3g}): the run "
        "may be diverging, so it is never named fastest"
    )
    assert found.metadata()["rise"] == {
        "head": r.head,
        "tail": r.tail,
        "steps": 6,
        "deviation": r.deviation,
        "threshold": r.threshold,
    }


def test_the_spread_is_two_deviations_about_each_tenths_own_mean():
    """k = 4 (40 steps): s pools the deviations of both tenths about their own means, so the
    trend between them does not widen it; the threshold is 2 s."""
    head, tail = [1.0, 1.2, 1.0, 1.2], [1.6, 1.8, 1.6, 1.8]
    found = loss.rise(head + [1.3] * 32 + tail, 4)
    s = math.sqrt(8 * 0.1**2 / 6)  # every step 0.1 from its tenth's mean, 6 degrees of freedom
    assert found.deviation == pytest.approx(s)
    assert found.threshold == pytest.approx(2 * s)
    assert (found.head, found.tail) == (pytest.approx(1.1), pytest.approx(1.7))
    assert found.rose  # 0.6 > 2 * 0.115


@pytest.mark.parametrize(("above", "rose"), [(0.999, False), (1.001, True)])
def test_the_rule_is_a_strict_bound_on_the_rise(above, rose):
    """k = 3 (6 steps): the bound is Student's t(0.975, 4) s sqrt(2/3) = 2.27 s, not 2 s."""
    head = [1.0, 1.1, 0.9]
    s = 0.1  # each tenth's deviation: 0.1 about its mean, 4 degrees of freedom
    threshold = T_975[4] * s * math.sqrt(2 / 3)
    assert threshold == pytest.approx(0.2267, abs=1e-4)
    tail = [x + above * threshold for x in head]
    found = loss.rise(head + tail, 3)
    assert found.threshold == pytest.approx(threshold) and found.rose is rose


def upper_tail(x, df, pieces=20_000):
    """P(T > x) for Student's t with `df` degrees of freedom (Simpson's rule over [x, x+400])."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))

    def density(t):
        return c * (1 + t * t / df) ** (-(df + 1) / 2)

    h = 400 / pieces
    inner = sum((4 if i % 2 else 2) * density(x + i * h) for i in range(1, pieces))
    return (density(x) + density(x + 400) + inner) * h / 3


@pytest.mark.parametrize(("tenth", "at_most"), [(3, 0.0251), (4, 0.0151), (5, 0.007), (10, 0.0002)])
def test_a_steady_loss_rises_by_chance_as_rarely_as_the_docstring_says(tenth, at_most):
    """For independent normal step losses, (tail - head) / (s sqrt(2/k)) is Student's t with
    2k - 2 degrees of freedom: the rule's false alarms are its upper tail past the bound."""
    df = 2 * tenth - 2
    bound = max(loss.SPREAD, T_975.get(df, 0.0) * math.sqrt(2 / tenth)) / math.sqrt(2 / tenth)
    assert upper_tail(bound, df) <= at_most
    docstring = " ".join(loss.__doc__.split())
    assert re.search(r"2\.5 % of windows of 6 to 30 steps, 1\.5 % of 31 to 40", docstring)


def test_a_benchmark_row_carries_the_loss_properties_of_every_rank():
    reports = [rank(1, [2.2, 2.1, 2.0]), rank(0, [2.0, 1.9, 1.8])]
    props = benchmark_properties(reports, number_gpus=2, stop_after_seconds=-1)
    assert props[names.FIRST_STEP] == pytest.approx(2.1) and props[names.FINITE] == 1.0
    assert props[names.LAST_TENTH] == pytest.approx(2.0) and names.ROSE not in props


def test_every_loss_property_is_a_declared_target():
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data

    targets = catalog_data().experiment("finetune_full_benchmark-v1.0.0").targets
    assert set(names.NAMES) <= set(targets)
