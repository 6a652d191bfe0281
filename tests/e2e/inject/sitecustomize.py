"""Test-only hooks, loaded by every Python process the test's `ado` starts (Ray workers
included) because the test puts this directory first on PYTHONPATH (for a Ray cluster of its
own: on the cluster's; the variables then reach the workers through the cluster's environment
or a driver's runtime_env).

SFTTRAINER_TEST_BREAK_CONVERSION=TEXT: converting the outcome of an entity whose identifier
contains TEXT for ado raises, as a bug in that step would.
SFTTRAINER_TEST_FAULTS=TEXT=FAULT;TEXT=FAULT: the trainer of a measurement whose directory's
path contains TEXT (its entity's identifier, or a directory the test chose) runs with the
trainer's FAULT_ENV=FAULT (e.g. `hang@1`, or `oom@2@1`: global rank 1 only), so one operation
can give each entity its own fault.

The stages of a multi-node measurement (execute/stages.py), seen and bent per node:
SFTTRAINER_TEST_STAGES=DIR: each node's preparation leaves `prepare-start-<rank>` when it
begins and `prepared-<rank>` when it ends, and each launch `launch-<rank>`, each holding the
`prepared-*` names present at that moment (JSON), so a test reads the order of events from
files, not from clocks.
SFTTRAINER_TEST_SLOW_PREPARE=RANK@SECONDS (with STAGES): machine rank RANK prepares only once
every other node has, and SECONDS later: a cold node building its environment while its
peers are ready.
SFTTRAINER_TEST_UNMOUNTED_DATASET=RANK: machine rank RANK looks for the dataset where it is
not, as on a node without the volume that holds it.
SFTTRAINER_TEST_MEET=DIR=TEXT,TEXT: a measurement whose directory's path contains one of the
TEXTs leaves `DIR/arrived-<TEXT>` and launches only once every TEXT has arrived: measurements
that must run at once are shown to, by design rather than by schedule (run one after the
other, the first waits out the guard and fails).
SFTTRAINER_TEST_AWAIT_OOM=TEXT[@FILE];TEXT[@FILE]: a measurement whose label contains TEXT asks
the record of measured OOMs only once the record holds an OOM measured under its own experiment
(and FILE exists, where one is given): whether the OOM answers it is then decided after the OOM
was recorded, by design rather than by schedule. The waiting task keeps its CPU: with at most
six requests in flight on two 4-CPU nodes, one node always has the 2 CPUs an OOM's run needs.
SFTTRAINER_TEST_HOLD_FAULT=DIR: a rank about to fire its injected fault first waits for
`DIR/stopped-<its launcher's pid>`, which the test writes once it has done to the launcher
what it wanted done before the fault (a SIGSTOP): an order by design, not by schedule. Then it
leaves `DIR/fired-<its launcher's pid>`.
"""

import functools
import importlib.abc
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

_BREAK_CONVERSION = os.environ.get("SFTTRAINER_TEST_BREAK_CONVERSION")
_FAULTS = dict(
    entry.split("=", 1)
    for entry in os.environ.get("SFTTRAINER_TEST_FAULTS", "").split(";")
    if entry
)
_STAGES = os.environ.get("SFTTRAINER_TEST_STAGES")
_SLOW = os.environ.get("SFTTRAINER_TEST_SLOW_PREPARE")
_UNMOUNTED = os.environ.get("SFTTRAINER_TEST_UNMOUNTED_DATASET")
_HOLD = os.environ.get("SFTTRAINER_TEST_HOLD_FAULT")
_MEET = os.environ.get("SFTTRAINER_TEST_MEET")
_AWAIT_OOM = [
    entry.partition("@")[::2]
    for entry in os.environ.get("SFTTRAINER_TEST_AWAIT_OOM", "").split(";")
    if entry
]
_GUARD_SECONDS = 300  # only a hang reaches it: the peers' preparation is what is waited for
_AWAIT_GUARD_SECONDS = 900  # only a hang reaches it: an OOM's run, or a killed first run


def _break_conversion(module):
    real = module.to_result

    def to_result(outcome, entity_id, experiment):
        if _BREAK_CONVERSION in entity_id and not getattr(outcome, "reason", "").startswith(
            "internal error while converting"
        ):
            raise RuntimeError(f"injected conversion failure for {entity_id}")
        return real(outcome, entity_id, experiment)

    module.to_result = to_result


def _mark(name):
    """Writes marker `name` holding the names of the nodes prepared so far."""
    stages = Path(_STAGES)
    seen = sorted(p.name for p in stages.glob("prepared-*"))
    partial = stages / f".{name}.{os.getpid()}"
    partial.write_text(json.dumps(seen))
    partial.rename(stages / name)  # whole or absent: a test polling it never reads half


def _meet(cwd):
    """Waits, in a measurement named by SFTTRAINER_TEST_MEET, until all it names have arrived."""
    meeting, _, names = _MEET.partition("=")
    needles = names.split(",")
    if not any(needle in cwd for needle in needles):
        return
    for needle in needles:
        if needle in cwd:
            (Path(meeting) / f"arrived-{needle}").touch()
    deadline = time.monotonic() + _GUARD_SECONDS
    while not all((Path(meeting) / f"arrived-{needle}").exists() for needle in needles):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{needles} never all ran at once")
        time.sleep(0.1)


def _patch_node(module):
    from ado_actuators.sfttrainer.contract.trainer_io import FAULT_ENV

    real_run_process = module.run_process
    real_prepare = module.prepare_node

    @functools.wraps(real_run_process)
    def run_process(argv, *, env, cwd, **options):
        for needle, fault in _FAULTS.items():
            if needle in str(cwd):
                env = {**env, FAULT_ENV: fault}
        if _MEET:
            _meet(str(cwd))
        if _STAGES:
            name = Path(cwd).name
            _mark(f"launch-{name.removeprefix('node-') if name.startswith('node-') else 0}")
        return real_run_process(argv, env=env, cwd=cwd, **options)

    @functools.wraps(real_prepare)
    def prepare_node(request, machine_rank=0):
        if _STAGES:
            _mark(f"prepare-start-{machine_rank}")
        if _SLOW and int(_SLOW.split("@")[0]) == machine_rank:
            peers = [k for k in range(request.plan_inputs.values.number_nodes) if k != machine_rank]
            deadline = time.monotonic() + _GUARD_SECONDS
            while not all((Path(_STAGES) / f"prepared-{k}").exists() for k in peers):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the peers {peers} never prepared")
                time.sleep(0.1)
            time.sleep(float(_SLOW.split("@")[1]))
        if _UNMOUNTED and int(_UNMOUNTED) == machine_rank:
            inputs = request.plan_inputs
            dataset = inputs.dataset_path
            elsewhere = dataset.parent / "not-mounted-here" / dataset.name
            request = request.model_copy(
                update={"plan_inputs": inputs.model_copy(update={"dataset_path": elsewhere})}
            )
        prepared = real_prepare(request, machine_rank)
        if _STAGES:
            _mark(f"prepared-{machine_rank}")
        return prepared

    module.run_process = run_process
    module.prepare_node = prepare_node


def _hold_faults(module):
    real_fire = module.fire

    @functools.wraps(real_fire)
    def fire(kind, step):
        # a rank's parent is its launcher (torch's elastic agent runs inside accelerate launch)
        gate = Path(_HOLD) / f"stopped-{os.getppid()}"
        deadline = time.monotonic() + _GUARD_SECONDS
        while not gate.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{gate} never appeared")
            time.sleep(0.05)
        (Path(_HOLD) / f"fired-{os.getppid()}").touch()  # the test sees the hold was kept
        return real_fire(kind, step)

    module.fire = fire


def _await_oom(module):
    real_answer = module.Neighbours.answer

    @functools.wraps(real_answer)
    def answer(self):
        for needle, gate in _AWAIT_OOM:
            if needle not in self.label:
                continue
            deadline = time.monotonic() + _AWAIT_GUARD_SECONDS
            while not (
                any(e.proof.get("experiment") == self.experiment for e in self.record.ooms())
                and (not gate or Path(gate).exists())
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.label} waited for an OOM of {self.experiment} in "
                        f"{self.record.path}{' and ' + gate if gate else ''}"
                    )
                time.sleep(0.5)
        return real_answer(self)

    module.Neighbours.answer = answer


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
    sys.meta_path.insert(0, _Patch("ado_actuators.sfttrainer.actuator.results", _break_conversion))
if _HOLD:
    sys.meta_path.insert(0, _Patch("ado_actuators.sfttrainer.trainer.faults", _hold_faults))
if _AWAIT_OOM:
    sys.meta_path.insert(0, _Patch("ado_actuators.sfttrainer.ledger.neighbours", _await_oom))
if _FAULTS or _STAGES or _SLOW or _UNMOUNTED or _MEET:
    sys.meta_path.insert(0, _Patch("ado_actuators.sfttrainer.execute.node", _patch_node))
