"""The preview's rows as a terminal table (one line each, within 120 columns), a CSV (one column
per entity field and parameter, then the verdict and the predicted figures), JSON, and the page
sfttrainer_plot draws."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ado_actuators.sfttrainer.catalog.entity import FIELDS
from ado_actuators.sfttrainer.catalog.experiments import short_name
from ado_actuators.sfttrainer.catalog.model_shapes import (
    ADD_A_MODEL,
    CACHE,
    DIRECTORY,
    ESTIMATED,
    HUB,
    SHIPPED,
)
from ado_actuators.sfttrainer.contract.properties import THROUGHPUT_PREDICTED
from ado_actuators.sfttrainer.host.atomic import write_atomically
from ado_actuators.sfttrainer.report.devices import short_gpu
from ado_actuators.sfttrainer.space.preview import PreviewRow
from ado_actuators.sfttrainer.space.preview_bill import SpaceBill

if TYPE_CHECKING:  # rich is imported where a table is drawn
    from rich.console import JustifyMethod
    from rich.table import Table

SCALED = "*"
"""Marks a predicted tokens/s scaled from the A100 fit to another device by datasheet figures."""
PREDICTED_COLUMNS = (
    "verdict",
    "why",
    "shape_source",
    "shape_where",
    "gpu_memory_lower_bound_gib",
    "predicted_gpu_memory_gib",
    "predicted_need_gib",
    "device_memory_gib",
    "allocatable_gib",
    "predicted_fewest_gpus",
    "predicted_tokens_per_second_per_gpu",
    "predicted_step_seconds",
    "predicted_training_seconds",
    "training_estimated_as",
    "predicted_gpu_hours",
    "predicted_start_seconds",
    "prediction_notes",
)


ASCII_BOX = "    \n    \n -- \n    \n    \n -- \n    \n    \n"
"""rich's SIMPLE_HEAD drawn in ASCII: a line counts its columns the same in bytes and characters."""


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


MEMORY_NOTE = (
    "pred GiB/dev: the predicted peak with the allocator's headroom, over what CUDA can "
    "allocate on the device (nvidia-smi's total less the CUDA context)"
)


def _memory(row: PreviewRow) -> str:
    """The two figures the predicted verdict compares (plan/memory/verdict.py)."""
    if row.need_gib is None:
        return "-"
    device = f"{row.allocatable_gib:.1f}" if row.allocatable_gib else "?"
    return f"{row.need_gib:.1f}/{device}"


def _speed(row: PreviewRow) -> str:
    if row.tokens_per_second_per_gpu is None:
        return "-"
    scaled = any("scaled from" in note for note in row.speed_notes)
    return f"{row.tokens_per_second_per_gpu:,.0f}" + (SCALED if scaled else "")


def _gpus(row: PreviewRow) -> str:
    nodes = int(row.effective.get("number_nodes") or 1)
    return str(row.gpus) + (f"/{nodes}n" if nodes > 1 else "")


def _table(rows: list[PreviewRow]) -> Table:
    from rich.box import Box
    from rich.table import Table

    table = Table(
        title="SFTTrainer space preview: GiB, tokens/s and GPU-hours are predicted, not measured",
        box=Box(ASCII_BOX, ascii=True),
        pad_edge=False,
        padding=(0, 0),
        show_edge=False,
        collapse_padding=True,
    )
    # 10 columns of these widths, one space between each two: 120 columns
    columns: tuple[tuple[str, int, JustifyMethod], ...] = (
        ("exp.", 9, "left"),
        ("model", 24, "left"),
        ("GPU", 14, "left"),
        ("GPUs", 4, "right"),
        ("length", 6, "right"),
        ("batch", 5, "right"),
        ("verdict", 13, "left"),
        ("pred GiB/dev", 12, "right"),
        ("pred tok/s/GPU", 14, "right"),
        ("pred GPU-h", 10, "right"),
    )
    for name, width, justify in columns:
        table.add_column(
            name, width=width, min_width=width, no_wrap=True, overflow="crop", justify=justify
        )
    group = None
    for row in rows:
        key = (row.experiment, row.entity.get("model_name"))
        if group is not None and key != group:
            table.add_section()
        group = key
        table.add_row(
            short_name(row.experiment),
            str(row.entity.get("model_name", "")),
            short_gpu(row.effective.get("gpu_model", row.entity.get("gpu_model")))
            if row.gpus
            else "CPU",
            _gpus(row),
            str(row.entity.get("model_max_length", "")),
            str(row.entity.get("batch_size", "")),
            row.verdict,
            _memory(row),
            _speed(row),
            _number(row.gpu_hours),
        )
    return table


SOURCES = {
    "G31": "the Granite 3.1 model card's architecture table",
    "G40": "the Granite 4.0 model card's architecture table",
    "MLC": "mlc-llm's model presets",
    "FMS": "fms-acceleration's benchmark model configs",
    "ADO": "IBM/ado's model_hashes.json",
    "FHT": "fms-hf-tuning's docs/supported-models.md",
    "HF": "huggingface.co",
    "OLLAMA": "ollama.com's GGUF metadata of",
}
"""The short names catalog/model_shapes.yaml cites its sources by, spelled out for a reader."""
_SOURCE = re.compile(r"\b(" + "|".join(SOURCES) + r")\b(?!-)")


def spelled_out(where: str | None) -> str | None:
    """A shipped shape's citation with its sources named, not abbreviated: "G31 (2B column)"
    -> "the Granite 3.1 model card's architecture table (2B column)"."""
    return where and _SOURCE.sub(lambda m: SOURCES[m.group(1)], where)


def shape_in_words(row: PreviewRow) -> str:
    """Where a row's model shape came from, in words a reader can check (the CSV's and JSON's
    `shape_where` cites the public copies a shipped shape was read from)."""
    source, where = row.shape_source or "", row.shape_where or ""
    if source.startswith(SHIPPED):
        hub = where.split(": ", 1)[0]
        unchecked = "; not yet checked against the hub" if "unchecked" in source else ""
        return f"{hub}'s config.json, as shipped with this package{unchecked}"
    if source.startswith(ESTIMATED):
        return (
            "estimated from the published parameter count (an internal checkpoint: no public "
            "config.json)"
        )
    if source.startswith(DIRECTORY):
        return f"the config.json in its directory ({where})"
    if source.startswith(CACHE):
        return f"the config.json in hf_home's cache ({where})"
    if source.startswith(HUB):
        return f"the hub's config.json, downloaded into hf_home's cache ({where})"
    return f"{source} ({where})"


def _shape_lines(rows: list[PreviewRow]) -> list[str]:
    """Where each model's shape came from, or, for a model found nowhere, a few words on where
    it was looked for, the fix said once under them (the long forms are the CSV's and JSON's
    `shape_where` and `why`)."""
    shapes: dict[str, str] = {}
    for row in rows:
        name = str(row.entity.get("model_name", ""))
        if row.shape_source:
            shapes.setdefault(name, f"{name}: {shape_in_words(row)}")
        elif row.verdict == "unknown" and row.why:
            shapes.setdefault(name, f"{name}: {row.why_in_brief or row.why}")
    lines = [f"  {line}" for line in shapes.values()]
    if any(row.why_in_brief for row in rows):
        lines.append(f"  {ADD_A_MODEL}")
    return ["Model shapes:", *lines] if lines else []


def _failed_lines(rows: list[PreviewRow]) -> list[str]:
    """Each reason a configuration would fail without launching, whole (the field, its value
    and the likely fix), once with the number of configurations it fails."""
    reasons = Counter(row.why for row in rows if row.verdict == "failed")
    if not reasons:
        return []
    return [
        "Failed without launching:",
        *(
            f"  {count} configuration{'s' if count > 1 else ''}: {why}"
            for why, count in reasons.items()
        ),
    ]


def _note_lines(rows: list[PreviewRow]) -> list[str]:
    lines = [MEMORY_NOTE] if any(row.need_gib is not None for row in rows) else []
    notes = dict.fromkeys(note for row in rows for note in row.speed_notes)
    if any(SCALED in _speed(r) for r in rows):
        lines.append(f"{SCALED} scaled from the A100 fit by datasheet peak FLOP/s and bandwidths")
    if notes:
        lines += ["Prediction notes:", *(f"  {note}" for note in notes)]
    return lines


def print_table(rows: list[PreviewRow], bill: SpaceBill, width: int) -> None:
    from rich.console import Console

    console = Console(width=width, soft_wrap=False)
    console.print(_table(rows))
    for line in _failed_lines(rows):  # whole, on one line: the fix is in it
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in _shape_lines(rows):  # one line per model: the CSV and JSON have the rest
        cut = line if len(line) <= width else line[: width - 3] + "..."  # ASCII, as the table
        console.print(cut, markup=False, highlight=False, no_wrap=True, overflow="crop")
    for line in [*_note_lines(rows), *bill.lines()]:
        console.print(line, markup=False, highlight=False)


def csv_row(row: PreviewRow) -> dict[str, Any]:
    """The entity's fields and parameters, each in its own column, then the predictions."""
    cells: dict[str, Any] = {"experiment": row.experiment}
    for name in FIELDS:
        value = row.effective.get(name, row.entity.get(name))
        cells[name] = " ".join(map(str, value)) if isinstance(value, list) else value
    return cells | {
        "verdict": row.verdict,
        "why": row.why,
        "shape_source": row.shape_source,
        "shape_where": spelled_out(row.shape_where),
        "gpu_memory_lower_bound_gib": _round(row.bound_gib, 3),
        "predicted_gpu_memory_gib": _round(row.predicted_gib, 3),
        "predicted_need_gib": _round(row.need_gib, 3),
        "device_memory_gib": _round(row.device_gib, 3),
        "allocatable_gib": _round(row.allocatable_gib, 3),
        "predicted_fewest_gpus": row.fewest_gpus,
        "predicted_tokens_per_second_per_gpu": _round(row.tokens_per_second_per_gpu, 1),
        "predicted_step_seconds": _round(row.step_seconds, 4),
        "predicted_training_seconds": _round(row.training_seconds, 1),
        "training_estimated_as": row.training_how,
        "predicted_gpu_hours": _round(row.gpu_hours, 4),
        "predicted_start_seconds": _round(row.start_seconds, 1),
        "prediction_notes": "; ".join(row.speed_notes),
    }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def write_csv(rows: list[PreviewRow], path: Path) -> None:
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["experiment", *FIELDS, *PREDICTED_COLUMNS])
    writer.writeheader()
    writer.writerows(csv_row(row) for row in rows)
    write_atomically(path, buffer.getvalue())


def write_json(rows: list[PreviewRow], bill: SpaceBill, path: Path) -> None:
    document = {"rows": [csv_row(row) for row in rows], "bill": bill.as_json()}
    write_atomically(path, json.dumps(document, indent=1) + "\n")


def write_html(rows: list[PreviewRow], bill: SpaceBill, path: Path, title: str) -> None:
    from ado_actuators.sfttrainer.report.files import write_preview_report
    from ado_actuators.sfttrainer.report.metrics import PREDICTED_METRICS
    from ado_actuators.sfttrainer.report.table import space_table

    table = space_table([_plot_row(row) for row in rows], "the preview", metrics=PREDICTED_METRICS)
    failed = _failed_lines(rows)[1:]
    blocks = [
        ("The bill (predicted)", bill.lines()),
        *([("Failed without launching", failed)] if failed else []),
        ("Model shapes", [*_shape_lines(rows)[1:], *_note_lines(rows)]),
    ]
    title = f"SFTTrainer space preview: {title} (predicted, not measured)"
    write_preview_report(table, path, title, blocks)


def _plot_row(row: PreviewRow) -> dict[str, Any]:
    """A row as sfttrainer_plot reads one, its figures the predicted columns: configurations
    predicted not to fit (or invalid) are drawn as invalid."""
    cells = {"experiment_id": row.experiment, **row.entity}
    cells["is_valid"] = 1 if row.verdict in ("fits", "unknown") else 0
    if row.tokens_per_second_per_gpu is not None:
        cells[THROUGHPUT_PREDICTED] = row.tokens_per_second_per_gpu
    if row.predicted_gib is not None:
        cells["gpu_memory_predicted_gib"] = row.predicted_gib
    return cells
