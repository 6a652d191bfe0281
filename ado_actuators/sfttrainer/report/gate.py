"""`--fail-on`: the comparison's verdicts a release pipeline fails on. Pure.

A pair (a configuration in the main space and its match in the other, compare.py) offends:
- `slower`: where it is slower beyond both rows' 95 % intervals, or beyond the ±10 % band
  where either row has no interval (the same rule that flags it in the comparison);
- `loss`: where its first-step loss differs from the other's beyond rounding (report/loss.py),
  or its loss was not finite here and was there. A loss that rose across its window here only
  is shown, not failed: the rise rule flags a steady loss by chance in up to 2.5 % of windows
  (metrics/loss.py), so over a space of 72 configurations a gate failing on it would fail a
  release that changed nothing more often than not (1 - 0.975^72 = 84 %);
- `invalid`: where it is invalid here (e.g. out of GPU memory) and valid there.
"""

from __future__ import annotations

from ado_actuators.sfttrainer.report.compare import SLOWER, VALID_THERE, Comparison, Pair
from ado_actuators.sfttrainer.report.table import TableError

CHECKS = {
    "slower": "slower beyond both rows' 95 % intervals (the ±10 % band where a row has none)",
    "loss": (
        "first-step loss apart beyond rounding, or a loss not finite here and finite there "
        "(a loss that rose across its window here only is shown, not failed)"
    ),
    "invalid": "invalid here, valid there",
}
OPTION = "--fail-on"


def parse(text: str) -> tuple[str, ...]:
    """ "slower,loss" -> ("slower", "loss"); a TableError naming the option and its choices."""
    chosen = tuple(dict.fromkeys(word.strip().lower() for word in text.split(",")))
    unknown = [word for word in chosen if word not in CHECKS]
    if unknown:  # "" included: split always gives one word at least
        said = ", ".join(repr(word) for word in unknown)
        raise TableError(
            f"{OPTION} {said}: choose one or more of {', '.join(CHECKS)}, separated by commas "
            f"(e.g. {OPTION} slower,loss)"
        )
    return chosen


def offends(pair: Pair, checks: tuple[str, ...]) -> tuple[str, ...]:
    """Which of `checks` the pair fails."""
    failed = []
    if "slower" in checks and pair.speed_flag == SLOWER:
        failed.append("slower")
    if "loss" in checks and _loss_fails(pair):
        failed.append("loss")
    if "invalid" in checks and pair.speed_flag == VALID_THERE:
        failed.append("invalid")
    return tuple(failed)


def _loss_fails(pair: Pair) -> bool:
    parity = pair.parity
    not_finite_here_only = not pair.point.loss.finite and pair.other.loss.finite
    return (parity is not None and not parity.holds) or not_finite_here_only


def offences(comparison: Comparison, checks: tuple[str, ...]) -> tuple[tuple[Pair, tuple], ...]:
    """The pairs that fail any of `checks`, with which, in the comparison's order."""
    return tuple((p, found) for p in comparison.pairs if (found := offends(p, checks)))
