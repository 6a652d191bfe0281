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
import json
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import filelock

from ado_actuators.sfttrainer.ledger.dominance import Configuration, dominates

log = logging.getLogger(__name__)

FORMAT = 1
OOM = "oom"
SUPERSEDED = "superseded"
LOCK_TIMEOUT_SECONDS = 60.0
"""Appending takes milliseconds; only a writer stuck on a dead filesystem holds it longer."""


class RecordUnavailable(OSError):
    """The record cannot be read or written here (an unmounted or read-only directory)."""


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
        try:
            text = self.path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        except OSError as error:
            raise RecordUnavailable(f"cannot read the OOM record {self.path}: {error}") from error
        found, skipped = [], 0
        for line in text.splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                skipped += bool(line.strip())
                continue
            if isinstance(item, dict) and item.get("format") == FORMAT:
                found.append(item)
            else:
                skipped += 1
        if skipped:
            log.warning("skipped %d unreadable line(s) of the OOM record %s", skipped, self.path)
        return found

    def _append(self, decide: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
        """Under the lock: read the record, let `decide` say which lines to add, add them."""
        lock = filelock.FileLock(f"{self.path}.lock", timeout=LOCK_TIMEOUT_SECONDS)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with lock:
                lines = decide(self._lines())
                if not lines:
                    return
                text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)
                descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    if _ends_mid_line(self.path):  # a writer died mid-line: start a fresh one
                        text = "\n" + text
                    os.write(descriptor, text.encode())
                    os.fsync(descriptor)
                finally:
                    os.close(descriptor)
        except filelock.Timeout as error:
            raise RecordUnavailable(
                f"the OOM record {self.path} stayed locked for {LOCK_TIMEOUT_SECONDS:g} s "
                f"({lock.lock_file})"
            ) from error
        except RecordUnavailable:
            raise
        except OSError as error:
            raise RecordUnavailable(f"cannot write the OOM record {self.path}: {error}") from error


def _ends_mid_line(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


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
