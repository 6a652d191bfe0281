"""Where a short operation's seconds go, side by side in one run.

    .venv/bin/python benchmarks/operation_overhead.py [--steps 20] [--repeats 2]

Alternating, `--repeats` times:
  bare       the four trainings, one after the other, each `python -m tuning.sft_trainer`
             with the command line the actuator builds for it
  operation  `ado create operation` over a space of those four entities (full and LoRA
             fine-tuning x batch sizes 2 and 4, tiny model, CPU)
  invalid    `ado create operation` over a space whose only entity is configuration-invalid
             (nothing is launched): what ado-core, Ray and the actuator cost by themselves
  ray        a fresh interpreter doing ray.init() + one task + ray.shutdown()
and prints the medians and two ratios: operation / bare, and the marginal cost of a
measurement, (operation - invalid) / bare, whose aim is at most 1.15.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import demo_kit  # noqa: F401  (examples/local-cpu on the path)
import yaml
from ado_cli import AdoCLI, generate_text_dataset
from tiny_model import build_tiny_model

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.execute import workspace
from ado_actuators.sfttrainer.plan.launch.launch_plan import TRAINER_MODULE, PlanInputs, plan_launch

DATASET_ID = "news-chars-512-entries-4096"
EXPERIMENTS = ("finetune_full_benchmark-v1.0.0", "finetune_lora_benchmark-v1.0.0")
BATCH_SIZES = (2, 4)
MAX_LENGTH = 128
RAY_ROUND_TRIP = "import ray; ray.init(); ray.get(ray.remote(lambda: 1).remote()); ray.shutdown()"


def parameterization(steps: int) -> list[dict]:
    fixed = {
        "fms_hf_tuning_version": "3.2.2",
        "dataset_id": DATASET_ID,
        "max_steps": steps,
        "torch_dtype": "float32",
        "gradient_accumulation_steps": 1,
    }
    return [{"property": {"identifier": k}, "value": v} for k, v in fixed.items()]


def bare_trainings(root: Path, model: Path, data: Path, steps: int, offline: dict) -> float:
    """The four trainings as `python -m tuning.sft_trainer`, on the entries a measurement uses."""
    started = time.monotonic()
    for experiment in EXPERIMENTS:
        for batch in BATCH_SIZES:
            values = entity_values(
                {
                    "model_name": "tiny-llama",
                    "model_max_length": MAX_LENGTH,
                    "batch_size": batch,
                    "number_gpus": 0,
                    "torch_dtype": "float32",
                    "max_steps": steps,
                    "gradient_accumulation_steps": 1,
                    "dataset_id": DATASET_ID,
                }
            )
            workdir = Path(tempfile.mkdtemp(dir=root, prefix="bare-"))
            plan = plan_launch(
                PlanInputs(
                    values=values,
                    definition=catalog_data().experiment(experiment),
                    model_location=str(model),
                    dataset_path=data / f"{DATASET_ID}.jsonl",
                    text_field="output",
                    workdir=workdir,
                    python=sys.executable,
                    hf_home=offline["HF_HOME"],
                    main_process_port=workspace.free_port(),
                    aim_repo=None,
                )
            )
            workspace.prepare(plan)
            argv = plan.node.argv
            fms_args = argv[argv.index(TRAINER_MODULE) + 3 :]  # after -m MODULE --job PATH
            # the wrapper turns flash attention off where it is unavailable; bare fms would fail
            flash = fms_args.index("--use_flash_attn") + 1
            fms_args[flash] = "False"
            done = subprocess.run(
                [sys.executable, "-m", "tuning.sft_trainer", *fms_args],
                cwd=workdir,
                env={**ado_env(offline), **plan.env},
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise SystemExit(
                    f"bare training failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
                )
    return time.monotonic() - started


def ado_env(offline: dict) -> dict:
    import os

    return {**os.environ, **offline}


def operation_seconds(ado: AdoCLI, root: Path, config_id: str, space: dict, name: str) -> float:
    space_file = root / f"{name}-space.yaml"
    space_file.write_text(yaml.safe_dump(space))
    space_id = ado.create("space", space_file, "--new-sample-store")
    operation = {
        "spaces": [space_id],
        "actuatorConfigurationIdentifiers": [config_id],
        "operation": {
            "module": {"operatorName": "random_walk", "operationType": "search"},
            "parameters": {
                "numberEntities": "all",
                "singleMeasurement": True,
                "batchSize": 1,
                "samplerConfig": {"mode": "sequential", "samplerType": "generator"},
            },
        },
    }
    operation_file = root / f"{name}-operation.yaml"
    operation_file.write_text(yaml.safe_dump(operation))
    started = time.monotonic()
    ado.run("create", "operation", "-f", str(operation_file), timeout=1800)
    seconds = time.monotonic() - started
    rows = ado.measurements(space_id)
    valid = sum(float(r["is_valid"]) == 1 for r in rows)
    print(f"  {name}: {seconds:.1f} s, {len(rows)} entities measured, {valid} valid", flush=True)
    return seconds


def ray_round_trip(offline: dict) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", RAY_ROUND_TRIP],
        env=ado_env(offline),
        check=True,
        capture_output=True,
    )
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    root = (args.workdir or Path(tempfile.mkdtemp(prefix="sfttrainer-overhead-"))).absolute()
    root.mkdir(parents=True, exist_ok=True)
    offline = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(root / "hf"),
    }
    model = build_tiny_model(root / "tiny-llama")
    data = root / "data"
    generate_text_dataset(data, DATASET_ID, 256)
    ado = AdoCLI(home=root / "ado-config", extra_env=offline)
    config = root / "actuator_configuration.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "actuatorIdentifier": "SFTTrainer",
                "parameters": {
                    "data_directory": str(data),
                    "hf_home": offline["HF_HOME"],
                    "output_dir": str(root / "measurements"),
                    "model_map": {"tiny-llama": {"Vanilla": str(model)}},
                },
            }
        )
    )
    config_id = ado.create("actuatorconfiguration", config)
    experiments = [
        {
            "experimentIdentifier": e,
            "actuatorIdentifier": "SFTTrainer",
            "parameterization": parameterization(args.steps),
        }
        for e in EXPERIMENTS
    ]
    four = {
        "experiments": experiments,
        "entitySpace": [
            {"identifier": "model_name", "propertyDomain": {"values": ["tiny-llama"]}},
            {"identifier": "number_gpus", "propertyDomain": {"values": [0]}},
            {"identifier": "model_max_length", "propertyDomain": {"values": [MAX_LENGTH]}},
            {"identifier": "batch_size", "propertyDomain": {"values": list(BATCH_SIZES)}},
        ],
    }
    invalid = {
        "experiments": experiments[:1],
        "entitySpace": [
            {"identifier": "model_name", "propertyDomain": {"values": ["tiny-llama"]}},
            # 2 GPUs and no gpu_model: invalid by rule, answered before anything is launched
            {"identifier": "number_gpus", "propertyDomain": {"values": [2]}},
            {"identifier": "model_max_length", "propertyDomain": {"values": [MAX_LENGTH]}},
            {"identifier": "batch_size", "propertyDomain": {"values": [2]}},
        ],
    }

    times: dict[str, list[float]] = {"bare": [], "operation": [], "invalid": [], "ray": []}
    for repeat in range(args.repeats):
        print(f"repeat {repeat + 1}/{args.repeats}", flush=True)
        times["bare"].append(bare_trainings(root, model, data, args.steps, offline))
        print(f"  bare: {times['bare'][-1]:.1f} s", flush=True)
        times["operation"].append(operation_seconds(ado, root, config_id, four, f"four-{repeat}"))
        times["invalid"].append(
            operation_seconds(ado, root, config_id, invalid, f"invalid-{repeat}")
        )
        times["ray"].append(ray_round_trip(offline))
        print(f"  ray init + task + shutdown: {times['ray'][-1]:.1f} s", flush=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"\n{args.steps}-step trainings of the tiny model, medians of {args.repeats}:")
    for name, value in median.items():
        print(f"  {name:<10} {value:7.1f} s  ({', '.join(f'{v:.1f}' for v in times[name])})")
    print(
        f"ratio operation / bare:                       {median['operation'] / median['bare']:.2f}"
    )
    marginal = (median["operation"] - median["invalid"]) / median["bare"]
    each = [
        (o - i) / b
        for o, i, b in zip(times["operation"], times["invalid"], times["bare"], strict=True)
    ]
    print(
        f"ratio (operation - invalid operation) / bare: {marginal:.2f}  (aim: <= 1.15; "
        f"per repeat: {', '.join(f'{r:.2f}' for r in each)})"
    )


if __name__ == "__main__":
    main()
