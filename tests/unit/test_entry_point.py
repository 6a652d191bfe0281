"""What `ado get actuators` pays for: the entry point and its catalog import nothing heavy."""

import subprocess
import sys
from importlib.metadata import entry_points

HEAVY = ("torch", "transformers", "datasets", "aim", "trl", "peft", "accelerate", "matplotlib")


def test_entry_point_names_the_actuator_class():
    (entry,) = [e for e in entry_points(group="ado.actuators") if e.name == "sfttrainer"]
    assert entry.value == "ado_actuators.sfttrainer.actuator.plugin:SFTTrainer"
    assert entry.load().identifier == "SFTTrainer"


def test_importing_the_actuator_and_building_its_catalog_loads_no_heavy_module():
    code = (
        "import sys\n"
        "from ado_actuators.sfttrainer.actuator.plugin import SFTTrainer\n"
        "SFTTrainer.catalog(); SFTTrainer.default_parameters()\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
