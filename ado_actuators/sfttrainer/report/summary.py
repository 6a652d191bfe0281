"""The answers in words, once: the picture, the page and the terminal print these lines.

Each block is (heading, lines); the renderers only lay them out.
"""

from __future__ import annotations

from ado_actuators.sfttrainer.report.answers import (
    BatchLimit,
    GroupAnswers,
    ScalingStep,
    gpu_hours_per_million_tokens,
    speed,
)
from ado_actuators.sfttrainer.report.compare import THRESHOLD, Comparison, Pair
from ado_actuators.sfttrainer.report.table import FIELD_LABELS, Panel, Point

Block = tuple[str, list[str]]
# Beyond this, the picture says how many more and the page lists them all.
MAX_FLAGGED_LINES = 8


def format_value(value: float) -> str:
    """Four significant digits, no exponent for everyday magnitudes."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return f"{value:.3e}"


def configuration(point: Point) -> str:
    return (f"{point.panel.gpus_label}, sequence length {point.sequence_length}, "
            f"batch {point.batch_size}")  # fmt: skip


def answer_blocks(groups: tuple[GroupAnswers, ...]) -> list[Block]:
    return [(g.label, [_fastest(g), *_limits(g.batch_limits), *_scaling(g.scaling)]) for g in groups]


def _fastest(group: GroupAnswers) -> str:
    if group.fastest is None:
        return "Fastest valid: none, no configuration ran (all is_valid = 0)"
    cost = gpu_hours_per_million_tokens(group.fastest)
    return (f"Fastest valid: {configuration(group.fastest)}: "
            f"{format_value(speed(group.fastest))} dataset tokens/s"
            + (f", {cost:.3g} GPU-hours per million dataset tokens" if cost else "")
            + _memory(group.fastest))  # fmt: skip


def _memory(point: Point) -> str:
    """The measured peak beside the predicted one, where a GPU row has both."""
    measured = point.values.get("gpu_memory_max_allocated_gib", (0.0,))[0]
    predicted = point.values.get("gpu_memory_predicted_gib", (0.0,))[0]
    if not (measured > 0 and predicted > 0):
        return ""
    return (f"; GPU memory/device {format_value(measured)} GiB measured, "
            f"{format_value(predicted)} GiB predicted ({predicted / measured - 1:+.0%})")


def _limits(limits: tuple[BatchLimit, ...]) -> list[str]:
    lines = []
    for gpus in dict.fromkeys(limit.number_gpus for limit in limits):
        mine = [limit for limit in limits if limit.number_gpus == gpus]
        lines.append(f"Largest batch that fits, {Panel(gpus, ()).gpus_label}: "
                     + "; ".join(_limit(limit) for limit in mine))  # fmt: skip
    return lines


def _limit(limit: BatchLimit) -> str:
    where = f"sequence length {limit.sequence_length}"
    if limit.largest_valid is None:
        return f"{where}: none ({limit.first_invalid} already invalid)"
    if limit.first_invalid is None:
        return f"{where}: {limit.largest_valid} (largest tried, none invalid)"
    return f"{where}: {limit.largest_valid} ({limit.first_invalid} invalid: the limit)"


def _scaling(steps: tuple[ScalingStep, ...]) -> list[str]:
    lines = []
    for length in dict.fromkeys(s.point.sequence_length for s in steps):
        parts = []
        for step in (s for s in steps if s.point.sequence_length == length):
            notes = [] if step.point is step.baseline else [f"{step.efficiency:.0%} of perfect"]
            cost = gpu_hours_per_million_tokens(step.point)
            notes += [f"{cost:.3g} GPU-h/M tokens"] if cost else []
            parts.append(f"{step.point.panel.gpus_label} {format_value(speed(step.point))} "
                         f"tokens/s ({', '.join(notes)})")  # fmt: skip
        lines.append(f"Scaling at sequence length {length} (best batch per GPU count): "
                     + " → ".join(parts))  # fmt: skip
    return lines


def comparison_block(comparison: Comparison) -> Block:
    differing = "; ".join(f"{FIELD_LABELS.get(name, name)} {here} here, {there} there"
                          for name, here, there in comparison.differing)  # fmt: skip
    heading = f"Compared with {comparison.other_name}" + (f" ({differing})" if differing else "")
    flagged = comparison.flagged
    lines = [
        f"{len(comparison.pairs)} configurations matched ({comparison.only_here} only here, "
        f"{comparison.only_there} only there); ratio = dataset tokens/s here ÷ there; "
        f"{len(flagged)} differ by more than {THRESHOLD:.0%} or in validity",
        *(_pair(p) for p in flagged[:MAX_FLAGGED_LINES]),
    ]  # fmt: skip
    if len(flagged) > MAX_FLAGGED_LINES:
        lines.append(f"… and {len(flagged) - MAX_FLAGGED_LINES} more (the HTML page lists all)")
    return heading, lines


def _pair(pair: Pair) -> str:
    ratio = f"{pair.ratio:.2f}× " if pair.ratio is not None else ""
    return f"{', '.join(pair.point.panel.column)}, {configuration(pair.point)}: {ratio}{pair.flag}"


def ratio_text(pair: Pair) -> str:
    return f"{pair.ratio:.3f}" if pair.ratio is not None else ""


def as_text(blocks: list[Block]) -> str:
    """For the terminal: each heading, then its lines indented."""
    return "\n".join(f"{heading}\n" + "\n".join(f"  {line}" for line in lines)
                     for heading, lines in blocks)  # fmt: skip
