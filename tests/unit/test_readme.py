"""The README's reference stays complete as parameters and experiments are added."""

from pathlib import Path

from ado.modules.actuators.executor_supervisor import ExperimentExecutorSupervisorParameters

from ado_actuators.sfttrainer.actuator import SFTTrainer
from ado_actuators.sfttrainer.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.settings import MeasurementSettings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_actuator_parameter_is_documented():
    for name in MeasurementSettings.model_fields:
        assert f"| `{name}` |" in README, name


def test_actuator_parameters_are_the_engine_settings_plus_ado_supervisor_fields():
    """Each field declared once: ado-core documents and owns its supervisor timings."""
    supervisor = set(ExperimentExecutorSupervisorParameters.model_fields)
    assert set(SFTTrainerParameters.model_fields) == set(MeasurementSettings.model_fields) | supervisor
    assert not supervisor & set(MeasurementSettings.model_fields)


def test_every_experiment_is_documented():
    for experiment in SFTTrainer.catalog().experiments:
        assert f"`{experiment.identifier}`" in README, experiment.identifier


def test_the_two_commands_are_there():
    assert "make demo" in README and "make test" in README
