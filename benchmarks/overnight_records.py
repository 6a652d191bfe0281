"""What the overnight rehearsal (benchmarks/overnight.py) reads back: ado's traces and stored
rows, and each training's overhead from its measurement directory."""

from __future__ import annotations

import ast
import csv
import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import demo_kit  # noqa: F401  (examples/local-cpu on the path)
from ado_cli import AdoCLI
from overnight_space import entity_id, method_of

from ado_actuators.sfttrainer.contract.trainer_io import RankReport


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def trace(ado: AdoCLI, space_id: str, unrolled: bool) -> list[dict[str, str]]:
    """The requests (or, `unrolled`, the results) of every operation on the space, each row
    naming its operation (the killed run's identifier is printed only when ado ends)."""
    target = ado.home / f"trace-{space_id}-{'results' if unrolled else 'requests'}.csv"
    ado.run(
        "show",
        "trace",
        "discoveryspace",
        space_id,
        *(["--unroll-entities"] if unrolled else []),
        "-o",
        "csv",
        "--output-file",
        str(target),
    )
    return read_csv(target)


def parse(text: str):
    for reader in (json.loads, ast.literal_eval):
        try:
            return reader(text)
        except (ValueError, SyntaxError, TypeError):
            pass
    return None


def entities_of(row: dict[str, str]) -> list[str]:
    value = row.get("Entity IDs") or row.get("Entity ID") or ""
    parsed = parse(value)
    if isinstance(parsed, list):
        return [str(x) for x in parsed]
    return re.findall(r"batch_size\.[^'\",\s\]]+", value) or [value]


def key_of(row: dict[str, str]) -> tuple[str, str]:
    (entity,) = entities_of(row)
    return entity, method_of(row.get("Experiment ID", ""))


def stored_rows(ado: AdoCLI, space_id: str) -> tuple[Counter, dict[tuple[str, str], list[str]]]:
    """(entity, method) -> number of rows stored; and -> their is_valid values."""
    counts: Counter = Counter()
    valid: dict[tuple[str, str], list[str]] = {}
    measured = ado.measurements(space_id)
    print(f"stored columns (first 12): {list(measured[0])[:12] if measured else None}")
    for row in measured:
        entity = row.get("identifier") or entity_id(
            int(row["batch_size"]),
            int(row["model_max_length"]),
            int(row["number_gpus"]),
            int(row["number_nodes"]),
        )
        experiment = row.get("experiment_id") or next(
            (v for k, v in row.items() if "experiment" in k), ""
        )
        key = (entity, method_of(experiment))
        counts[key] += 1
        valid.setdefault(key, []).append(row.get("is_valid", ""))
    return counts, valid


def training_seconds(workdir: Path) -> float | None:
    """Rank 0's train_runtime (Hugging Face's Trainer), from the measurement's reports."""
    reports = [r for d in workdir.rglob("reports") for r in RankReport.read_all(d)]
    reports.sort(key=lambda r: r.rank)
    return reports[0].hf_metrics.train_runtime if reports else None


def overheads(
    result_rows: list[dict[str, str]],
) -> list[tuple[float, str, float, float, float, float]]:
    """(issued at, entity, operation seconds, training seconds, seconds before launch, seconds
    waited for resources) of every valid training that was measured (not replayed), in the
    order ado issued them. Before launch: from ado issuing the request to the measurement's
    job file (ado, Ray, the wait for a placement while other measurements hold the CPUs,
    planning). Waited: the measurement's own `placement_wait_seconds` (queue and placement):
    the schedule's cost, not the tool's, so the overhead leaves it out."""
    found = []
    for row in result_rows:
        if row.get("Request type") != "measured" or str(row.get("Valid")).lower() != "true":
            continue
        metadata = parse(row.get("Result Metadata") or "") or {}
        if "invalid_reason" in metadata or "workdir" not in metadata:
            continue
        workdir = Path(metadata["workdir"])
        workdir = workdir.parent if workdir.name.startswith("node-") else workdir
        train = training_seconds(workdir)
        if train is None:
            continue
        issued = datetime.fromisoformat(row["Timestamp"])
        if issued.tzinfo is None:
            issued = issued.replace(tzinfo=UTC)
        ended = max(p.stat().st_mtime for p in workdir.rglob("*") if p.is_file())
        launched = min(p.stat().st_mtime for p in workdir.rglob("job.json"))
        found.append(
            (
                issued.timestamp(),
                row.get("Entity ID", ""),
                ended - issued.timestamp(),
                train,
                launched - issued.timestamp(),
                float(metadata.get("placement_wait_seconds", 0.0)),
            )
        )
    return sorted(found)
