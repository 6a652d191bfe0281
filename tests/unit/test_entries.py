"""Reading a dataset's entries by position, and the blocks a time-bounded run encodes."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ado_actuators.sfttrainer.contract.entries import EntryFile, write_first_entries
from ado_actuators.sfttrainer.trainer.lazy_dataset import LeadingEntries, block_bounds


def test_jsonl_entries_by_position_skip_blank_lines_like_the_subset_writer(tmp_path):
    source = tmp_path / "d.jsonl"
    lines = [json.dumps({"output": f"e{i}"}) for i in range(30)]
    lines.insert(5, "   ")
    lines.insert(12, "")
    source.write_text("\n".join(lines))  # no newline after the last entry either
    entries = EntryFile(source)
    assert len(entries) == 30
    assert [e["output"] for e in entries.read(3, 9)] == [f"e{i}" for i in range(3, 9)]
    assert [e["output"] for e in entries.read(28, 100)] == ["e28", "e29"]
    write_first_entries(source, tmp_path / "head.jsonl", 12)
    assert [e["output"] for e in EntryFile(tmp_path / "head.jsonl").read(0, 12)] == [
        e["output"] for e in entries.read(0, 12)
    ]


def test_parquet_entries_by_position_across_row_groups(tmp_path):
    source = tmp_path / "v.parquet"
    pq.write_table(pa.table({"n": list(range(50))}), source, row_group_size=8)
    entries = EntryFile(source)
    assert len(entries) == 50
    assert [e["n"] for e in entries.read(6, 27)] == list(range(6, 27))
    assert entries.read(50, 60) == []


def test_other_formats_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"only .jsonl, .parquet"):
        EntryFile(tmp_path / "d.json")


def test_blocks_start_with_the_first_step_and_double_up_to_a_cap():
    assert block_bounds(100, 4, largest=32) == [0, 4, 12, 28, 60, 92, 100]
    assert block_bounds(3, 8) == [0, 3]
    assert block_bounds(0, 8) == [0]


def test_leading_entries_encode_each_block_once_in_file_order(tmp_path):
    source = tmp_path / "d.jsonl"
    source.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(40)))
    encoded = []

    def encode(entry):
        encoded.append(entry["n"])
        return [entry["n"]]

    data = LeadingEntries(EntryFile(source), encode, first_block=4)
    assert len(data) == 40
    assert [data[i]["input_ids"] for i in range(40)] == [[i] for i in range(40)]
    data._worker.shutdown(wait=True)
    assert encoded == list(range(40))
    with pytest.raises(IndexError):
        data[40]
