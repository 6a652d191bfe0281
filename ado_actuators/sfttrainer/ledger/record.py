"""The record of measured GPU out-of-memory runs: a file of JSON lines, one per event.

Every measurement that reads the same path shares it: each of ado's measurement tasks, on
whichever node Ray runs it, any operation, any re-run after ado was killed. So it lives where
every node already reads (beside the datasets, by default) and is never held in memory between
measurements.

Lines are only ever appended, whole, under a file lock: two operations at once write one line
after the other, and no reader sees a file half rewritten. A contradicted OOM is not deleted
but marked superseded by a line of its own. Reading takes no lock and skips any line that does
not parse (a writer killed mid-line, an edit by hand): one bad line costs its own entry, never
the record.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.ledger.dominance import Configuration, dominates
from ado_actuators.sfttrainer.ledger.lines import RecordUnavailable, append_lines, read_lines

__all__ = ["Entry", "Record", "RecordUnavailable"]

log = logging.getLogger(__name__)

FORMAT = 1
OOM = "oom"
SUPERSEDED = "superseded"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One measured OOM still in force."""

    id: str
    configuration: Configuration
    proof: dict[str, Any]
    """What names the run: its entity label, experiment, size, workdir, log, reason, time."""


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class Record:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def ooms(self) -> list[Entry]:
        """The measured OOMs no later valid run contradicted, oldest first."""
        return _in_force(self._lines())

    def add(self, configuration: Configuration, proof: dict[str, Any]) -> Entry:
        entry = Entry(uuid.uuid4().hex, configuration, {**proof, "recorded_at": now()})
        self._append(
            lambda _: [
                {
                    "format": FORMAT,
                    "kind": OOM,
                    "id": entry.id,
                    "configuration": configuration.as_json(),
                    "proof": entry.proof,
                }
            ]
        )
        return entry

    def supersede(self, fits: Configuration, by: dict[str, Any]) -> list[Entry]:
        """Marks every OOM in force that `fits` (a configuration that ran valid) contradicts:
        one it dominates-or-equals. Returns those marked."""
        if not any(dominates(e.configuration, fits) for e in self.ooms()):
            # every valid run asks: where nothing is contradicted (nearly always), it takes no
            # lock and writes nothing, so a read-only data_directory costs nothing
            return []
        marked: list[Entry] = []

        def lines(current: list[dict[str, Any]]) -> list[dict[str, Any]]:
            # decided again under the lock: a writer at once may have marked them already
            marked.extend(e for e in _in_force(current) if dominates(e.configuration, fits))
            return [
                {"format": FORMAT, "kind": SUPERSEDED, "id": e.id, "at": now(), "by": by}
                for e in marked
            ]

        self._append(lines)
        return marked

    def _lines(self) -> list[dict[str, Any]]:
        return read_lines(self.path, FORMAT, "the OOM record")

    def _append(self, decide: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
        """Under the lock: read the record, let `decide` say which lines to add, add them."""
        append_lines(self.path, FORMAT, "the OOM record", decide)


def _in_force(lines: list[dict[str, Any]]) -> list[Entry]:
    superseded = {line.get("id") for line in lines if line.get("kind") == SUPERSEDED}
    entries = []
    for line in lines:
        if line.get("kind") != OOM or line.get("id") in superseded:
            continue
        try:
            configuration = Configuration.from_json(line["configuration"])
            entries.append(Entry(str(line["id"]), configuration, dict(line.get("proof") or {})))
        except (KeyError, TypeError, ValueError):
            log.warning("skipped an OOM entry without a readable configuration: %.200s", line)
    return entries
