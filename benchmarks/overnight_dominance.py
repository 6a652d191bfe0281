"""What the overnight rehearsal (benchmarks/overnight.py) checks of "a measured OOM answers its
larger neighbours": the record the killed run left, and each answer given from it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from overnight_records import key_of, parse
from overnight_space import EXPERIMENTS, awaited, oom_entity

from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.ledger.neighbours import ANSWERED_BY
from ado_actuators.sfttrainer.ledger.record import Record


def record_of(data: Path) -> Record:
    """The record every measurement of the night reads: the default place under the data."""
    return Record(MeasurementSettings(data_directory=str(data)).oom_record_file())


def experiments_recorded(record: Record) -> set[str]:
    return {entry.proof.get("experiment") for entry in record.ooms()}


def launched(out: Path, key: tuple[str, str]) -> list[Path]:
    """The measurement directories of (entity, method), over both runs."""
    entity, method = key
    return sorted(out.glob(f"{EXPERIMENTS[method]}/{entity}-*"))


def audit(
    promised: dict[tuple[str, str], str],
    rows: list[dict[str, str]],
    last: list[dict[str, str]],
    out: Path,
    record: Record,
    at_kill: dict[str, dict],
    lengths: list[int],
    second_run: Path,
) -> tuple[list[str], Counter]:
    """Problems, and counts for the table. `rows`: the result rows of both runs; `last`: the
    last run's; `at_kill`: experiment -> the proof of its OOM as the record held it when the
    first run was killed."""
    problems: list[str] = []
    counts: Counter = Counter()
    answers: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        metadata = parse(row.get("Result Metadata") or "")
        if isinstance(metadata, dict) and metadata.get("answered_by") == ANSWERED_BY:
            answers.setdefault(key_of(row), []).append(metadata)
    oom = oom_entity(lengths)
    for key, promise in sorted(promised.items()):
        dirs = launched(out, key)
        if promise == "invalid: OOM" and len(dirs) != 1:
            # the kill waited for its record: a re-run is answered from it, never launched again
            problems.append(f"{key}: the OOM launched {len(dirs)} times over both runs")
        if promise != "invalid: dominated":
            if answers.get(key) and key[0] != oom:
                problems.append(f"{key}: {promise}, but answered from the OOM record")
            continue
        counts["dominated"] += 1
        if dirs:
            problems.append(f"{key}: answered by a measured OOM, yet launched: {dirs}")
        if not answers.get(key):
            problems.append(f"{key}: no answer from the OOM record in either run's trace")
        for metadata in answers.get(key, []):
            proof, reason = metadata.get("dominated_by", {}), metadata.get("invalid_reason", "")
            if proof.get("label") != oom or metadata.get("measured") is not False:
                problems.append(f"{key}: answered from {proof.get('label')}, not from {oom}")
            elif not (Path(proof["workdir"]).is_dir() and Path(proof["log"]).is_file()):
                problems.append(f"{key}: the proof's workdir/log {proof} is not there")
            elif oom not in reason or proof["log"] not in reason:
                problems.append(
                    f"{key}: the reason names neither the OOM nor its log: {reason[:300]}"
                )
    # one answer, by construction, in the run after the kill, from what the killed run recorded
    after_kill = [entity for entity, gate in awaited(lengths, second_run).items() if gate]
    for entity in after_kill:
        for method, experiment in EXPERIMENTS.items():
            given = [
                parse(r.get("Result Metadata") or "") or {}
                for r in last
                if key_of(r) == (entity, method) and r.get("Request type") == "measured"
            ]
            proofs = [
                m.get("dominated_by", {}).get("workdir") for m in given if isinstance(m, dict)
            ]
            if proofs != [at_kill.get(experiment, {}).get("workdir")]:
                problems.append(
                    f"{(entity, method)}: answered after the kill from {proofs}, not from "
                    f"the OOM the killed run recorded ({at_kill.get(experiment)})"
                )
            else:
                counts["answered after the kill"] += 1
    entries = record.ooms()
    lines = record.path.read_text().splitlines() if record.path.exists() else []
    if sorted((e.proof.get("label"), e.proof.get("experiment")) for e in entries) != sorted(
        (oom, experiment) for experiment in EXPERIMENTS.values()
    ) or len(lines) != len(entries):
        problems.append(
            f"the OOM record holds {len(entries)} OOMs in {len(lines)} lines, not one per "
            f"experiment: {[e.proof.get('label') for e in entries]}"
        )
    counts["recorded"] = len(entries)
    return problems, counts
