"""Draws a SpaceTable: one row of panels per facet (GPU count x experiment), one column per
metric, so the picture grows downwards with the space and sideways only with the figures;
below them the scaling panels and the answers (answers.py, in summary.py's words).

matplotlib is used through its object API on the Agg canvas only (no pyplot, no global
backend switch), so rendering works headless and leaves the caller's matplotlib alone.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ado_actuators.sfttrainer.contract.properties import THROUGHPUT_PER_GPU
from ado_actuators.sfttrainer.report.answers import SPEED, GroupAnswers, speed
from ado_actuators.sfttrainer.report.compare import THRESHOLD, Comparison
from ado_actuators.sfttrainer.report.devices import short_gpu
from ado_actuators.sfttrainer.report.metrics import Metric
from ado_actuators.sfttrainer.report.summary import Block
from ado_actuators.sfttrainer.report.table import Point, SpaceTable

if TYPE_CHECKING:  # matplotlib is imported when a picture is drawn, not with the module
    from matplotlib.typing import ColorType

PANEL_INCHES = (3.4, 2.3)
TEXT_LINE_INCHES = 0.19
DPI = 100
INVALID_MARKER = "X"
INVALID_LABEL = "invalid: is_valid = 0 (e.g. out of GPU memory)"
FASTEST_MARKER = "*"
FASTEST_LABEL = "fastest valid configuration of its experiment"
TIED_LABEL = "tied with the fastest (95 % intervals overlap)"
FLAG_LABEL = (
    f"differs from the other space (95 % intervals apart, else by > {THRESHOLD:.0%}; "
    "or in validity or loss)"
)
BARS_LABEL = "bars: 95 % interval (else range of repeats)"
# The per-GPU figure is the total over number_gpus: its interval is the same share of it.
INTERVAL_COLUMNS = (SPEED, THROUGHPUT_PER_GPU)


def render_png(
    table: SpaceTable,
    title: str,
    subtitle: str = "",
    groups: tuple[GroupAnswers, ...] = (),
    blocks: Sequence[Block] = (),
    comparison: Comparison | None = None,
) -> bytes:
    """The panels, then the scaling panels (several GPU counts only), then the answers in
    words; the ratio to the other space is one more column of panels."""
    from matplotlib.figure import Figure

    columns = len(table.metrics) + (comparison is not None)
    width = max(7.0, PANEL_INCHES[0] * columns + 1.0)
    scaled = [g for g in groups if g.scaling]
    scaling_rows = math.ceil(len(scaled) / columns)
    lines = _wrapped(blocks, width)
    heights = [
        PANEL_INCHES[1] * len(table.panels) + 1.0,
        (PANEL_INCHES[1] + 0.7) * scaling_rows,
        TEXT_LINE_INCHES * len(lines) + 0.3,
    ]
    heading = _heading(title, subtitle, width)
    title_inches = 0.2 * heading.count("\n") + 0.4
    fig = Figure(figsize=(width, sum(heights) + title_inches), dpi=DPI, layout="constrained")
    parts = [h for h in heights if h > 0.3 or h == heights[0]]
    subfigures = fig.subfigures(len(parts), 1, height_ratios=parts, squeeze=False)[:, 0]
    colors = _colors(table.sequence_lengths)
    fastest = [g.fastest for g in groups if g.fastest is not None]
    tied = [p for g in groups for p in g.tied]
    _draw_grid(subfigures[0], table, colors, (fastest, tied), comparison)
    if scaled:
        _draw_scaling(subfigures[1], scaled, columns, colors)
    if lines:
        _draw_text(subfigures[-1], lines)
    fig.suptitle(heading, fontsize=11)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _draw_grid(
    sub, table: SpaceTable, colors, winners: tuple[list[Point], list[Point]], comparison
) -> None:
    fastest, tied = winners
    panels, metrics = table.panels, table.metrics
    columns = len(metrics) + (comparison is not None)
    # Panels of one metric share their y range (from 0), so facets compare by eye.
    axes = sub.subplots(len(panels), columns, squeeze=False, sharex=True, sharey="col")
    for r, panel in enumerate(panels):
        points = table.in_panel(panel)
        for c, metric in enumerate(metrics):
            ax = axes[r][c]
            _draw_panel(ax, points, metric, colors)
            if metric.column == SPEED:
                _mark_fastest(ax, [p for p in points if any(p is f for f in fastest)], colors)
                _mark_fastest(
                    ax, [p for p in points if any(p is t for t in tied)], colors, hollow=True
                )
            if r == 0:
                ax.set_title(metric.label, fontsize=10)
        if comparison is not None:
            _draw_ratios(axes[r][-1], points, comparison, colors)
            if r == 0:
                axes[r][-1].set_title("dataset tokens/s here ÷ other space", fontsize=10)
        for ax in axes[r] if r == len(panels) - 1 else ():
            ax.set_xlabel("batch size (sequences per step)", fontsize=9)
        # One short line per facet field: rotated, a long single line would outgrow the row.
        axes[r][0].set_ylabel(
            "\n".join((*map(_short, panel.column), panel.gpus_label)),
            fontsize=10,
            fontweight="bold",
        )
    for c in range(len(metrics)):
        top = axes[0][c].get_ylim()[1]  # autoscaled over the whole (shared) column
        axes[0][c].set_ylim(0, top if math.isfinite(top) and top > 0 else 1.0)
    if comparison is not None:
        low, high = axes[0][-1].get_ylim()
        axes[0][-1].set_ylim(min(low, 1 - 2 * THRESHOLD), max(high, 1 + 2 * THRESHOLD))
    _batch_axis(axes[0][0], table.batch_sizes)
    _legend(sub, _legend_handles(table, colors, bool(fastest), bool(tied), comparison))


def _legend_handles(table: SpaceTable, colors, fastest: bool, tied: bool, comparison) -> list:
    """One legend entry per kind of mark the grid draws."""
    from matplotlib.lines import Line2D

    def mark(marker: str, label: str, **style) -> Line2D:
        return Line2D([], [], marker=marker, linestyle="none", label=label, **style)

    handles = [
        Line2D([], [], color=colors[n], marker="o", label=f"sequence length {n}")
        for n in table.sequence_lengths
    ]
    if table.invalid:
        handles.append(mark(INVALID_MARKER, INVALID_LABEL, color="0.3", markersize=8))
    if fastest:
        handles.append(
            mark(FASTEST_MARKER, FASTEST_LABEL, color="0.3", markersize=13, markeredgecolor="black")
        )
    if tied:
        handles.append(
            mark(
                FASTEST_MARKER,
                TIED_LABEL,
                markersize=13,
                markerfacecolor="none",
                markeredgecolor="black",
            )
        )
    if any(p.interval for p in table.points):
        handles.append(mark("|", BARS_LABEL, color="0.3", markersize=12))
    if comparison is not None and comparison.flagged:
        handles.append(
            mark("o", FLAG_LABEL, markersize=11, markerfacecolor="none", markeredgecolor="red")
        )
    return handles


def _legend(sub, handles: list) -> None:
    # as many columns of labels as the figure's width holds (at 9 pt, ~0.075 inch a character)
    widest = max(len(h.get_label()) for h in handles) * 0.075 + 0.6
    ncol = max(1, min(len(handles), 3, int(sub.figure.get_figwidth() / widest)))
    sub.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize=9, frameon=False)


def _mark_fastest(ax, points: list[Point], colors, hollow: bool = False) -> None:
    for p in points:
        face = "none" if hollow else colors[p.sequence_length]
        ax.plot(
            p.batch_size,
            speed(p),
            marker=FASTEST_MARKER,
            markersize=17,
            linestyle="none",
            markerfacecolor=face,
            markeredgecolor="black",
            zorder=5,
        )


def _draw_ratios(ax, points: list[Point], comparison: Comparison, colors) -> None:
    """Ratio per configuration against a band of ±THRESHOLD, which judges the pairs without
    an interval (compare.py); the flagged are circled, whichever rule flagged them."""
    ax.axhspan(1 - THRESHOLD, 1 + THRESHOLD, color="0.92", zorder=0)
    ax.axhline(1.0, color="0.5", linewidth=0.8, zorder=1)
    pairs = [pair for p in points if (pair := comparison.pair_of(p)) is not None]
    for length in sorted({pair.point.sequence_length for pair in pairs}):
        line = [
            pair
            for pair in pairs
            if pair.point.sequence_length == length and pair.ratio is not None
        ]
        ax.plot(
            [q.point.batch_size for q in line],
            [q.ratio for q in line],
            "-",
            marker="o",
            markersize=5,
            color=colors[length],
        )
    for pair in (q for q in pairs if q.flag):
        if pair.ratio is None:  # valid in one space only: on the top edge, like invalid ones
            ax.plot(
                pair.point.batch_size,
                0.94,
                marker=INVALID_MARKER,
                markersize=10,
                color="red",
                linestyle="none",
                transform=ax.get_xaxis_transform(),
            )
        else:
            ax.plot(
                pair.point.batch_size,
                pair.ratio,
                marker="o",
                markersize=11,
                markerfacecolor="none",
                markeredgecolor="red",
                linestyle="none",
            )
    if not pairs:
        ax.text(
            0.5,
            0.55,
            "no match in the other space",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="0.45",
            fontsize=9,
        )
    ax.grid(True, color="0.9", linewidth=0.8)
    ax.tick_params(labelsize=8)


def _draw_scaling(sub, groups: list[GroupAnswers], columns: int, colors) -> None:
    rows = math.ceil(len(groups) / columns)
    axes = sub.subplots(rows, columns, squeeze=False)
    for ax in axes.flat[len(groups) :]:
        ax.set_axis_off()
    for ax, group in zip(axes.flat, groups, strict=False):
        for length in dict.fromkeys(s.point.sequence_length for s in group.scaling):
            steps = [s for s in group.scaling if s.point.sequence_length == length]
            gpus = [s.point.panel.number_gpus for s in steps]
            ax.plot(
                gpus,
                [speed(s.point) for s in steps],
                "-",
                marker="o",
                markersize=5,
                color=colors[length],
            )
            ax.plot(gpus, [s.perfect for s in steps], "--", color=colors[length], linewidth=1)
            for s in steps[1:]:
                ax.annotate(
                    f"{s.efficiency:.0%}",
                    (s.point.panel.number_gpus, speed(s.point)),
                    textcoords="offset points",
                    xytext=(4, -10),
                    fontsize=8,
                    color=colors[length],
                )
        # a scaling step is on GPUs (report/answers._scaling): its count is never None
        counts = sorted({s.point.panel.number_gpus or 0 for s in group.scaling})
        _batch_axis(ax, tuple(counts))
        ax.set_ylim(bottom=0)
        ax.set_title(group.label, fontsize=10)
        ax.set_xlabel("GPUs", fontsize=9)
        ax.set_ylabel("dataset tokens/s", fontsize=9)
        ax.grid(True, color="0.9", linewidth=0.8)
        ax.tick_params(labelsize=8)
        ax.yaxis.set_major_formatter(_thousands)
    sub.suptitle(
        "Scaling: fastest valid batch per GPU count (solid, % of perfect) against "
        "perfect scaling from the smallest count (dashed)",
        fontsize=10,
    )


def _short(label: str) -> str:
    """A panel's label as it fits beside the panel: "GPU NVIDIA-A100-SXM4-80GB" -> "A100-80GB"."""
    return short_gpu(label.removeprefix("GPU ")) if label.startswith("GPU ") else label


def _heading(title: str, subtitle: str, width_inches: float) -> str:
    """The title and subtitle, each wrapped to the figure's width: never cut at its edge."""
    chars = int(width_inches * 11)  # at 11 pt, about 12 characters an inch
    lines = [textwrap.fill(text, chars) for text in (title, subtitle) if text]
    return "\n".join(lines)


def _wrapped(blocks: Sequence[Block], width_inches: float) -> list[tuple[str, bool]]:
    """(text, is heading) per printed line, wrapped to the figure's width."""
    chars = int(width_inches * 15)  # at 8.5 pt, about 15 characters an inch
    lines = []
    for heading, body in blocks:
        lines.append((heading, True))
        for line in body:
            lines += [
                (text, False)
                for text in textwrap.wrap(line, chars, initial_indent="• ", subsequent_indent="   ")
            ]
    return lines


def _draw_text(sub, lines: list[tuple[str, bool]]) -> None:
    step = 1 / (len(lines) + 1)
    for i, (text, heading) in enumerate(lines):
        sub.text(
            0.02,
            1 - step * (i + 0.8),
            text,
            fontsize=9.5 if heading else 8.5,
            fontweight="bold" if heading else "normal",
            va="top",
            ha="left",
        )


def _draw_panel(ax, points: list[Point], metric: Metric, colors: dict[int, str]) -> None:
    lengths = sorted({p.sequence_length for p in points})
    for length in lengths:
        line = [p for p in points if p.sequence_length == length]
        for column, style in ((metric.column, "-"), *((c, "--") for c in metric.companions)):
            shown = [p for p in line if column in p.values]
            if not shown:
                continue
            xs = [p.batch_size for p in shown]
            mean = [p.values[column][0] * metric.scale for p in shown]
            ax.plot(xs, mean, style, marker="o", markersize=5, color=colors[length])
            below, above = bar_extents(shown, column, metric.scale)
            barred = [i for i in range(len(shown)) if below[i] or above[i]]
            if barred:  # only where there is an interval, or a range of repeated measurements
                ax.errorbar(
                    [xs[i] for i in barred],
                    [mean[i] for i in barred],
                    yerr=[[below[i] for i in barred], [above[i] for i in barred]],
                    fmt="none",
                    ecolor=colors[length],
                    capsize=3,
                    linewidth=1,
                )
    transform = ax.get_xaxis_transform()  # x in data, y in axes fractions
    for batch_size, height, length in invalid_markers(points):
        ax.plot(
            batch_size,
            height,
            marker=INVALID_MARKER,
            markersize=9,
            linestyle="none",
            transform=transform,
            color=colors[length],
            markeredgecolor="black",
            markeredgewidth=0.5,
            clip_on=False,
        )
    if not any(metric.column in p.values for p in points):
        ax.text(
            0.5,
            0.55,
            "no valid measurement" if points else "not measured",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="0.45",
            fontsize=9,
        )
    ax.grid(True, color="0.9", linewidth=0.8)
    ax.tick_params(labelsize=8)
    ax.yaxis.set_major_formatter(_thousands)


def bar_extents(points: list[Point], column: str, scale: float) -> tuple[list[float], list[float]]:
    """How far each point's bar reaches below and above its mean: on the throughput panels
    its 95 % interval where it has one, else the range of its repeated measurements (none for
    one measurement)."""
    below, above = [], []
    for p in points:
        mean, least, most = (v * scale for v in p.values[column])
        if column in INTERVAL_COLUMNS and p.ci95_percent is not None:
            below.append(mean * p.ci95_percent / 100)
            above.append(mean * p.ci95_percent / 100)
        else:
            below.append(mean - least)
            above.append(most - mean)
    return below, above


def _thousands(value: float, _position: int) -> str:
    """12000 -> 12k: tick labels stay short enough to read beside narrow panels."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def invalid_markers(points: list[Point]) -> list[tuple[int, float, int]]:
    """(batch size, height as a fraction of the panel, sequence length) of each invalid
    configuration: at its batch size on the bottom edge, where its line would have gone on,
    stacked upwards when several sequence lengths failed at one batch size."""
    invalid = [p for p in points if not p.valid]
    markers = []
    for p in invalid:
        level = sorted(q.sequence_length for q in invalid if q.batch_size == p.batch_size)
        markers.append(
            (p.batch_size, 0.06 + 0.09 * level.index(p.sequence_length), p.sequence_length)
        )
    return markers


def _batch_axis(ax, batch_sizes: tuple[int, ...]) -> None:
    """Batch sizes are usually powers of two: a log2 axis spaces them evenly."""
    if batch_sizes and min(batch_sizes) > 0 and max(batch_sizes) / min(batch_sizes) >= 4:
        ax.set_xscale("log", base=2)
    ax.set_xticks(batch_sizes, [str(b) for b in batch_sizes])
    ax.minorticks_off()
    if len(batch_sizes) == 1:
        ax.set_xlim(batch_sizes[0] - 1, batch_sizes[0] + 1)
    elif batch_sizes:
        span = (max(batch_sizes) / min(batch_sizes)) if ax.get_xscale() == "log" else None
        if span:
            ax.set_xlim(min(batch_sizes) / 1.3, max(batch_sizes) * 1.3)
        else:
            pad = (max(batch_sizes) - min(batch_sizes)) * 0.08
            ax.set_xlim(min(batch_sizes) - pad, max(batch_sizes) + pad)


def _colors(lengths: tuple[int, ...]) -> dict[int, ColorType]:
    from matplotlib import colormaps

    if len(lengths) <= 10:
        tab10 = colormaps["tab10"]  # called with an int: the i-th of its ten colours
        return {n: tab10(i) for i, n in enumerate(lengths)}
    cmap = colormaps["viridis"]
    return {n: cmap(i / max(1, len(lengths) - 1)) for i, n in enumerate(lengths)}
