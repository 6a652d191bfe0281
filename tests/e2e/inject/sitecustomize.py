"""Test-only fault injection, loaded by every Python process the test's `ado` starts (Ray
workers included) because the test puts this directory first on PYTHONPATH.

SFTTRAINER_TEST_BREAK_CONVERSION=TEXT: converting the outcome of an entity whose identifier
contains TEXT for ado raises, as a bug in that step would.
SFTTRAINER_TEST_FAULTS=TEXT=FAULT;TEXT=FAULT: the trainer of an entity whose measurement
directory's name contains TEXT runs with the trainer's FAULT_ENV=FAULT (e.g. `hang@1`), so
one operation can give each entity its own fault.
"""

import importlib.abc
import importlib.util
import os
import sys

_BREAK_CONVERSION = os.environ.get("SFTTRAINER_TEST_BREAK_CONVERSION")
_FAULTS = dict(
    entry.split("=", 1) for entry in os.environ.get("SFTTRAINER_TEST_FAULTS", "").split(";") if entry
)


def _break_conversion(module):
    real = module.to_result

    def to_result(outcome, entity_id, experiment):
        if _BREAK_CONVERSION in entity_id and not getattr(outcome, "reason", "").startswith(
            "internal error while converting"
        ):
            raise RuntimeError(f"injected conversion failure for {entity_id}")
        return real(outcome, entity_id, experiment)

    module.to_result = to_result


def _fault_per_entity(module):
    from ado_actuators.sfttrainer.contract import FAULT_ENV

    real = module.run_process

    def run_process(argv, *, env, cwd, **options):
        for needle, fault in _FAULTS.items():
            if needle in os.path.basename(str(cwd)):
                env = {**env, FAULT_ENV: fault}
        return real(argv, env=env, cwd=cwd, **options)

    module.run_process = run_process


class _Patch(importlib.abc.MetaPathFinder):
    """Runs `patch(module)` right after the module named `target` is first executed."""

    def __init__(self, target, patch):
        self.target, self.patch = target, patch

    def find_spec(self, name, path, target=None):
        if name != self.target:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        original_exec = spec.loader.exec_module

        def exec_module(module):
            original_exec(module)
            self.patch(module)

        spec.loader.exec_module = exec_module
        return spec


if _BREAK_CONVERSION:
    sys.meta_path.insert(0, _Patch("ado_actuators.sfttrainer.results", _break_conversion))
if _FAULTS:
    sys.meta_path.insert(0, _Patch("ado_actuators.sfttrainer.execute.node", _fault_per_entity))
