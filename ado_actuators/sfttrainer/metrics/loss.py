"""Whether a row trained: the loss of its first step, of the end of its window, whether every
step's loss was finite and whether it rose across the window. Pure.

Each rank reports its loss per step (trainer/tokens.py: what Hugging Face's training_step
returned for each micro-batch, summed over the step as HF sums it into the loss it logs). A
step's loss is the mean over the ranks, as HF averages it across processes before logging
(with transformers >= 4.46 the ranks' figures are token-weighted so that this mean is the
step's loss per labelled token). A step no rank computed a loss over (every label masked:
fms-hf-tuning trains only what follows the response template) has a NaN loss: 0 / 0.

The rise rule. The window's n losses are cut into its first and last tenth, k =
max(3, ceil(n / 10)) steps each (the last tenth is `train_loss_last_tenth`); below 2k = 6
steps nothing is judged. The loss rose when the last tenth's mean exceeds the first tenth's by
more than the window's own spread: twice s, the standard deviation of a step's loss about its
own tenth's mean (pooled over both tenths, 2k - 2 degrees of freedom; about its own tenth so
that a trend between the tenths does not widen it). 2s holds about 95 % of the steps of a
steady loss, so a rise inside it is what the next batch could show by chance. Where k = 3 the
two means are too noisy for 2s alone (a steady loss would pass it in 3.5 % of windows), and
the threshold is the one-sided 97.5 % bound of the difference of two 3-step means,
t(0.975, 4) s sqrt(2/3) = 2.27 s. A steady loss with independent normal step noise then rises
by chance in 2.5 % of windows of 6 to 30 steps, 1.5 % of 31 to 40, under 0.7 % beyond 40 and
under 0.02 % beyond 90 (P(T(2k-2) > threshold / (s sqrt(2/k))), tests/unit/test_loss.py).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

from ado_actuators.sfttrainer.contract import loss as names
from ado_actuators.sfttrainer.contract.trainer_io import RankReport, StepTiming
from ado_actuators.sfttrainer.stats.batch_means import T_975

MIN_TENTH = 3
"""The fewest steps a tenth of the window holds: a mean and a spread need some."""
SPREAD = 2.0
"""The window's spread, in standard deviations of a step's loss: about 95 % of a steady loss's
steps fall within it."""


@dataclasses.dataclass(frozen=True)
class StepLoss:
    """One optimisation step over every rank."""

    step: int
    loss: float  # NaN where a rank's was, or where no rank had a labelled position
    labelled_tokens: int | None  # over every rank; None where no rank counted them


def merged(reports: Sequence[RankReport]) -> list[StepLoss]:
    """Each step any rank reported a loss for, by step number: the mean over the ranks' losses
    and the sum of their labelled positions."""
    losses: dict[int, list[float]] = {}
    labelled: dict[int, list[int]] = {}
    for report in reports:
        for s in report.steps:
            if s.loss is not None:
                losses.setdefault(s.step, []).append(s.loss)
            if s.labelled_tokens is not None:
                labelled.setdefault(s.step, []).append(s.labelled_tokens)
    return [
        StepLoss(n, statistics.fmean(losses[n]), sum(labelled[n]) if n in labelled else None)
        for n in sorted(losses)
    ]


@dataclasses.dataclass(frozen=True)
class Rise:
    """The first and last tenths of the window, and the rule's verdict."""

    head: float  # mean loss of the first k window steps
    tail: float  # of the last k
    steps: int  # k
    deviation: float  # s: a step's standard deviation about its tenth's mean
    threshold: float  # how far the tail may lie above the head

    @property
    def rose(self) -> bool:
        return self.tail - self.head > self.threshold


@dataclasses.dataclass(frozen=True)
class WindowLoss:
    first_step: float | None  # the first trained step's loss
    last_tenth: float | None  # mean over the window's last tenth
    tenth: int  # steps in that tenth
    window_steps: int  # window steps with a loss
    with_loss: int  # steps with a loss, warm-up included
    not_finite: tuple[int, ...]  # steps whose loss was NaN or inf
    rise: Rise | None  # None: the window is too short, or not finite
    unlabelled: tuple[int, ...] = ()  # steps no position of which had a label

    @property
    def finite(self) -> bool:
        return not self.not_finite

    def properties(self) -> dict[str, float]:
        """The loss properties; none without a loss, a loss only where it is finite."""
        if not self.with_loss:
            return {}
        found = {
            names.FIRST_STEP: self.first_step,
            names.LAST_TENTH: self.last_tenth,
            names.FINITE: float(self.finite),
            names.ROSE: None if self.rise is None else float(self.rise.rose),
        }
        return {k: v for k, v in found.items() if v is not None and math.isfinite(v)}

    def note(self) -> str | None:
        """Why the row's speed is no answer, or None."""
        if self.not_finite:
            steps = ", ".join(map(str, self.not_finite[:5])) + (
                ", ..." if len(self.not_finite) > 5 else ""
            )
            said = (
                f"training loss not finite at {len(self.not_finite)} of {self.with_loss} steps "
                f"(step {steps})"
            )
            if set(self.not_finite) <= set(self.unlabelled):
                said += (
                    ": every label of those steps' batches was masked, so the loss is 0 / 0 "
                    "(fms-hf-tuning trains only what follows the response template; here it is "
                    "cut off at model_max_length, or missing)"
                )
            return f"{said}: the run is not training, so its speed answers nothing; it is never named fastest"
        if self.rise is not None and self.rise.rose:
            r = self.rise
            return (
                f"training loss rose across the measured window: the last {r.steps} steps' mean "
                f"{r.tail:.4g} is {r.tail - r.head:.3g} above the first {r.steps} steps' "
                f"{r.head:.4g}, beyond the window's own spread ({r.threshold:.3g}; a step's "
                f"standard deviation is {r.deviation:.3g}): the run may be diverging, so it is "
                "never named fastest"
            )
        return None

    def why_not_judged(self) -> str | None:
        if not self.with_loss:
            return (
                f"{', '.join(names.NAMES)} omitted: the trainer reported no training loss "
                "(training_step returned none)"
            )
        if self.rise is None and self.finite:
            return (
                f"{names.ROSE} omitted: {self.window_steps} measured step(s) with a loss, the "
                f"rule needs {2 * MIN_TENTH}"
            )
        return None

    def metadata(self) -> dict | None:
        if not self.with_loss:
            return None
        rise = dataclasses.asdict(self.rise) if self.rise is not None else None
        return {
            "tenth_steps": self.tenth,
            "window_steps": self.window_steps,
            "not_finite_steps": list(self.not_finite),
            "unlabelled_steps": list(self.unlabelled),
            "rise": rise,
        }


def window_loss(steps: Sequence[StepLoss], first_window_step: int | None) -> WindowLoss:
    """`steps`: every step trained, over every rank; the window starts at `first_window_step`
    (None: no step is in it)."""
    window = [
        s.loss for s in steps if first_window_step is not None and s.step >= first_window_step
    ]
    tenth = min(len(window), max(MIN_TENTH, math.ceil(len(window) / 10)))
    not_finite = tuple(s.step for s in steps if not math.isfinite(s.loss))
    return WindowLoss(
        first_step=steps[0].loss if steps else None,
        last_tenth=statistics.fmean(window[-tenth:]) if window else None,
        tenth=tenth,
        window_steps=len(window),
        with_loss=len(steps),
        not_finite=not_finite,
        rise=rise(window, tenth) if not not_finite else None,
        unlabelled=tuple(s.step for s in steps if s.labelled_tokens == 0),
    )


def rise(losses: Sequence[float], tenth: int) -> Rise | None:
    """The rise rule over the window's losses (this module's docstring); None below 2 tenths
    of MIN_TENTH steps."""
    if tenth < MIN_TENTH or len(losses) < 2 * tenth:
        return None
    head, tail = losses[:tenth], losses[-tenth:]
    squares = sum((x - statistics.fmean(part)) ** 2 for part in (head, tail) for x in part)
    deviation = math.sqrt(squares / (2 * tenth - 2))
    # from k = 4 on, t * sqrt(2/k) < 2 (2.45 * 0.71 = 1.73): the spread alone decides, and
    # T_975 (to 29 degrees of freedom, k <= 15) holds every k where the bound could be wider
    noise = T_975.get(2 * tenth - 2, 0.0) * math.sqrt(2 / tenth)
    return Rise(
        head=statistics.fmean(head),
        tail=statistics.fmean(tail),
        steps=tenth,
        deviation=deviation,
        threshold=max(SPREAD, noise) * deviation,
    )


def report_loss(reports: list[RankReport], window: Sequence[StepTiming]) -> WindowLoss:
    """The row's loss: every rank's steps; `window`: rank 0's steps of the measured window."""
    return window_loss(merged(reports), window[0].step if window else None)
