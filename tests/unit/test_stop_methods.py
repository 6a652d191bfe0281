"""The stop methods as one plug-in axis (stopping/): every method the entity offers is in the
registry, builds the policy that names it, and the layer loads where torch cannot."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ado_actuators.sfttrainer.catalog.entity import AUTO_STOP_METHODS
from ado_actuators.sfttrainer.stopping.methods import METHODS, method_named


def test_the_entity_offers_exactly_the_registered_methods_in_their_order():
    assert (None, *METHODS) == AUTO_STOP_METHODS


@pytest.mark.parametrize("name", list(METHODS))
def test_each_method_builds_the_policy_that_names_it_as_its_reason(name):
    method = METHODS[name]
    assert method.name == name and method_named(name.lower()) is method
    assert method.policy(None).name == f"auto_stop_method={name}"


def test_no_value_none_and_an_unknown_name_are_no_method():
    assert [method_named(v) for v in (None, "", "none", "STOP_WHENEVER")] == [None] * 4


def test_the_layer_loads_without_torch():
    """The bill and the catalog read it in processes that never load torch."""
    probe = (
        "import sys; sys.modules['torch'] = None\n"
        "import pkgutil, importlib, ado_actuators.sfttrainer.stopping as layer\n"
        "for m in pkgutil.iter_modules(layer.__path__):\n"
        "    importlib.import_module(f'{layer.__name__}.{m.name}')\n"
        "print(sorted(n for n in sys.modules if n.startswith('ado_actuators.sfttrainer.')"
        " and n.split('.')[2] not in ('stopping', 'stats', 'contract', 'host')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_steady_method_expects_its_steps_at_the_predicted_pace_within_its_cap():
    from ado_actuators.sfttrainer.stopping.method import Expected
    from ado_actuators.sfttrainer.stopping.steady import STEADY_CI95_1PCT, STEADY_STEPS

    method = METHODS[STEADY_CI95_1PCT]
    assert STEADY_STEPS > 1
    from_step = f"{STEADY_CI95_1PCT} from the predicted step"
    assert method.expected(2.0, 10_000.0) == Expected(STEADY_STEPS * 2.0, from_step)
    assert method.expected(2.0, 3.0) == Expected(3.0, from_step)  # the cap bounds it
    assert method.expected(None, 600.0) == Expected(600.0, f"{STEADY_CI95_1PCT}: its cap")
    assert method.expected(0.0, 600.0) == Expected(600.0, f"{STEADY_CI95_1PCT}: its cap")
