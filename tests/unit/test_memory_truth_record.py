"""The formula holds to what the trace of the training step showed: benchmarks/memory_truth.py
--record keeps each configuration's traced parts beside the prediction it was checked against
(benchmarks/data/memory_truth.json). Every recorded prediction is within 5 % of its traced
peak, and the formula (plan/memory/peak.py, plan/memory/activations.py) still gives it part by part:
a change to the formula is a change to this record, made by running the matrix again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RECORD = BENCHMARKS / "data" / "memory_truth.json"


@pytest.fixture(scope="module")
def truth():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import memory_truth
    finally:
        sys.path.pop(0)
    return memory_truth


def rows() -> list[dict]:
    return json.loads(RECORD.read_text())


def test_the_record_is_the_whole_matrix_and_every_prediction_is_within_5_percent():
    recorded = rows()
    assert len(recorded) >= 48
    assert {"formula", "trace"} == {row["source"] for row in recorded}
    for row in recorded:
        peak = max(sum(parts.values()) for parts in row["traced"].values())
        predicted = max(sum(parts.values()) for parts in row["predicted"].values())
        assert abs(predicted / peak - 1) <= 0.05, row["label"]


@pytest.mark.parametrize(
    "row", [r for r in rows() if r["source"] == "formula"], ids=lambda r: r["label"]
)
def test_the_formula_gives_the_recorded_prediction_part_by_part(truth, row):
    prediction = truth.predicted(truth.spec_of(row), row["shards"])
    assert set(prediction.phases) == set(row["predicted"])
    for phase, parts in row["predicted"].items():
        mine = {k: v for k, v in prediction.phases[phase].items() if v}
        assert mine.keys() == {k for k, v in parts.items() if v}, phase
        for part, value in mine.items():
            assert value == pytest.approx(parts[part], rel=1e-9), (phase, part)
