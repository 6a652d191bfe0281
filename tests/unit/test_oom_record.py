"""The record of measured OOMs (ledger/record.py): shared by writers at once, tolerant of a
damaged line, corrected by a run that fits."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.ledger.dominance import configuration
from ado_actuators.sfttrainer.ledger.record import SUPERSEDED, Record, RecordUnavailable

FULL = "finetune_full_benchmark-v1.0.0"
WRITERS, EACH = 4, 25


def config(batch_size: int = 4, model_max_length: int = 64, version: str = "3.2.2"):
    values = entity_values(
        {
            "model_name": "tiny",
            "model_max_length": model_max_length,
            "batch_size": batch_size,
            "number_gpus": 0,
            "fms_hf_tuning_version": version,
        }
    )
    return configuration(values, FULL, "/models/tiny")


def proof(label: str) -> dict:
    return {"label": label, "workdir": f"/out/{label}", "log": f"/out/{label}/train.log"}


def test_an_oom_is_read_back_with_its_proof_and_an_absent_record_is_empty(tmp_path):
    record = Record(tmp_path / "deep" / "ooms.jsonl")
    assert record.ooms() == []
    added = record.add(config(), proof("b4"))
    (entry,) = Record(tmp_path / "deep" / "ooms.jsonl").ooms()  # another reader, as on another node
    assert entry == added and entry.configuration == config()
    assert entry.proof["label"] == "b4" and entry.proof["log"] == "/out/b4/train.log"
    assert entry.proof["recorded_at"].endswith("+00:00")


def _write_many(path: str, writer: int) -> None:
    record = Record(Path(path))
    for n in range(EACH):
        record.add(config(batch_size=writer + 1, model_max_length=n + 1), proof(f"w{writer}-{n}"))


def test_writers_at_once_lose_no_entry_and_break_no_line(tmp_path):
    path = tmp_path / "ooms.jsonl"
    context = multiprocessing.get_context("spawn")  # separate processes, as separate operations
    writers = [context.Process(target=_write_many, args=(str(path), w)) for w in range(WRITERS)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=120)
        assert process.exitcode == 0
    lines = path.read_text().splitlines()
    assert len(lines) == WRITERS * EACH and all(json.loads(line) for line in lines)
    labels = sorted(e.proof["label"] for e in Record(path).ooms())
    assert labels == sorted(f"w{w}-{n}" for w in range(WRITERS) for n in range(EACH))


def test_a_damaged_line_costs_only_itself(tmp_path):
    path = tmp_path / "ooms.jsonl"
    record = Record(path)
    record.add(config(batch_size=2), proof("before"))
    with path.open("a") as handle:
        handle.write("not json at all\n")
        handle.write('["a list", "not an entry"]\n')
        handle.write('{"format": 1, "kind": "oom", "id": "x", "configuration": {}}\n')
        handle.write(
            '{"format": 1, "kind": "oom", "id": "cut", "configur'
        )  # a writer killed mid-line
    assert [e.proof["label"] for e in record.ooms()] == ["before"]
    record.add(config(batch_size=8), proof("after"))  # starts on a line of its own
    assert [e.proof["label"] for e in Record(path).ooms()] == ["before", "after"]
    assert path.read_text().endswith("\n")


def test_a_run_that_fits_supersedes_the_ooms_it_contradicts_and_no_others(tmp_path):
    record = Record(tmp_path / "ooms.jsonl")
    record.add(config(batch_size=4), proof("b4"))
    record.add(config(batch_size=8, model_max_length=128), proof("b8-long"))
    record.add(config(batch_size=2, version="3.1.0"), proof("other-version"))
    # smaller than every OOM, or another version: contradicts nothing
    assert record.supersede(config(batch_size=2), proof("b2")) == []
    assert record.supersede(config(batch_size=16, version="2.1.2"), proof("v212")) == []
    # b8 at 64 fits: it contradicts b4 at 64 (no larger), not b8 at 128
    (withdrawn,) = record.supersede(config(batch_size=8), proof("b8-fits"))
    assert withdrawn.proof["label"] == "b4"
    assert sorted(e.proof["label"] for e in record.ooms()) == ["b8-long", "other-version"]
    # marked, not deleted: the record keeps what happened
    marks = [json.loads(x) for x in record.path.read_text().splitlines() if SUPERSEDED in x]
    assert [(m["id"], m["by"]["label"]) for m in marks] == [(withdrawn.id, "b8-fits")]
    assert record.supersede(config(batch_size=8), proof("again")) == []  # once is enough
    assert (
        record.supersede(config(batch_size=8, model_max_length=128), proof("equal"))[0].proof[
            "label"
        ]
        == "b8-long"
    )


def test_a_record_that_cannot_be_read_or_written_says_where(tmp_path):
    (tmp_path / "a-directory.jsonl").mkdir()
    with pytest.raises(RecordUnavailable, match=r"cannot read the OOM record .*a-directory.jsonl"):
        Record(tmp_path / "a-directory.jsonl").ooms()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(RecordUnavailable, match=r"cannot write the OOM record .*a-file/ooms.jsonl"):
        Record(tmp_path / "a-file" / "ooms.jsonl").add(config(), proof("x"))
