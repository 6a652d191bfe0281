"""sfttrainer_plot puts the predicted throughput beside the measured one and reports the
predictor's error on the space (report/prediction.py, report/metrics.py)."""

from __future__ import annotations

import pytest

from ado_actuators.sfttrainer.report.prediction import HEADING, error_block, errors
from ado_actuators.sfttrainer.report.table import space_table


def row(batch, measured, predicted, valid=1):
    return {
        "experiment_id": "finetune_lora_benchmark-v1.0.0",
        "batch_size": batch,
        "model_max_length": 512,
        "number_gpus": 1,
        "is_valid": valid,
        "dataset_tokens_per_second": measured,
        "dataset_tokens_per_second_per_gpu": measured,
        "dataset_tokens_per_second_per_gpu_predicted": predicted,
    }


def test_each_valid_configuration_is_scored_predicted_over_measured():
    table = space_table([row(1, 1000, 1100), row(2, 2000, 1800), row(4, 0, 3000, valid=0)])
    found = sorted(round(e, 6) for _, e in errors(table))
    assert found == [-0.1, 0.1]  # the invalid one has no measurement to score against
    heading, lines = error_block(table)
    assert heading == HEADING
    assert lines[0].startswith("The predictor's error on this space: median |error| 10.0%")
    assert "over 2 valid configurations" in lines[0] and "not on this space" in lines[0]
    assert "predicted 1,800, measured 2,000 (-10%)" in " ".join(lines)


def test_without_a_prediction_there_is_no_block_and_the_panel_is_as_before():
    rows = [row(1, 1000, None)]
    rows[0].pop("dataset_tokens_per_second_per_gpu_predicted")
    assert error_block(space_table(rows)) is None


def test_the_per_gpu_panel_draws_the_prediction_dashed_beside_the_measurement():
    table = space_table([row(1, 1000, 1100)])
    (point,) = table.points
    assert point.values["dataset_tokens_per_second_per_gpu_predicted"][0] == pytest.approx(1100)
    per_gpu = next(m for m in table.metrics if m.column == "dataset_tokens_per_second_per_gpu")
    assert per_gpu.companions == ("dataset_tokens_per_second_per_gpu_predicted",)
    assert "predicted - -" in per_gpu.label


def test_the_page_reports_the_error(tmp_path):
    from ado_actuators.sfttrainer.report.files import write_report

    files = write_report(space_table([row(1, 1000, 1100), row(2, 2000, 1800)]), tmp_path, "s", "t")
    assert HEADING in files.summary and "median |error| 10.0%" in files.summary
    page = files.html.read_text()
    assert HEADING in page and "dataset tokens/s per GPU predicted" in page
