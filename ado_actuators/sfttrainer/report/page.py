"""A self-contained HTML page: the picture embedded as base64 plus the values it plots.

Nothing is fetched when the page opens (no CDN, no script): it can be mailed or archived.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from ado_actuators.sfttrainer.report.answers import SPEED, speed
from ado_actuators.sfttrainer.report.compare import Comparison
from ado_actuators.sfttrainer.report.metrics import COMPANION_TITLES
from ado_actuators.sfttrainer.report.summary import (
    Block,
    configuration,
    format_value,
    percent_text,
    ratio_text,
)
from ado_actuators.sfttrainer.report.table import FIELD_LABELS, INTERVAL, Point, SpaceTable

INTERVAL_TITLE = "dataset tokens/s 95 % interval (± %)"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85rem; margin-top: 1rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.invalid td { color: #a00; background: #fff4f4; }
caption { text-align: left; font-weight: bold; margin-bottom: 0.3rem; }
section.answers h2 { font-size: 1.1rem; margin: 1rem 0 0.2rem; }
section.answers ul { margin: 0; }
tr.flagged td { background: #fff6d6; }
"""


def render_html(
    table: SpaceTable,
    png: bytes,
    title: str,
    subtitle: str = "",
    blocks: Sequence[Block] = (),
    comparison: Comparison | None = None,
) -> str:
    image = base64.b64encode(png).decode("ascii")
    value_columns = [
        (c, t)
        for m in table.metrics
        for c, t in ((m.column, m.title), *((x, COMPANION_TITLES.get(x, x)) for x in m.companions))
    ]
    if any(p.ci95_percent is not None for p in table.points):  # beside the figure it qualifies
        value_columns.insert(1, (INTERVAL, INTERVAL_TITLE))
    scale = {m.column: m.scale for m in table.metrics}
    head = [
        "GPUs",
        "experiment",
        *(FIELD_LABELS.get(v, v) for v in table.varying),
        "sequence length",
        "batch size",
        "valid",
        "measurements",
        *(t for _, t in value_columns),
    ]
    body = "\n".join(_row(p, value_columns, scale) for p in table.points)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(subtitle)}</p>
<section class="answers">
{_answers(blocks)}
</section>
<figure>
<img alt="{html.escape(title)}: dataset tokens per second against batch size" src="data:image/png;base64,{image}">
</figure>
<table>
<caption>The plotted values (mean over repeated measurements; invalid configurations in red)</caption>
<thead><tr>{"".join(f"<th>{html.escape(h)}</th>" for h in head)}</tr></thead>
<tbody>
{body}
</tbody>
</table>
{_comparison(comparison) if comparison else ""}
</body>
</html>
"""


def _answers(blocks: Sequence[Block]) -> str:
    return "\n".join(
        f"<h2>{html.escape(heading)}</h2>\n<ul>"
        + "".join(f"<li>{html.escape(line)}</li>" for line in lines)
        + "</ul>"
        for heading, lines in blocks
    )


def _comparison(comparison: Comparison) -> str:
    """Every matched configuration, flagged ones highlighted: the picture shows only flags."""
    rows = []
    for pair in comparison.pairs:
        here, there = (
            format_value(speed(p)) if SPEED in p.values else "" if p.valid else "invalid"
            for p in (pair.point, pair.other)
        )
        cells = [", ".join(pair.point.panel.column), configuration(pair.point)]
        css = ' class="flagged"' if pair.flag else ""
        losses = [_loss(p) for p in (pair.point, pair.other)]
        rows.append(
            f"<tr{css}>"
            + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
            + "".join(
                f'<td class="n">{html.escape(n)}</td>'
                for n in (here, there, ratio_text(pair), *losses)
            )
            + f"<td>{html.escape(pair.flag or '')}</td>"
            + f"<td>{html.escape(pair.judged_by or '')}</td></tr>"
        )
    head = [
        "experiment",
        "configuration",
        "dataset tokens/s here",
        "there",
        "ratio",
        "first-step loss here",
        "there",
        "flag",
        "judged by",
    ]
    return f"""<table>
<caption>Compared with {html.escape(comparison.other_name)}, per matched configuration</caption>
<thead><tr>{"".join(f"<th>{html.escape(h)}</th>" for h in head)}</tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
</table>"""


def _loss(point: Point) -> str:
    """The first-step loss, to 4 decimals."""
    first = point.loss.first_step
    return "" if first is None else f"{first:.4f}"


def _row(point: Point, value_columns: list[tuple[str, str]], scale: dict[str, float]) -> str:
    cells = [
        point.panel.gpus_label,
        *point.panel.column,
        str(point.sequence_length),
        str(point.batch_size),
        "yes" if point.valid else "no (is_valid = 0)",
        str(point.measurements),
    ]
    numbers = [_number(point, column, scale.get(column, 1.0)) for column, _ in value_columns]
    css = "" if point.valid else ' class="invalid"'
    text = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
    text += "".join(f'<td class="n">{html.escape(n)}</td>' for n in numbers)
    return f"<tr{css}>{text}</tr>"


def _number(point: Point, column: str, scale: float) -> str:
    if column == INTERVAL:
        return "" if point.ci95_percent is None else percent_text(point.ci95_percent)
    if column not in point.values:
        return ""
    return format_value(point.values[column][0] * scale)
