"""A dataset file's entries by position, read without loading the whole file.

Both kinds of bounded run train a dataset's leading entries (docs/guide/stopping.md, "Which
entries a measurement trains"): the executor copies the first N for a step-bounded run, and a
time-bounded run's trainer reads them in blocks as training reaches them. jsonl and parquet,
the two formats the dataset CLIs write; blank jsonl lines are not entries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.host.atomic import replacing

INDEXED_SUFFIXES = (".jsonl", ".parquet")

Entry = dict[str, Any]  # one row of a user's dataset: any JSON its columns hold


class MalformedDataset(ValueError):
    """A record of the dataset does not parse: the message names the file and the line."""


def write_first_entries(source: Path, target: Path, entries: int) -> int:
    """Copy the first `entries` records of a jsonl or parquet dataset; returns how many.

    Reads only what it copies, so its cost does not grow with the dataset. JSON lines are
    parsed on the way (cheap: only the lines copied), so a damaged one is reported with
    the user's file and line number rather than as the trainer's error about the copy.
    """
    # Whole or absent: a rank reading the copy never sees part of it, and a damaged line
    # leaves no copy behind.
    with replacing(target) as partial:
        if source.suffix == ".parquet":
            return _copy_parquet(source, partial, entries)
        return _copy_jsonl(source, partial, entries)


def _copy_parquet(source: Path, target: Path, entries: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(source)
    batches, copied = [], 0
    for batch in parquet.iter_batches(batch_size=min(entries, 1024)):
        batches.append(batch.slice(0, entries - copied))
        copied += batches[-1].num_rows
        if copied >= entries:
            break
    pq.write_table(pa.Table.from_batches(batches, schema=parquet.schema_arrow), target)
    return copied


def _copy_jsonl(source: Path, target: Path, entries: int) -> int:
    copied = 0
    with source.open("rb") as reader, target.open("wb") as writer:
        for number, line in enumerate(reader, start=1):
            if not line.strip():
                continue
            try:
                if not isinstance(json.loads(line), dict):
                    raise ValueError("not a JSON object")
            except ValueError as error:  # UnicodeDecodeError included
                raise MalformedDataset(
                    f"dataset {source}: line {number} does not parse as a JSON object "
                    f"({error}); repair or delete that line, or create the file again"
                ) from None
            writer.write(line if line.endswith(b"\n") else line + b"\n")
            copied += 1
            if copied >= entries:
                break
    if copied == 0:
        raise MalformedDataset(f"dataset {source} has no entries; create the file again")
    return copied


class EntryFile:
    """Random access to the entries of a jsonl or parquet file.

    Opening costs one pass over a jsonl file's bytes (to find where entries start) or a
    parquet footer read; no entry is parsed until `read` asks for it.
    """

    def __init__(self, path: Path) -> None:
        if path.suffix not in INDEXED_SUFFIXES:
            raise ValueError(
                f"{path.name}: only {', '.join(INDEXED_SUFFIXES)} can be read by position"
            )
        self.path = path
        self._offsets: list[int] = []
        self._row_group_starts: list[int] = []
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            metadata = pq.ParquetFile(path).metadata
            start = 0
            for group in range(metadata.num_row_groups):
                self._row_group_starts.append(start)
                start += metadata.row_group(group).num_rows
            self._length = start
        else:
            position = 0
            with path.open("rb") as reader:
                for line in reader:
                    if line and not line.isspace():
                        self._offsets.append(position)
                    position += len(line)
            self._length = len(self._offsets)

    def __len__(self) -> int:
        return self._length

    def read(self, start: int, stop: int) -> list[Entry]:
        """Entries start..stop-1 (clipped to the file), as dicts."""
        stop = min(stop, self._length)
        if start >= stop:
            return []
        if self.path.suffix == ".parquet":
            return self._read_parquet(start, stop)
        records: list[Entry] = []
        with self.path.open("rb") as reader:
            reader.seek(self._offsets[start])
            while len(records) < stop - start:
                line = reader.readline()
                if line and not line.isspace():
                    records.append(json.loads(line))
        return records

    def _read_parquet(self, start: int, stop: int) -> list[Entry]:
        import bisect

        import pyarrow.parquet as pq

        first = bisect.bisect_right(self._row_group_starts, start) - 1
        last = bisect.bisect_right(self._row_group_starts, stop - 1) - 1
        table = pq.ParquetFile(self.path).read_row_groups(list(range(first, last + 1)))
        offset = start - self._row_group_starts[first]
        rows: list[Entry] = table.slice(offset, stop - start).to_pylist()  # pyarrow is untyped
        return rows
