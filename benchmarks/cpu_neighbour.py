"""What a training beside it does to a CPU measurement, side by side in one run.

    .venv/bin/python benchmarks/cpu_neighbour.py [--threads 1 2] [--batches 1 16]

The tiny model (examples/local-cpu) measured through the engine (engine/measurement.measure, the
STEADY_CI95_1PCT stop capped at 15 s, 512 tokens) at each batch size: alone, then beside one
other training of the same model (batch 2) started a few seconds before, with OMP_NUM_THREADS
set to each `--threads` for both. Two trainings of two threads each on two cores spin against
each other; the test suite runs two workers, so its trainings run one thread each
(tests/conftest.py). Prints each measurement's dataset tokens/s, its 95 % interval and the
ratio beside/alone; and the ratio of the batch sizes' speeds, alone, against the speed model's
prediction of one reference GPU, the prediction a CPU walk starts from
(space/calibration.py's UNPRICED_DEVICE).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import demo_kit  # noqa: F401  (examples/local-cpu on the path)
from tiny_model import build_tiny_model

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.execute.environment import installed_fms_hf_tuning
from ado_actuators.sfttrainer.space.calibration import REFERENCE_DEVICE
from ado_actuators.sfttrainer.space.preview import preview_entity

DATASET = "news-chars-512-entries-4096"
EXPERIMENT = "finetune_full_benchmark-v1.0.0"
LENGTH = 512
NEIGHBOUR_BATCH = 2


def entity(batch: int) -> dict[str, Any]:
    return {
        "model_name": "tiny",
        "model_max_length": LENGTH,
        "batch_size": batch,
        "number_gpus": 0,
        "dataset_id": DATASET,
        "gradient_accumulation_steps": 1,
        "torch_dtype": "float32",
        "fms_hf_tuning_version": installed_fms_hf_tuning(),
        "auto_stop_method": "STEADY_CI95_1PCT",
        "auto_stop_max_seconds": 15,
        "num_train_epochs": 10000,
    }


def setup(root: Path) -> SFTTrainerParameters:
    model = build_tiny_model(root / "tiny-llama")
    data = root / "data"
    data.mkdir()
    shape = datasets.get_shape(DATASET)
    generate(data / datasets.dataset_filename(DATASET), shape, entries=64, progress=False)
    return SFTTrainerParameters(
        data_directory=str(data),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map={"tiny": {"Vanilla": str(model)}},
        stall_timeout_seconds=120,
        oom_dominance=False,
    )


def measured(params: SFTTrainerParameters, batch: int) -> tuple[float, float]:
    """(dataset tokens/s, its 95 % interval in per cent) of one measurement."""
    outcome = measure(entity(batch), EXPERIMENT, params, label="neighbour")
    found = getattr(outcome, "properties", {})
    return found["dataset_tokens_per_second"], found.get(
        "dataset_tokens_per_second_ci95_percent", float("nan")
    )


def predicted(params: SFTTrainerParameters, batch: int) -> float:
    settings = MeasurementSettings(model_map=params.model_map, hf_home=params.hf_home)
    proxy = {**entity(batch), "number_gpus": 1, "gpu_model": REFERENCE_DEVICE}
    speed = preview_entity(proxy, EXPERIMENT, settings).tokens_per_second_per_gpu
    assert speed is not None
    return speed


def beside(params: SFTTrainerParameters, batch: int, root: Path) -> tuple[float, float]:
    """The measurement with another training running: this script again, as a subprocess."""
    neighbour = subprocess.Popen(
        [sys.executable, __file__, "--neighbour", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(8)  # past its start-up, into its steps
        return measured(params, batch)
    finally:
        try:
            neighbour.wait(timeout=300)
        except subprocess.TimeoutExpired:  # never left running past the benchmark
            neighbour.kill()
            neighbour.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--neighbour", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.neighbour:  # the training beside: its own parameters, the same model and data
        measured(setup(Path(tempfile.mkdtemp(dir=args.neighbour))), NEIGHBOUR_BATCH)
        return 0
    root = Path(tempfile.mkdtemp(prefix="cpu-neighbour-"))
    params = setup(root / "main")
    results: dict[str, Any] = {}
    for threads in args.threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        for batch in args.batches:
            alone, alone_ci = measured(params, batch)
            near, near_ci = beside(params, batch, root)
            results[f"{threads} thread(s), batch {batch}"] = (alone, near)
            print(
                f"{threads} thread(s), batch {batch:>2}: alone {alone:>9,.0f} tokens/s "
                f"(± {alone_ci:.1f} %), beside another training {near:>9,.0f} (± {near_ci:.1f} "
                f"%): {near / alone:.2f} of alone",
                flush=True,
            )
        low, high = min(args.batches), max(args.batches)
        ratio = (
            results[f"{threads} thread(s), batch {high}"][0]
            / results[f"{threads} thread(s), batch {low}"][0]
        )
        guess = predicted(params, high) / predicted(params, low)
        print(
            f"{threads} thread(s): batch {high} over batch {low}, alone: {ratio:.2f} measured, "
            f"{guess:.1f} predicted on the reference GPU"
        )
    print(json.dumps({k: [round(v) for v in pair] for k, pair in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
