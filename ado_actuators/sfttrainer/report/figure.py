"""Draws a SpaceTable: one row of panels per facet (GPU count x experiment), one column per
metric, so the picture grows downwards with the space and sideways only with the figures.

matplotlib is used through its object API on the Agg canvas only (no pyplot, no global
backend switch), so rendering works headless and leaves the caller's matplotlib alone.
"""

from __future__ import annotations

import io
import math

from ado_actuators.sfttrainer.report.metrics import Metric
from ado_actuators.sfttrainer.report.table import Point, SpaceTable

PANEL_INCHES = (3.4, 2.3)
DPI = 100
INVALID_MARKER = "X"
INVALID_LABEL = "invalid: is_valid = 0 (e.g. out of GPU memory)"


def render_png(table: SpaceTable, title: str, subtitle: str = "") -> bytes:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    panels = table.panels
    metrics = table.metrics
    width = max(7.0, PANEL_INCHES[0] * len(metrics) + 1.0)
    height = PANEL_INCHES[1] * len(panels) + 1.6
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    # Panels of one metric share their y range (from 0), so facets compare by eye.
    axes = fig.subplots(len(panels), len(metrics), squeeze=False, sharex=True, sharey="col")
    colors = _colors(table.sequence_lengths)
    for r, panel in enumerate(panels):
        points = table.in_panel(panel)
        for c, metric in enumerate(metrics):
            ax = axes[r][c]
            _draw_panel(ax, points, metric, colors)
            if r == 0:
                ax.set_title(metric.label, fontsize=10)
            if r == len(panels) - 1:
                ax.set_xlabel("batch size (sequences per step)", fontsize=9)
        # One short line per facet field: rotated, a long single line would outgrow the row.
        axes[r][0].set_ylabel("\n".join((*panel.column, panel.gpus_label)), fontsize=10,
                              fontweight="bold")  # fmt: skip
    for c in range(len(metrics)):
        top = axes[0][c].get_ylim()[1]  # autoscaled over the whole (shared) column
        axes[0][c].set_ylim(0, top if math.isfinite(top) and top > 0 else 1.0)
    _batch_axis(axes[0][0], table.batch_sizes)

    handles = [Line2D([], [], color=colors[n], marker="o", label=f"sequence length {n}")
               for n in table.sequence_lengths]  # fmt: skip
    if table.invalid:
        handles.append(Line2D([], [], color="0.3", marker=INVALID_MARKER, linestyle="none",
                              markersize=8, label=INVALID_LABEL))  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4),
               fontsize=9, frameon=False)  # fmt: skip
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


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
            low = [m - p.values[column][1] * metric.scale for m, p in zip(mean, shown)]
            high = [p.values[column][2] * metric.scale - m for m, p in zip(mean, shown)]
            ax.plot(xs, mean, style, marker="o", markersize=5, color=colors[length])
            if any(low) or any(high):  # repeated measurements: show their range
                ax.errorbar(xs, mean, yerr=[low, high], fmt="none", ecolor=colors[length],
                            capsize=3, linewidth=1)  # fmt: skip
    transform = ax.get_xaxis_transform()  # x in data, y in axes fractions
    for batch_size, height, length in invalid_markers(points):
        ax.plot(batch_size, height, marker=INVALID_MARKER, markersize=9, linestyle="none",
                transform=transform, color=colors[length], markeredgecolor="black",
                markeredgewidth=0.5, clip_on=False)  # fmt: skip
    if not any(metric.column in p.values for p in points):
        ax.text(0.5, 0.55, "no valid measurement" if points else "not measured",
                transform=ax.transAxes, ha="center", va="center", color="0.45", fontsize=9)  # fmt: skip
    ax.grid(True, color="0.9", linewidth=0.8)
    ax.tick_params(labelsize=8)
    ax.yaxis.set_major_formatter(_thousands)


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
        markers.append((p.batch_size, 0.06 + 0.09 * level.index(p.sequence_length),
                        p.sequence_length))  # fmt: skip
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


def _colors(lengths: tuple[int, ...]) -> dict[int, str]:
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors if len(lengths) <= 10 else None
    if palette is None:
        cmap = colormaps["viridis"]
        return {n: cmap(i / max(1, len(lengths) - 1)) for i, n in enumerate(lengths)}
    return {n: palette[i] for i, n in enumerate(lengths)}
