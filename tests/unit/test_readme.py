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
