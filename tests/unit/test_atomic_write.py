"""The one atomic write (host/atomic.py): a file under its final name is the old one or the
whole new one, never part of either, and nothing is left beside it."""

from __future__ import annotations

import os
import stat

import pytest

from ado_actuators.sfttrainer.host import atomic
from ado_actuators.sfttrainer.host.atomic import replacing, write_atomically


def test_writes_text_and_bytes_whole_and_readable_by_others(tmp_path):
    target = tmp_path / "page.html"
    write_atomically(target, "caf\u00e9\r\n")  # UTF-8, newlines as given
    assert target.read_bytes() == b"caf\xc3\xa9\r\n"
    write_atomically(target, b"\x89PNG")
    assert target.read_bytes() == b"\x89PNG"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # mkstemp's 0600 would hide it
    assert list(tmp_path.iterdir()) == [target]


def test_the_partial_file_is_hidden_beside_the_target_and_no_glob_of_finals_sees_it(tmp_path):
    target = tmp_path / "rank-0.json"
    with replacing(target) as partial:
        assert partial.parent == tmp_path
        assert partial.name.startswith(".rank-0.json.") and partial.name.endswith(".partial")
        assert list(tmp_path.glob("rank-*.json")) == []
        partial.write_text("{}")
        assert not target.exists()  # published only when the block completes
    assert target.read_text() == "{}"
    assert list(tmp_path.iterdir()) == [target]


def test_a_write_that_fails_leaves_the_old_file_and_no_partial_one(tmp_path):
    target = tmp_path / "data.jsonl"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="half way"), replacing(target) as partial:
        partial.write_text("new, but only ha")
        raise RuntimeError("half way")
    assert target.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [target]


def test_a_rename_that_fails_leaves_no_partial_file(tmp_path, monkeypatch):
    def refuse(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        write_atomically(tmp_path / "marker.json", "{}")
    assert list(tmp_path.iterdir()) == []


def test_the_data_reaches_the_disk_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: events.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(
        atomic.os, "replace", lambda a, b: events.append("replace") or real_replace(a, b)
    )
    write_atomically(tmp_path / "report.json", "{}")
    assert events == ["fsync", "replace"]


def test_a_missing_directory_is_an_error_not_created(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "no" / "such" / "file.csv", "a,b\n")
    assert list(tmp_path.iterdir()) == []


def test_a_ranks_report_is_written_through_it(tmp_path):
    from ado_actuators.sfttrainer.contract.trainer_io import RankOutcome, RankReport

    report = RankReport(
        rank=0, local_rank=0, world_size=1, hostname="node-0", outcome=RankOutcome.OK
    )
    path = report.write(tmp_path)
    assert list(tmp_path.iterdir()) == [path]
    assert RankReport.read_all(tmp_path) == [report]
