"""A record shared by every measurement wherever Ray runs it: a file of JSON lines, only ever
appended, whole, under a file lock, so two writers at once write one line after the other and
no reader sees a file half rewritten. Reading takes no lock and skips any line that does not
parse (a writer killed mid-line, an edit by hand): one bad line costs its own entry, never the
record. The record of measured OOMs (record.py) and the guided walk's race cards
(race_cards.py) are two such records."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import filelock

log = logging.getLogger(__name__)

LOCK_TIMEOUT_SECONDS = 60.0
"""Appending takes milliseconds; only a writer stuck on a dead filesystem holds it longer."""

Lines = list[dict[str, Any]]


class RecordUnavailable(OSError):
    """The record cannot be read or written here (an unmounted or read-only directory)."""


def read_lines(path: Path, form: int, what: str) -> Lines:
    """The record's lines of format `form`, oldest first; none where the file does not exist."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    except OSError as error:
        raise RecordUnavailable(f"cannot read {what} {path}: {error}") from error
    found, skipped = [], 0
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            skipped += bool(line.strip())
            continue
        if isinstance(item, dict) and item.get("format") == form:
            found.append(item)
        else:
            skipped += 1
    if skipped:
        log.warning("skipped %d unreadable line(s) of %s %s", skipped, what, path)
    return found


def append_lines(path: Path, form: int, what: str, decide: Callable[[Lines], Lines]) -> None:
    """Under the lock: read the record, let `decide` say which lines to add, add them."""
    lock = filelock.FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_SECONDS)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with lock:
            lines = decide(read_lines(path, form, what))
            if lines:
                _write(path, "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    except filelock.Timeout as error:
        raise RecordUnavailable(
            f"{what} {path} stayed locked for {LOCK_TIMEOUT_SECONDS:g} s ({lock.lock_file})"
        ) from error
    except RecordUnavailable:
        raise
    except OSError as error:
        raise RecordUnavailable(f"cannot write {what} {path}: {error}") from error


def _write(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if _ends_mid_line(path):  # a writer died mid-line: start a fresh one
            text = "\n" + text
        os.write(descriptor, text.encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _ends_mid_line(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return False
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"
