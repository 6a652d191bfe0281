"""benchmarks/throughput_prediction.py's figures as floors a change to the step time must not
fall below: each model family predicted from the constants fitted on the others
(docs/benchmarks/throughput.md quotes them)."""

from __future__ import annotations

import dataclasses

import pytest
from benchmark_modules import benchmark


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("scipy")
    return benchmark("throughput_prediction")


def test_leave_one_family_out_meets_the_goals(bench):
    runs = bench.load()
    assert len(runs) == 244 and len({o.family for o in runs}) == 5
    median, p90, spearman = bench.figures(bench.leave_one_family_out(runs))
    assert median <= 0.035 and p90 <= 0.12 and spearman >= 0.97


def test_the_shipped_constants_are_the_fit_on_every_run(bench):
    from ado_actuators.sfttrainer.plan.speed.step_time import FITTED

    fitted = bench.fit(bench.load())
    for field in dataclasses.fields(FITTED):
        assert getattr(fitted, field.name) == pytest.approx(getattr(FITTED, field.name), rel=0.02)


def test_each_validated_regime_states_what_the_validation_measured(bench):
    import statistics

    throughput_validation = benchmark("throughput_validation")
    from ado_actuators.sfttrainer.plan.speed.step_time import FITTED
    from ado_actuators.sfttrainer.plan.speed.validated import VALIDATED

    pytest.importorskip("transformers")  # MPT's shape is counted on the meta device
    runs = throughput_validation.load_all()
    found = throughput_validation.by_regime(
        list(zip(runs, bench.errors(runs, FITTED), strict=True))
    )
    for name, stated in VALIDATED.items():
        measured = statistics.median(abs(e) for e in found[name])
        assert stated.runs == len(found[name])
        assert stated.median_error == pytest.approx(measured, abs=0.001)


def test_each_experts_figure_states_what_its_benchmark_measured(bench):
    import statistics

    moe_throughput = benchmark("moe_throughput")
    from ado_actuators.sfttrainer.plan.speed.validated import EXPERTS_VALIDATED

    mixtral = [e for o, e in bench.leave_one_family_out(bench.load()) if o.family == "Mixtral"]
    loop, scatter = [], []
    for row in moe_throughput.rows():
        error = moe_throughput.predicted(row, moe_throughput.LENGTH) / float(
            row["train_tokens_per_second"]
        )
        runs = scatter if moe_throughput.expert_parallel(row["framework_config"]) else loop
        runs.append(error - 1)
    for key, errors in (("mixtral", mixtral), ("granitemoe", loop), ("scattermoe", scatter)):
        stated = EXPERTS_VALIDATED[key]
        assert stated.runs == len(errors)
        assert stated.median_error == pytest.approx(statistics.median(map(abs, errors)), abs=0.001)
    assert min(loop) > 0 and min(scatter) > 0  # "every run predicted too fast"
