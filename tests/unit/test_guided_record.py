"""contract/guided.py and report/guided.py: the guided walk's record of what it left, written
and read back, and the plot's section of it."""

from __future__ import annotations

from ado_actuators.sfttrainer.contract.guided import (
    GuidedRecord,
    Unmeasured,
    read_record,
    record_path,
    write_record,
)
from ado_actuators.sfttrainer.report.guided import guided_lines, guided_text

LEFT = Unmeasured(
    experiment="finetune_full_benchmark-v1.0.0",
    entity={"batch_size": 1, "model_max_length": 64, "number_gpus": 2},
    group="finetune_full_benchmark",
    reason="predicted 2,310 ± 180 tokens/s, below the measured fastest's 3,050 - 40",
    predicted_gpu_hours=1.25,
)
RECORD = GuidedRecord("space-abc", 0.95, None, True, 3, 4.5, (LEFT,), True)


def test_the_record_is_read_back_as_written(tmp_path):
    path = write_record(RECORD, str(tmp_path))
    assert path == record_path("space-abc", str(tmp_path))
    assert read_record("space-abc", str(tmp_path)) == RECORD
    assert read_record("space-other", str(tmp_path)) is None


def test_the_directory_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SFTTRAINER_GUIDED_RECORDS", str(tmp_path))
    write_record(RECORD)
    assert (tmp_path / "space-abc.json").is_file()
    assert "below the measured fastest's 3,050 - 40" in (guided_text("space-abc") or "")


def test_the_section_lists_each_configuration_left_and_what_was_saved():
    assert guided_lines(RECORD) == [
        "Left unmeasured by the guided walk: 1 configuration",
        "(every figure here is a prediction, at 95 % coverage)",
        "  finetune_full_benchmark: batch 1, sequence length 64, 2 GPUs:",
        f"    {LEFT.reason}",
        "Guided walk's bill: 3 configurations measured, 4.50 GPU-hours;",
        "  1 left unmeasured saved about 1.25 GPU-hours (predicted)",
    ]
