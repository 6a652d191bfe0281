"""The stability experiment's fractions and per-run record, and per-repeat injected faults."""

import pytest

from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.contract.trainer_io import FAULT_ENV, FaultKind
from ado_actuators.sfttrainer.engine.measurement import _stability
from ado_actuators.sfttrainer.trainer.faults import Fault


def test_each_repeat_gets_its_own_fault():
    env = {FAULT_ENV: "0:oom@1, 1:oom@1,2:exception@2@1"}
    assert Fault.from_env(env, repeat="0") == Fault(FaultKind.OOM, 1)
    assert Fault.from_env(env, repeat="2") == Fault(FaultKind.EXCEPTION, 2, 1)
    assert Fault.from_env(env, repeat="3") is None
    assert Fault.from_env(env) is None  # a run that is not a repeat runs clean
    assert Fault.from_env({FAULT_ENV: "oom@1"}, repeat="4") == Fault(FaultKind.OOM, 1)


@pytest.mark.parametrize("value", ["x:oom@1", "0:", "0:oom"])
def test_malformed_per_repeat_faults_are_errors(value):
    with pytest.raises(ValueError, match=FAULT_ENV):
        Fault.from_env({FAULT_ENV: value}, repeat="0")


def ran(outcome):
    outcome.metadata["workdir"] = "/w"
    return outcome


def test_fractions_and_every_runs_outcome_and_reason():
    runs = [
        ran(Invalid("GPU out of memory: rank 0", gpu_oom=True)),
        ran(Invalid("GPU out of memory: rank 1", gpu_oom=True)),
        ran(Failed("training failed: rank 0: RuntimeError: boom")),
        ran(Measured({"is_valid": 1})),
        ran(Failed("GPU sampling failed ...", {"training_completed": True})),
    ]
    outcome = _stability(runs)
    assert outcome.properties == {
        "f_gpu_oom": 0.4,
        "f_other_error": 0.2,
        "f_no_error": 0.4,
        "is_valid": 1,
    }
    summary = outcome.metadata["runs"]
    assert [(s["repeat"], s["outcome"]) for s in summary] == [
        (0, "gpu_oom"),
        (1, "gpu_oom"),
        (2, "error"),
        (3, "completed"),
        (4, "completed"),
    ]
    assert "RuntimeError: boom" in summary[2]["reason"] and summary[3]["reason"] is None
    assert "GPU sampling failed" in summary[4]["reason"]


def test_a_run_that_could_not_launch_fails_the_measurement():
    missing = Failed("dataset file /d/x.jsonl does not exist")
    assert _stability([missing]) is missing
