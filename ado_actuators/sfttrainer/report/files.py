"""Writes the picture and the page side by side."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ado_actuators.sfttrainer.contract.guided import GuidedRecord
from ado_actuators.sfttrainer.host.atomic import write_atomically
from ado_actuators.sfttrainer.report.answers import answers
from ado_actuators.sfttrainer.report.compare import Comparison
from ado_actuators.sfttrainer.report.cost import COST_HEADING, cost, cost_lines
from ado_actuators.sfttrainer.report.figure import render_png
from ado_actuators.sfttrainer.report.page import render_html
from ado_actuators.sfttrainer.report.prediction import error_block
from ado_actuators.sfttrainer.report.summary import (
    Block,
    answer_blocks,
    as_text,
    comparison_block,
)
from ado_actuators.sfttrainer.report.table import FIELD_LABELS, SpaceTable


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    png: Path
    html: Path
    summary: str  # the answers as the picture and the page word them, for the terminal


def write_report(
    table: SpaceTable,
    out_dir: Path,
    stem: str,
    title: str,
    comparison: Comparison | None = None,
    guided: GuidedRecord | None = None,
) -> ReportFiles:
    """Writes OUT_DIR/STEM.png and OUT_DIR/STEM.html; each appears whole or not at all.
    `guided`: the record of a guided walk over the space, whose savings the cost block adds."""
    groups = answers(table)
    predicted = error_block(table)
    blocks = [
        *answer_blocks(groups),
        *([predicted] if predicted else []),
        (COST_HEADING, cost_lines(cost(table), guided)),
        *([comparison_block(comparison)] if comparison else []),
    ]
    valid = sum(p.valid for p in table.points)
    subtitle = _subtitle(table, f"{valid} measured, {len(table.points) - valid} invalid")
    png = render_png(table, title, subtitle, groups, blocks, comparison)
    page = render_html(table, png, title, subtitle, blocks, comparison)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(out_dir / f"{stem}.png", out_dir / f"{stem}.html", as_text(blocks))
    write_atomically(files.png, png)
    write_atomically(files.html, page)
    return files


def _subtitle(table: SpaceTable, counts: str) -> str:
    shared = ", ".join(f"{FIELD_LABELS.get(name, name)} {value}" for name, value in table.shared)
    return shared + ("; " if shared else "") + f"{len(table.points)} configurations: {counts}"


def write_preview_report(
    table: SpaceTable, html: Path, title: str, blocks: list[Block]
) -> ReportFiles:
    """`sfttrainer_preview --html`: the predicted figures on the page sfttrainer_plot draws,
    HTML at `html` and the picture beside it (.png); configurations predicted not to fit are
    drawn as invalid."""
    fits = sum(p.valid for p in table.points)
    subtitle = _subtitle(table, f"{fits} predicted to fit, {len(table.points) - fits} not")
    png = render_png(table, title, subtitle, (), blocks)
    page = render_html(table, png, title, subtitle, blocks)
    html.parent.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(html.with_suffix(".png"), html, as_text(blocks))
    write_atomically(files.png, png)
    write_atomically(files.html, page)
    return files
