"""Training on the first entries only: cost bounded by what is copied."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from ado_actuators.sfttrainer.execute.workspace import free_port, write_first_entries


def test_jsonl_subset_copies_exactly_the_first_entries(tmp_path):
    source = tmp_path / "d.jsonl"
    source.write_text("".join(json.dumps({"output": f"e{i}"}) + "\n" for i in range(100)))
    target = tmp_path / "s.jsonl"
    assert write_first_entries(source, target, 7) == 7
    assert [json.loads(line)["output"] for line in target.read_text().splitlines()] == [
        f"e{i}" for i in range(7)
    ]
    assert write_first_entries(source, tmp_path / "all.jsonl", 1000) == 100


def test_parquet_subset(tmp_path):
    source = tmp_path / "v.parquet"
    pq.write_table(
        pa.table({"text": [f"t{i}" for i in range(50)], "n": list(range(50))}),
        source,
        row_group_size=8,
    )
    target = tmp_path / "s.parquet"
    assert write_first_entries(source, target, 12) == 12
    assert pq.read_table(target).column("n").to_pylist() == list(range(12))


def test_free_ports_differ():
    assert len({free_port() for _ in range(5)}) >= 4
