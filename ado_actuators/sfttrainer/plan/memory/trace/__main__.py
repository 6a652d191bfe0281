"""The trace's subprocess (plan/memory/traced.py runs `python -m` on this package): a StepSpec
as JSON on stdin, the TracedStep as JSON on stdout. torch, transformers and peft are imported
here, never in the process that asks."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import warnings

from ado_actuators.sfttrainer.contract.memory_trace import StepSpec
from ado_actuators.sfttrainer.plan.memory.trace.layer_extrapolation import trace
from ado_actuators.sfttrainer.plan.memory.traced import versions


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    found, depth = trace(StepSpec.from_json(json.loads(sys.stdin.read())))
    done = dataclasses.replace(found, versions=versions(), depth=depth)
    print(json.dumps(done.as_json()))


if __name__ == "__main__":
    main()
