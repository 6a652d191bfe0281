"""The README's reference stays complete as parameters and experiments are added."""

from pathlib import Path

from ado.modules.actuators.executor_supervisor import ExperimentExecutorSupervisorParameters

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.actuator.plugin import SFTTrainer
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_actuator_parameter_is_documented():
    for name in MeasurementSettings.model_fields:
        assert f"| `{name}` |" in README, name


def test_actuator_parameters_are_the_engine_settings_plus_ado_supervisor_fields():
    """Each field declared once: ado-core documents and owns its supervisor timings."""
    supervisor = set(ExperimentExecutorSupervisorParameters.model_fields)
    assert (
        set(SFTTrainerParameters.model_fields) == set(MeasurementSettings.model_fields) | supervisor
    )
    assert not supervisor & set(MeasurementSettings.model_fields)


def test_every_experiment_is_documented():
    for experiment in SFTTrainer.catalog().experiments:
        assert f"`{experiment.identifier}`" in README, experiment.identifier


def test_the_two_commands_are_there():
    assert "make demo" in README and "make test" in README


def test_every_test_the_promise_map_names_exists():
    """tests/README.md maps promises to tests: a renamed or deleted test must not leave the
    map pointing at nothing."""
    import re

    tests = Path(__file__).resolve().parents[1]
    text = (tests / "README.md").read_text()
    names = 0
    for line in text.splitlines():
        current = None
        for file, name in re.findall(r"`(?:([\w/]+\.py))?::(\w+)`", line):
            current = file or current
            assert current, f"no file before ::{name} in: {line}"
            source = (tests / current).read_text()
            assert re.search(rf"^def {name}\b", source, re.MULTILINE), f"{current}::{name}"
            names += 1
    assert names > 100  # the map was read
