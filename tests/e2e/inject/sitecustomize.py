"""Test-only fault injection, loaded by every Python process the test's `ado` starts (Ray
workers included) because the test puts this directory first on PYTHONPATH.

SFTTRAINER_TEST_BREAK_CONVERSION=TEXT: converting the outcome of an entity whose identifier
contains TEXT for ado raises, as a bug in that step would.
"""

import importlib.abc
import os
import sys

_TARGET = "ado_actuators.sfttrainer.results"
_NEEDLE = os.environ.get("SFTTRAINER_TEST_BREAK_CONVERSION")


class _BreakConversion(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            real = module.to_result

            def to_result(outcome, entity_id, experiment):
                if _NEEDLE in entity_id and not getattr(outcome, "reason", "").startswith(
                    "internal error while converting"
                ):
                    raise RuntimeError(f"injected conversion failure for {entity_id}")
                return real(outcome, entity_id, experiment)

            module.to_result = to_result

        loader.exec_module = exec_module
        return spec


if _NEEDLE:
    import importlib.util

    sys.meta_path.insert(0, _BreakConversion())
