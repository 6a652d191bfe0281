"""Whether a row trained: the loss of its first step, of the end of its window, whether every
step's loss was finite and whether it rose across the window. Pure.

The losses are the ones Hugging Face's Trainer logs at every step (logging_steps 1; the
callback keeps them on the steps, trainer/callback.py): the step's mean over its micro-batches
and over every rank (HF gathers it across processes before logging; token-weighted from
transformers 4.46 on), rounded to 4 decimals. Every rank logs the same figure, so rank 0's
steps are read. `logging_nan_inf_filter` is off on every command line
(catalog/experiments.yaml): HF's default logs a NaN or inf step as the mean of the finite ones.

The rise rule. The window's n logged losses are cut into its first and last tenth, k =
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
    window_steps: int  # window steps with a logged loss
    logged: int  # steps with a logged loss, warm-up included
    not_finite: tuple[int, ...]  # steps whose loss was NaN or inf
    rise: Rise | None  # None: the window is too short, or not finite

    @property
    def finite(self) -> bool:
        return not self.not_finite

    def properties(self) -> dict[str, float]:
        """The loss properties; none without a logged loss, a loss only where it is finite."""
        if not self.logged:
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
            return (
                f"training loss not finite at {len(self.not_finite)} of {self.logged} steps "
                f"(step {steps}): the run is not training, so its speed answers nothing; it is "
                "never named fastest"
            )
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
        if not self.logged:
            return (
                f"{', '.join(names.NAMES)} omitted: Hugging Face's Trainer logged no training "
                "loss (logging_steps 1 logs one per step)"
            )
        if self.rise is None and self.finite:
            return (
                f"{names.ROSE} omitted: {self.window_steps} measured step(s) with a loss, the "
                f"rule needs {2 * MIN_TENTH}"
            )
        return None

    def metadata(self) -> dict | None:
        if not self.logged:
            return None
        rise = dataclasses.asdict(self.rise) if self.rise is not None else None
        return {
            "tenth_steps": self.tenth,
            "window_steps": self.window_steps,
            "not_finite_steps": list(self.not_finite),
            "rise": rise,
        }


def window_loss(steps: Sequence[StepTiming], window: Sequence[StepTiming]) -> WindowLoss:
    """`steps`: every step rank 0 trained; `window`: those of the measured window."""
    logged = [s for s in steps if s.loss is not None]
    losses = [s.loss for s in window if s.loss is not None]
    tenth = min(len(losses), max(MIN_TENTH, math.ceil(len(losses) / 10)))
    not_finite = tuple(s.step for s in logged if not math.isfinite(s.loss))
    return WindowLoss(
        first_step=logged[0].loss if logged else None,
        last_tenth=statistics.fmean(losses[-tenth:]) if losses else None,
        tenth=tenth,
        window_steps=len(losses),
        logged=len(logged),
        not_finite=not_finite,
        rise=rise(losses, tenth) if not not_finite else None,
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
    """Rank 0's: every rank logs the loss HF gathered over all of them."""
    rank0 = min(reports, key=lambda r: r.rank)
    return window_loss(rank0.steps, window)
