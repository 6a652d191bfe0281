"""The README's reference stays complete as parameters and experiments are added."""

from pathlib import Path

from ado_actuators.sfttrainer.actuator import SFTTrainer
from ado_actuators.sfttrainer.parameters import SFTTrainerParameters

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
SUPERVISOR_FIELDS = {"taskFailedGraceSeconds", "taskRunningTimeoutSeconds",
                     "supervisorPollIntervalSeconds", "taskPendingResourceTimeoutSeconds"}  # fmt: skip


def test_every_actuator_parameter_is_documented():
    for name in set(SFTTrainerParameters.model_fields) - SUPERVISOR_FIELDS:
        assert f"| `{name}` |" in README, name


def test_every_experiment_is_documented():
    for experiment in SFTTrainer.catalog().experiments:
        assert f"`{experiment.identifier}`" in README, experiment.identifier


def test_the_two_commands_are_there():
    assert "make demo" in README and "make test" in README
