"""Every file under examples/ loads where it is used: each operation in ado's own operation
model (with the operator's parameters checked by the operator where it is installed), each
space in ado's space model and this actuator's catalog, each actuator configuration in ado's
model and this actuator's parameters; and the YAML the README shows is one of these files,
unchanged (the docs include theirs at build time: docs/hooks/reference.py)."""

import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from ado.core.actuatorconfiguration.config import ActuatorConfiguration
from ado.core.discoveryspace.config import DiscoverySpaceConfiguration
from ado.core.operation.config import DiscoveryOperationResourceConfiguration

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.space.preview import entities

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
OPERATIONS = sorted(EXAMPLES.rglob("operation*.yaml"))
SPACES = sorted(EXAMPLES.rglob("space*.yaml"))
ACTUATOR_CONFIGURATIONS = sorted(EXAMPLES.rglob("actuator_configuration*.yaml"))
OPERATORS = {"random_walk": "ado", "ray_tune": "ado_ray_tune", "trim": "trim"}
"""Each operator an example uses, and the package that ships it ('.[operators]' adds the two
optimisers)."""


def _name(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


def test_the_how_to_s_operations_are_shipped():
    names = {
        yaml.safe_load(p.read_text())["operation"]["module"]["operatorName"] for p in OPERATIONS
    }
    assert names == set(OPERATORS)


@pytest.mark.parametrize("path", OPERATIONS, ids=_name)
def test_each_operation_loads_in_ado(path):
    document = yaml.safe_load(path.read_text())
    operator = document["operation"]["module"]["operatorName"]
    installed = importlib.util.find_spec(OPERATORS[operator]) is not None
    context = None if installed else {"ignore_plugin_validation": True}
    loaded = DiscoveryOperationResourceConfiguration.model_validate(document, context=context)
    assert loaded.operation.module.operatorName == operator
    if installed:  # the operator checked its own parameters: a typo'd key is an error
        assert not isinstance(loaded.operation.parameters, dict), operator


@pytest.mark.parametrize("path", SPACES, ids=_name)
def test_each_space_loads_in_ado_and_the_preview(path):
    document = yaml.safe_load(path.read_text())
    DiscoverySpaceConfiguration.model_validate(document)
    assert entities(document)


@pytest.mark.parametrize("path", ACTUATOR_CONFIGURATIONS, ids=_name)
def test_each_actuator_configuration_loads_in_ado(path):
    document = yaml.safe_load(path.read_text())
    ActuatorConfiguration.model_validate(document)
    SFTTrainerParameters.model_validate(document["parameters"])


def test_the_readme_shows_example_files_unchanged():
    """The README's one YAML example is a file of examples/, as it is there."""
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    files = {p.read_text(): p for p in EXAMPLES.rglob("*.yaml")}
    assert blocks
    for block in blocks:
        assert block in files, f"README's YAML is no file under examples/:\n{block}"
