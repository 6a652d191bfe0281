"""The loss properties of a benchmark row, named once: metrics/loss.py computes them from the
rank reports, report/ reads them back from ado's store to pass over a row that did not train
and to check that two releases started from the same loss. catalog/experiments.yaml declares
them as targets."""

from __future__ import annotations

FIRST_STEP = "train_loss_first_step"
"""The training loss of the first optimisation step: the initial weights on the first batch,
before any update, so two runs of one configuration on one dataset and seed agree on it up
to rounding, however long their warm-up."""
LAST_TENTH = "train_loss_last_tenth"
"""The mean training loss over the last tenth of the measured window (at least 3 steps, or
every step of a shorter window)."""
FINITE = "train_loss_finite"
"""1 when every step's training loss was finite, warm-up included; 0 when one was NaN or inf."""
ROSE = "train_loss_rose"
"""1 when the loss rose across the measured window by more than the window's own spread
(metrics/loss.py defines it), 0 when it did not; omitted below 6 measured steps."""
NAMES = (FIRST_STEP, LAST_TENTH, FINITE, ROSE)
