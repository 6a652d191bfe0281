"""The measurement engine runs where neither ado-core nor Ray can be imported (a lent GPU
machine's image has neither): ado is one front end of the engine, not a dependency of it.

The check is real: a fresh interpreter whose import system refuses `ado` and `ray` imports
every engine module, plans launches, and runs `measurement.measure` through execute/ up to the
node's input checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

BLOCKED = ("ado", "ray")
REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import importlib, importlib.abc, json, pkgutil, sys, tempfile
    from pathlib import Path

    BLOCKED = set(sys.argv[1].split(","))

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked: the engine must run without it")
            return None

    assert not BLOCKED & {m.partition(".")[0] for m in sys.modules}, "imported before the test"
    sys.meta_path.insert(0, Refuse())

    import ado_actuators.sfttrainer as package
    imported = []
    # every layer but ado's front end (actuator/), and every module in it
    layers = [i.name for i in pkgutil.iter_modules(package.__path__) if i.ispkg]
    assert "engine" in layers and "actuator" in layers, layers
    for sub in sorted(set(layers) - {"actuator"}):
        root = importlib.import_module(f"{package.__name__}.{sub}")
        for info in pkgutil.iter_modules(root.__path__):
            if info.name != "__main__":  # the trainer's entry point runs, it is not imported
                imported.append(importlib.import_module(f"{root.__name__}.{info.name}").__name__)

    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data
    from ado_actuators.sfttrainer.engine.measurement import measure
    from ado_actuators.sfttrainer.contract.outcomes import Failed
    from ado_actuators.sfttrainer.plan.launch.launch_plan import PlanInputs, plan_launch
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

    root = Path(tempfile.mkdtemp())
    SIZE = {"model_max_length": 512, "batch_size": 2}
    definition = catalog_data().experiment("finetune_full_benchmark-v1.0.0")
    plans = {}
    for backend in ("FSDP", "DDP"):
        values = entity_values({"model_name": "granite-3.1-2b", "number_gpus": 2, **SIZE,
                                "distributed_backend": backend, "max_steps": 3},
                               definition.default_overrides())
        plan = plan_launch(PlanInputs(
            values=values, definition=definition, model_location="/models/granite",
            dataset_path=root / "data.jsonl", text_field="output", workdir=root / backend,
            python=sys.executable, hf_home=str(root / "hf"), main_process_port=29500,
            aim_repo=None))
        plans[backend] = plan.node.accelerate_config["distributed_type"]

    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    settings = MeasurementSettings(
        data_directory=str(root / "data"), hf_home=str(root / "hf"),
        output_dir=str(root / "out"), model_map={"granite-3.1-2b": {"Vanilla": str(model)}})
    outcome = measure({"model_name": "granite-3.1-2b", "number_gpus": 0, "max_steps": 3, **SIZE},
                      "finetune_full_benchmark-v1.0.0", settings, label="no-ado")
    assert isinstance(outcome, Failed), outcome
    print(json.dumps({
        "imported": imported, "plans": plans, "outcome": outcome.reason,
        "leaked": sorted({m.partition(".")[0] for m in sys.modules} & BLOCKED),
    }))
    """
)


def run_blocked(script: str, cwd: Path) -> subprocess.CompletedProcess:
    # this checkout's package, whatever the interpreter has installed (an editable install of
    # another checkout would otherwise answer)
    path = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))
    return subprocess.run(
        [sys.executable, "-c", script, ",".join(BLOCKED)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_engine_imports_plans_and_measures_with_ado_and_ray_blocked(tmp_path):
    done = run_blocked(SCRIPT, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["leaked"] == []
    assert "ado_actuators.sfttrainer.engine.measurement" in result["imported"]
    assert "ado_actuators.sfttrainer.contract.outcomes" in result["imported"]
    assert not [m for m in result["imported"] if ".actuator." in m]
    assert "ado_actuators.sfttrainer.execute.cluster" in result["imported"]
    assert result["plans"] == {"FSDP": "FSDP", "DDP": "MULTI_GPU"}
    # measure() went through execute/ (no Ray: this process) to the node's dataset check
    assert "dataset file" in result["outcome"] and "does not exist" in result["outcome"]


def test_the_blocking_is_real(tmp_path):
    """The same guard makes an ado-core import fail, so a pass above means something."""
    probe = SCRIPT.split("import ado_actuators.sfttrainer as package")[0] + (
        "from ado_actuators.sfttrainer.actuator import parameters\n"
    )
    done = run_blocked(probe, tmp_path)
    assert done.returncode != 0
    assert "ImportError: ado is blocked" in done.stderr
