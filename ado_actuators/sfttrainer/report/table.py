"""A space's measurements as plot-ready points: which panel, which line, where, valid or not.

Input is the table `ado show measurements space ID -o csv --property-format target` writes
(or the DataFrame ado's API returns): one row per (entity, experiment), the entity's
constitutive properties and the experiment's target properties as columns. Cells may be
strings (from a CSV), numbers, or lists when an entity was measured more than once.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from ado_actuators.sfttrainer.catalog.entity import FIELDS
from ado_actuators.sfttrainer.catalog.experiments import short_name
from ado_actuators.sfttrainer.contract import loss as loss_names
from ado_actuators.sfttrainer.contract.outcomes import ANSWERED_BY, INVALID_REASON, MACHINE
from ado_actuators.sfttrainer.contract.properties import (
    CPU_BUSY_THRESHOLD,
    CPU_OTHERS,
    RACED_BEHIND,
    RACED_SAVED,
    THROUGHPUT,
    THROUGHPUT_CI95,
)
from ado_actuators.sfttrainer.report.loss import RowLoss, row_loss
from ado_actuators.sfttrainer.report.machine import Fingerprint, of_measurements
from ado_actuators.sfttrainer.report.metrics import METRICS, Metric
from ado_actuators.sfttrainer.space.groups import AXES

# The axes of every panel: x, one line per value, and the row facet (an answer group's axes).
X, LINE, ROW = AXES
EXPERIMENT = "experiment_id"
VALIDITY = "is_valid"
INTERVAL = THROUGHPUT_CI95
SECONDS = "measurement_seconds"  # how long its devices were reserved (execute/cluster.py)
# A result's metadata, which ado's table of properties leaves out: sources.py adds them to the
# rows it reads through ado's API, one per measurement; ado's CSV has neither. The reason is
# the key actuator/results.py stores an Invalid's reason under.
ANSWERED, REASON = ANSWERED_BY, INVALID_REASON
# MACHINE: what each measurement ran on (report/machine.py), which sources.py adds beside them.
REQUIRED = (EXPERIMENT, X, LINE, VALIDITY)
# Named in the picture's subtitle when the whole space shares one value.
CONTEXT_FIELDS = ("model_name", "gpu_model", "number_nodes", "dataset_id", "fms_hf_tuning_version")
# How entity fields read in labels ("model tiny-llama"); others keep their own name.
FIELD_LABELS = {
    "model_name": "model",
    "gpu_model": "GPU",
    "number_nodes": "nodes",
    "dataset_id": "dataset",
    "fms_hf_tuning_version": "fms-hf-tuning",
}
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf", re.IGNORECASE)


class TableError(ValueError):
    """The table cannot be plotted; the message names what is missing and how to get it."""


@dataclasses.dataclass(frozen=True, order=True)
class Panel:
    """One facet: a GPU count (row) and an experiment plus any other varying entity field
    (column)."""

    number_gpus: int | None
    column: tuple[str, ...]

    @property
    def gpus_label(self) -> str:
        if self.number_gpus is None:
            return "GPUs not recorded"
        if self.number_gpus == 0:
            return "0 GPUs (CPU)"
        return f"{self.number_gpus} GPU" + ("s" if self.number_gpus > 1 else "")


@dataclasses.dataclass(frozen=True)
class Point:
    panel: Panel
    sequence_length: int
    batch_size: int
    valid: bool
    # metric column -> (mean, min, max) over the valid measurements of this configuration
    values: Mapping[str, tuple[float, float, float]]
    measurements: int
    # What identifies it beyond this table: the experiment without its parameters, then every
    # entity field and experiment parameter, as (name, text) pairs; a comparison of two
    # spaces matches on these (compare.py).
    identity: tuple[tuple[str, str], ...] = ()
    # The 95 % interval of the mean dataset tokens/s, relative, in percent; None where a valid
    # measurement has none (stored before it existed, or too few steps).
    ci95_percent: float | None = None
    # The loss properties of its valid measurements (report/loss.py)
    loss: RowLoss = dataclasses.field(default_factory=RowLoss)
    # What its valid measurements ran on; empty where the rows hold no metadata (ado's CSV)
    machine: Fingerprint = ()
    # The most other processes used of its machine's CPUs while a valid measurement of it
    # ran, 100 = one core (CPU_OTHERS); None where no row recorded it
    cpu_others: float | None = None
    # Where a measurement of it stopped once it could not win its group (RACED_BEHIND): how
    # far behind the fastest it raced it was, in %, and the seconds that saved (RACED_SAVED)
    raced_behind: float | None = None
    raced_saved_seconds: float | None = None

    @property
    def raced(self) -> bool:
        """Stopped once it could not win: measured, but never the fastest or tied."""
        return self.raced_behind is not None

    @property
    def busy_host(self) -> bool:
        """A CPU configuration measured beside other work: its figure is low, its interval wide."""
        return (
            self.panel.number_gpus == 0
            and self.cpu_others is not None
            and self.cpu_others >= CPU_BUSY_THRESHOLD
        )

    @property
    def interval(self) -> tuple[float, float] | None:
        """(low, high) dataset tokens/s."""
        if self.ci95_percent is None or THROUGHPUT not in self.values:
            return None
        mean = self.values[THROUGHPUT][0]
        # mean * percent / 100, not mean * (1 + percent / 100): exact where the numbers are
        half = mean * self.ci95_percent / 100
        return mean - half, mean + half


@dataclasses.dataclass(frozen=True)
class Stored:
    """One row (an entity under one experiment, measured once or more) as what it held, for
    cost.py. Each tuple lists the row's measurements in the order ado lists their values."""

    number_gpus: int | None
    number_nodes: int
    valid: tuple[bool, ...]
    seconds: tuple[float, ...]  # measurement_seconds, of the measurements that have one
    # One per measurement, "" where it has none; None where the table holds no metadata.
    answered_by: tuple[str, ...] | None
    reasons: tuple[str, ...] | None


@dataclasses.dataclass(frozen=True)
class SpaceTable:
    points: tuple[Point, ...]
    metrics: tuple[Metric, ...]  # those with at least one value to plot, in display order
    varying: tuple[str, ...]  # entity fields besides the axes that split the facets
    shared: tuple[tuple[str, str], ...] = ()  # (field, value) every configuration has
    # Every row, the experiments without throughput to draw included: they held devices too.
    stored: tuple[Stored, ...] = ()

    @property
    def panels(self) -> tuple[Panel, ...]:
        """Facets in reading order: by GPU count, then experiment (and other fields)."""
        return tuple(
            sorted(
                {p.panel for p in self.points}, key=lambda p: (_none_first(p.number_gpus), p.column)
            )
        )

    @property
    def sequence_lengths(self) -> tuple[int, ...]:
        return tuple(sorted({p.sequence_length for p in self.points}))

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(sorted({p.batch_size for p in self.points}))

    def in_panel(self, panel: Panel) -> list[Point]:
        return sorted(
            (p for p in self.points if p.panel == panel),
            key=lambda p: (p.sequence_length, p.batch_size),
        )

    @property
    def invalid(self) -> tuple[Point, ...]:
        return tuple(p for p in self.points if not p.valid)


def space_table(
    given: Iterable[Mapping[str, Any]],  # a CSV's or ado's rows: any value a column holds
    source: str = "the table",
    metrics: tuple[Metric, ...] = METRICS,
) -> SpaceTable:
    """Groups the rows by configuration; raises TableError when the table cannot be plotted.
    `metrics`: what is drawn (the preview draws its predicted columns)."""
    rows = [_with_parameterised_axes(dict(row)) for row in given]
    if not rows:
        raise TableError(f"{source} holds no measurements; run an operation on the space first")
    columns = set().union(*rows)
    missing = [name for name in REQUIRED if name not in columns]
    if not any(m.column in columns for m in metrics if m.required):
        missing.append(" or ".join(m.column for m in metrics if m.required))
    if missing:
        raise TableError(
            f"{source} lacks the column(s) {', '.join(missing)}; write it with `ado show "
            "measurements space SPACE_ID -o csv --property-format target --output-file FILE` "
            "(a space of SFTTrainer benchmark experiments, with batch_size and "
            "model_max_length in its entity space)"
        )
    stored = tuple(_stored(row) for row in rows)
    rows = _without_experiments_measuring_no_throughput(rows, source, metrics)
    labels = _experiment_labels({str(row[EXPERIMENT]) for row in rows})
    varying = tuple(
        name
        for name in FIELDS
        if name not in (X, LINE, ROW)
        and name in columns
        and len({_hashable(row.get(name)) for row in rows}) > 1
    )

    groups: dict[tuple[Panel, int, int], list[dict[str, Any]]] = {}
    for index, row in enumerate(rows, start=1):
        try:
            gpus = _integer(row[ROW]) if row.get(ROW) not in (None, "") else None
            key_x, key_line = _integer(row[X]), _integer(row[LINE])
        except ValueError as err:
            raise TableError(f"{source}, row {index}: {err}") from None
        column = (
            labels[str(row[EXPERIMENT])],
            *(f"{FIELD_LABELS.get(name, name)} {_text(row.get(name))}" for name in varying),
        )
        groups.setdefault((Panel(gpus, column), key_line, key_x), []).append(row)

    points = tuple(
        _point(key, members, metrics) for key, members in sorted(groups.items(), key=_sort_key)
    )
    present = tuple(
        m
        for m in metrics
        if any(m.column in p.values and (m.required or p.values[m.column][0] != 0) for p in points)
    )
    shared = tuple(
        (name, _text(rows[0][name]))
        for name in CONTEXT_FIELDS
        if name in columns and len({_hashable(row.get(name)) for row in rows}) == 1
    )
    return SpaceTable(points, present, varying, shared, stored)


def _without_experiments_measuring_no_throughput(
    rows: list[dict[str, Any]], source: str, metrics: tuple[Metric, ...]
) -> list[dict[str, Any]]:
    """Stability experiments (fractions of runs that failed) share a space with benchmarks
    but have no throughput to draw: leave them out rather than draw empty panels."""
    required = [m.column for m in metrics if m.required]
    drawable = {
        str(row[EXPERIMENT])
        for row in rows
        if any(math.isfinite(v) for c in required for v in _numbers(row.get(c)))
        or not any(v >= 1 for v in _numbers(row.get(VALIDITY)))
    }
    kept = [row for row in rows if str(row[EXPERIMENT]) in drawable]
    if not kept:
        raise TableError(
            f"{source} holds no throughput measurement ({' or '.join(required)}); "
            "plot a space of SFTTrainer benchmark experiments"
        )
    return kept


def _with_parameterised_axes(row: dict[str, Any]) -> dict[str, Any]:
    """A space may fix an axis in its experiments' parameterization rather than its entity
    space; ado then names the value only in the experiment id ("...-number_gpus.4-...")."""
    identifier = str(row.get(EXPERIMENT, ""))
    for name in (X, LINE, ROW):
        if row.get(name) in (None, ""):
            found = re.search(rf"-{name}\.(\d+)(?:-|$)", identifier)
            if found:
                row[name] = found.group(1)
    return row


def _point(
    key: tuple[Panel, int, int], rows: list[dict[str, Any]], metrics: tuple[Metric, ...]
) -> Point:
    panel, sequence_length, batch_size = key
    valid_rows = [r for r in rows if any(v >= 1 for v in _numbers(r.get(VALIDITY)))]
    values: dict[str, tuple[float, float, float]] = {}
    for metric in metrics:
        for column in (metric.column, *metric.companions):
            found = [v for r in valid_rows for v in _numbers(r.get(column)) if math.isfinite(v)]
            if found:
                values[column] = (statistics.fmean(found), min(found), max(found))
    measurements = sum(max(1, len(_numbers(r.get(VALIDITY)))) for r in rows)
    return Point(
        panel,
        sequence_length,
        batch_size,
        bool(valid_rows),
        values,
        measurements,
        _identity(rows[0]),
        _interval(valid_rows),
        row_loss(
            {n: [v for r in valid_rows for v in _numbers(r.get(n))] for n in loss_names.NAMES}
        ),
        of_measurements(f for r in valid_rows for f in r.get(MACHINE) or [()]),
        _most(v for r in valid_rows for v in _numbers(r.get(CPU_OTHERS))),
        _most(v for r in valid_rows for v in _numbers(r.get(RACED_BEHIND))),
        _total(v for r in valid_rows for v in _numbers(r.get(RACED_SAVED))),
    )


def _total(values: Iterable[float]) -> float | None:
    found = [v for v in values if math.isfinite(v)]
    return sum(found) if found else None


def _most(values: Iterable[float]) -> float | None:
    return max((v for v in values if math.isfinite(v)), default=None)


def _interval(rows: list[dict[str, Any]]) -> float | None:
    """One measurement: its own interval. Several: the narrowest interval about their mean that
    holds each one's, so the spread between runs widens it (a run's interval is its own noise
    only, metrics/precision.py). None unless every throughput has an interval: ado lists each
    property's values apart, so a value and an interval pair up only when both lists do."""
    pairs: list[tuple[float, float]] = []
    for row in rows:
        speeds, widths = _numbers(row.get(THROUGHPUT)), _numbers(row.get(INTERVAL))
        if len(speeds) != len(widths):
            return None
        pairs += zip(speeds, widths, strict=True)
    if not pairs or not all(math.isfinite(s) and math.isfinite(w) and w >= 0 for s, w in pairs):
        return None
    if len(pairs) == 1:
        return pairs[0][1]
    mean = statistics.fmean(s for s, _ in pairs)
    low = min(s - s * w / 100 for s, w in pairs)
    high = max(s + s * w / 100 for s, w in pairs)
    return 100 * max(mean - low, high - mean) / mean if mean > 0 else None


def _stored(row: dict[str, Any]) -> Stored:
    nodes = row.get("number_nodes")
    if nodes in (None, ""):  # fixed in the experiment's parameterization, or the default 1
        nodes = split_experiment(str(row.get(EXPERIMENT, "")))[1].get("number_nodes", 1)
    valid = tuple(v >= 1 for v in _numbers(row.get(VALIDITY))) or (False,)
    seconds = tuple(v for v in _numbers(row.get(SECONDS)) if math.isfinite(v) and v >= 0)
    return Stored(
        _whole(row.get(ROW)),
        _whole(nodes) or 1,
        valid,
        seconds,
        _texts(row, ANSWERED),
        _texts(row, REASON),
    )


def _whole(cell: Any) -> int | None:  # a CSV's or ado's cell
    try:
        return _integer(cell)
    except ValueError:
        return None


def _texts(row: dict[str, Any], column: str) -> tuple[str, ...] | None:
    if column not in row:
        return None
    cell = row[column]
    items = cell if isinstance(cell, list | tuple) else [cell]
    return tuple("" if item is None else str(item) for item in items)


def _identity(row: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The rows of one point share experiment and entity (the panel names every field that
    varies), so the first row speaks for all."""
    experiment, parameters = split_experiment(str(row[EXPERIMENT]))
    fields = {name: _text(row[name]) for name in FIELDS if row.get(name) not in (None, "")}
    return ((EXPERIMENT, experiment), *sorted((parameters | fields).items()))


def split_experiment(identifier: str) -> tuple[str, dict[str, str]]:
    """ "E-dataset_id.news-chars-512-fms_hf_tuning_version.3.2.2" -> ("E", {"dataset_id":
    "news-chars-512", "fms_hf_tuning_version": "3.2.2"}). ado appends "-name.value" per
    parameter; values hold dashes too, so the known field names are the separators."""
    names = "|".join(sorted(map(re.escape, FIELDS), key=len, reverse=True))
    parts = re.split(rf"-({names})\.", identifier)
    return parts[0], dict(zip(parts[1::2], parts[2::2], strict=True))


def _numbers(cell: Any) -> list[float]:  # a CSV's or ado's cell
    """The numbers in a cell: a number, a numeric string, a list (repeated measurements) or
    its CSV rendering "[1.0, 2.0]". Empty cells give none."""
    if cell is None:
        return []
    if isinstance(cell, bool):
        return [float(cell)]
    if isinstance(cell, int | float):
        return [float(cell)]
    if isinstance(cell, list | tuple):
        return [v for item in cell for v in _numbers(item)]
    text = str(cell).strip()
    if text.lower() == "true":
        return [1.0]
    if text.lower() == "false":
        return [0.0]
    return [float(match) for match in _NUMBER.findall(text)]


def _integer(cell: Any) -> int:  # a CSV's or ado's cell
    numbers = _numbers(cell)
    if len(numbers) != 1 or not math.isfinite(numbers[0]) or numbers[0] != int(numbers[0]):
        raise ValueError(f"expected a whole number, got {cell!r}")
    return int(numbers[0])


def _text(cell: Any) -> str:  # a CSV's or ado's cell
    numbers = _numbers(cell) if not isinstance(cell, str) or _NUMBER.fullmatch(cell.strip()) else []
    if len(numbers) == 1 and numbers[0] == int(numbers[0]):
        return str(int(numbers[0]))
    return str(cell)


def _hashable(cell: Any) -> Any:  # a CSV's or ado's cell
    return tuple(cell) if isinstance(cell, list) else _text(cell)


def _experiment_labels(identifiers: set[str]) -> dict[str, str]:
    """Short, unique names: "SFTTrainer.finetune_lora_benchmark-v1.0.0-..." -> "lora".
    Parameterised variants of one experiment keep their full identifier to stay apart."""
    short = {i: short_name(i) for i in identifiers}
    counts: dict[str, int] = {}
    for name in short.values():
        counts[name] = counts.get(name, 0) + 1
    return {
        i: name if counts[name] == 1 else i.removeprefix("SFTTrainer.") for i, name in short.items()
    }


def _none_first(value: int | None) -> tuple[int, int]:
    return (0, 0) if value is None else (1, value)


def _sort_key(item: tuple[tuple[Panel, int, int], Any]) -> tuple:  # a CSV's or ado's cell
    (panel, line, x), _ = item
    return (_none_first(panel.number_gpus), panel.column, line, x)
