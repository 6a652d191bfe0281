"""The formula holds to what the trace of the training step showed: benchmarks/memory_truth.py
--record keeps each configuration's traced parts beside the prediction it was checked against
(benchmarks/data/memory_truth.json). Every recorded prediction is within 5 % of its traced
peak, and the formula (plan/memory/peak.py, plan/memory/activations.py) still gives it part by part:
a change to the formula is a change to this record, made by running the matrix again."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.plan.model.architecture import COUNTED

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


KNOWN_GAPS: dict[str, float] = {}
"""Pairwise rows outside 5 %, each with its recorded error (a row leaves this list when the
formula reaches it; the error may not grow). Empty since issue 44: GraniteMoE prompt tuning
under non-reentrant checkpointing over fp32 weights (pw02, −9.8 %) was the flash emulation's
fp32 q, k, v and the MoE's scatter back counted short; now −1.9 %."""


def test_the_record_is_the_whole_matrix_and_every_prediction_is_within_5_percent():
    recorded = rows()
    assert len(recorded) >= 48
    assert {"formula", "trace"} == {row["source"] for row in recorded}
    for row in recorded:
        if "fails" in row:
            continue  # the code itself refused the configuration (what it raised is kept)
        peak = max(sum(parts.values()) for parts in row["traced"].values())
        predicted = max(sum(parts.values()) for parts in row["predicted"].values())
        gap = KNOWN_GAPS.get(row["label"])
        if gap is None:
            assert abs(predicted / peak - 1) <= 0.05, row["label"]
        else:
            assert abs(predicted / peak - 1) <= abs(gap) + 1e-4, row["label"]


def test_every_pair_of_memory_relevant_values_is_traced_for_every_family(truth):
    """The pairwise design drawn from the entity's declared domains (memory_truth_matrix) is
    in the record row by row: a value added to a domain, or a field to MEMORY_FIELDS, fails
    here until `python benchmarks/memory_truth.py --append` has traced its rows."""
    import memory_truth_matrix

    recorded = {row["label"]: row for row in rows() if "entity" in row}
    design = truth.pairwise_cases()
    names = list(memory_truth_matrix.domains())
    wanted = set()
    for name_a, name_b in itertools.combinations(names, 2):
        domains = memory_truth_matrix.domains()
        wanted |= {
            (name_a, repr(x), name_b, repr(y)) for x in domains[name_a] for y in domains[name_b]
        }
    covered = set()
    for case in design:
        row = recorded.get(case.label())
        assert row is not None, f"not traced: {case.label()} (run memory_truth.py --append)"
        assert row["entity"] == case.entity, case.label()
        assert truth.spec_of(row) == case.spec, case.label()
        covered |= memory_truth_matrix.pairs(row["entity"], names)
    assert wanted <= covered
    assert set(memory_truth_matrix.TINY) == set(COUNTED)


def test_a_configuration_that_fails_says_what_the_code_raised():
    failed = [row for row in rows() if "fails" in row]
    for row in failed:
        assert "entity" in row and "Error" in row["fails"], row["label"]
    # fp16 weights under bf16 autocast with prompt tuning: torch.cat refuses the mix
    assert any("autocast" in row["fails"] for row in failed)


@pytest.mark.parametrize(
    "row",
    [r for r in rows() if r["source"] == "formula" and "fails" not in r],
    ids=lambda r: r["label"],
)
def test_the_formula_gives_the_recorded_prediction_part_by_part(truth, row):
    prediction = truth.predicted(truth.spec_of(row), row["shards"])
    assert set(prediction.phases) == set(row["predicted"])
    for phase, parts in row["predicted"].items():
        mine = {k: v for k, v in prediction.phases[phase].items() if v}
        assert mine.keys() == {k for k, v in parts.items() if v}, phase
        for part, value in mine.items():
            assert value == pytest.approx(parts[part], rel=1e-9), (phase, part)
