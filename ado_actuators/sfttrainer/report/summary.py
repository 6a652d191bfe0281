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
from ado_actuators.sfttrainer.report.compare import (
    BAND,
    INTERVALS,
    LOSS_DIFFERS,
    THRESHOLD,
    Comparison,
    Pair,
)
from ado_actuators.sfttrainer.report.gate import CHECKS, OPTION
from ado_actuators.sfttrainer.report.table import FIELD_LABELS, Panel, Point

Block = tuple[str, list[str]]
FLAG_RULE = (
    "slower or faster where the 95 % intervals do not overlap (beyond "
    f"±{THRESHOLD:.0%} where a row has no interval), valid in one space only, first-step losses "
    "apart beyond rounding, or a loss not finite or rising in one space only"
)
# Beyond this, the picture says how many more and the page lists them all.
MAX_FLAGGED_LINES = 8
NO_INTERVAL = "no 95 % interval: stored before it existed, or too few steps"


def format_value(value: float) -> str:
    """Four significant digits, no exponent for everyday magnitudes."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return f"{value:.3e}"


def configuration(point: Point) -> str:
    return (
        f"{point.panel.gpus_label}, sequence length {point.sequence_length}, "
        f"batch {point.batch_size}"
    )


def answer_blocks(groups: tuple[GroupAnswers, ...]) -> list[Block]:
    return [
        (
            g.label,
            [
                _fastest(g),
                *_ties(g),
                *_passed_over(g),
                *_raced(g),
                *_limits(g.batch_limits),
                *_scaling(g.scaling),
            ],
        )
        for g in groups
    ]


def with_interval(point: Point) -> str:
    """ "1,234 ± 1.2 %": dataset tokens/s and the half-width of its 95 % interval."""
    if point.ci95_percent is None:
        return format_value(speed(point))
    return f"{format_value(speed(point))} ± {percent_text(point.ci95_percent)} %"


def percent_text(percent: float) -> str:
    """Two significant digits, as precise as an interval's own width is known."""
    return f"{percent:.2g}" if percent < 10 else f"{percent:.0f}"


def _fastest(group: GroupAnswers) -> str:
    if group.fastest is None and group.passed_over:
        return "Fastest valid: none whose loss shows it trained (passed over below)"
    if group.fastest is None:
        return "Fastest valid: none, no configuration ran (all is_valid = 0)"
    cost = gpu_hours_per_million_tokens(group.fastest)
    interval = " (95 % interval)" if group.fastest.ci95_percent is not None else f" ({NO_INTERVAL})"
    return (
        f"Fastest valid: {configuration(group.fastest)}: "
        f"{with_interval(group.fastest)} dataset tokens/s{interval}"
        + (f", {cost:.3g} GPU-hours per million dataset tokens" if cost else "")
        + _memory(group.fastest)
        + _busy(group.fastest)
    )


def _busy(point: Point) -> str:
    """A CPU row measured beside other work says so: the schedule, not the configuration, may
    have set its figure."""
    if not point.busy_host or point.cpu_others is None:
        return ""
    return (
        f"; the host was busy: other processes used {point.cpu_others / 100:.1f} cores while it"
        " was measured, so its figure is lower and its interval wider than alone"
    )


def _ties(group: GroupAnswers) -> list[str]:
    """The configurations the measurements cannot tell from the fastest, and those not
    judged: a lead within the noise is no answer to act on."""
    if group.fastest is None or not group.rivals:
        return []
    named = "; ".join(
        f"{configuration(p)}: {with_interval(p)}"
        + (" (the same speed, no interval)" if p.ci95_percent is None else "")
        for p in group.tied
    )
    if group.fastest.ci95_percent is None:
        return [
            "Tied: not judged, the fastest has no 95 % interval (only an equal speed ties)"
            + (f"; the same speed: {named}" if named else "")
        ]
    line = f"Tied within the 95 % intervals: {named or 'none (no other interval overlaps)'}"
    if group.unjudged:
        line += (
            f"; {group.unjudged} other valid configuration{'s' if group.unjudged > 1 else ''}"
            f" not judged ({NO_INTERVAL}; only an equal speed would tie)"
        )
    return [line]


def _passed_over(group: GroupAnswers) -> list[str]:
    """The valid configurations no answer names: fast because broken is no answer."""
    return [
        f"Passed over: {configuration(p)}: {with_interval(p)} dataset tokens/s, but "
        f"{p.loss.problem}"
        for p in group.passed_over
    ]


def _raced(group: GroupAnswers) -> list[str]:
    """The configurations stopped once they could not win: measured, never the answer, and
    what stopping them early saved."""
    if not group.raced:
        return []
    named = "; ".join(
        f"{configuration(p)}: {with_interval(p)}, {p.raced_behind or 0:.0f} % behind"
        for p in group.raced
    )
    saved = sum(_saved_gpu_seconds(p) for p in group.raced)
    unit = "GPU-seconds" if any(p.panel.number_gpus for p in group.raced) else "seconds"
    return [
        f"Raced (stopped once their 95 % interval lay below the measured fastest's; never "
        f"named fastest): {named}; stopping them saved about {saved:,.0f} {unit}"
    ]


def _saved_gpu_seconds(point: Point) -> float:
    """What racing saved a configuration: its seconds on every GPU it held (on CPU: seconds)."""
    return (point.raced_saved_seconds or 0.0) * max(1, point.panel.number_gpus or 0)


def _memory(point: Point) -> str:
    """The measured peak beside the predicted one, where a GPU row has both."""
    measured = point.values.get("gpu_memory_max_allocated_gib", (0.0,))[0]
    predicted = point.values.get("gpu_memory_predicted_gib", (0.0,))[0]
    if not (measured > 0 and predicted > 0):
        return ""
    return (
        f"; GPU memory/device {format_value(measured)} GiB measured, "
        f"{format_value(predicted)} GiB predicted ({predicted / measured - 1:+.0%})"
    )


def _limits(limits: tuple[BatchLimit, ...]) -> list[str]:
    lines = []
    for gpus in dict.fromkeys(limit.number_gpus for limit in limits):
        mine = [limit for limit in limits if limit.number_gpus == gpus]
        lines.append(
            f"Largest batch that fits, {Panel(gpus, ()).gpus_label}: "
            + "; ".join(_limit(limit) for limit in mine)
        )
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
            parts.append(
                f"{step.point.panel.gpus_label} {format_value(speed(step.point))} "
                f"tokens/s ({', '.join(notes)})"
            )
        lines.append(
            f"Scaling at sequence length {length} (best batch per GPU count): " + " → ".join(parts)
        )
    return lines


def comparison_block(comparison: Comparison) -> Block:
    differing = "; ".join(
        f"{FIELD_LABELS.get(name, name)} {here} here, {there} there"
        for name, here, there in comparison.differing
    )
    heading = f"Compared with {comparison.other_name}" + (f" ({differing})" if differing else "")
    flagged = comparison.flagged
    lines = [
        f"{len(comparison.pairs)} configurations matched ({comparison.only_here} only here, "
        f"{comparison.only_there} only there); ratio = dataset tokens/s here ÷ there; "
        f"{len(flagged)} differ: {FLAG_RULE}",
        _machines(comparison),
        *(_pair(p) for p in flagged[:MAX_FLAGGED_LINES]),
    ]
    if len(flagged) > MAX_FLAGGED_LINES:
        lines.append(f"… and {len(flagged) - MAX_FLAGGED_LINES} more (the HTML page lists all)")
    return heading, lines


def _machines(comparison: Comparison) -> str:
    """Whether the matched rows ran on the same GPUs, driver, CUDA, NCCL and libraries."""
    if not comparison.machines_known:
        return (
            "Machines not compared: the rows hold no machine block (ado's CSV has no "
            "metadata; give space ids to compare GPUs, drivers and library versions too)"
        )
    found = comparison.machine_differences
    if not found:
        return "Measured alike: the same GPUs, driver, CUDA, NCCL, CPU and library versions"
    return "Measured on different machines or libraries: " + "; ".join(
        f"{what} {here} here, {there} there ({count} of {len(comparison.pairs)} pairs)"
        for (what, here, there), count in found
    )


def _pair(pair: Pair) -> str:
    ratio = f"{pair.ratio:.2f}× " if pair.ratio is not None else ""
    speed_flag = f"{ratio}{pair.speed_flag}{judged(pair)}" if pair.speed_flag else ratio.strip()
    parts = [speed_flag] if speed_flag else []
    parts += [loss_text(pair, flag) for flag in pair.loss_flags]
    if not pair.loss_flags and (first := first_step_losses(pair)):
        parts.append(first)
    return f"{', '.join(pair.point.panel.column)}, {configuration(pair.point)}: " + "; ".join(parts)


def first_step_losses(pair: Pair) -> str:
    """The two first-step losses side by side, where both rows have one."""
    parity = pair.parity
    if parity is None:
        return ""
    return f"first-step loss {parity.here:.4f} here, {parity.there:.4f} there"


def loss_text(pair: Pair, flag: str) -> str:
    if flag == LOSS_DIFFERS and pair.parity is not None:  # the flag says both rows have one
        return pair.parity.text()
    side = pair.point if flag.endswith(" here") else pair.other
    return f"{flag}: {side.loss.problem} ({first_step_losses(pair) or 'no first-step loss'})"


def gate_block(checks: tuple[str, ...], offences, matched: int) -> Block:
    """What `--fail-on` found: the offending pairs, each with the checks it fails."""
    heading = f"Regression gate ({OPTION} {','.join(checks)})"
    if not offences:
        return heading, [
            f"passed: none of {matched} matched configurations is "
            + " or ".join(CHECKS[c] for c in checks)
        ]
    lines = [f"failed: {len(offences)} of {matched} matched configurations"]
    lines += [f"{_pair(pair)} [fails: {', '.join(found)}]" for pair, found in offences]
    return heading, lines


def judged(pair: Pair) -> str:
    """Which rule flagged the pair, with what it compared."""
    if pair.judged_by == INTERVALS:
        return (
            f" (95 % intervals apart: {with_interval(pair.point)} here, "
            f"{with_interval(pair.other)} there)"
        )
    if pair.judged_by is not None:
        return f" (beyond the {BAND}: {_without(pair)})"
    return ""


def _without(pair: Pair) -> str:
    here, there = (p.ci95_percent is None for p in (pair.point, pair.other))
    if here and there:
        return "neither row has a 95 % interval"
    return f"the row {'here' if here else 'there'} has no 95 % interval"


def ratio_text(pair: Pair) -> str:
    return f"{pair.ratio:.3f}" if pair.ratio is not None else ""


def as_text(blocks: list[Block]) -> str:
    """For the terminal: each heading, then its lines indented."""
    return "\n".join(
        f"{heading}\n" + "\n".join(f"  {line}" for line in lines) for heading, lines in blocks
    )
