"""Time to the first training step on the default dataset, side by side in one run.

    .venv/bin/python benchmarks/time_to_first_step.py [--entries 4096] [--min-tokens 16384]
                                                      [--repeats 2]

A `max_steps: 3` measurement hands the trainer only the entries three steps consume
(`plan/launch/launch_plan.py`); a `stop_after_seconds` measurement hands it the whole dataset, and the
trainer tokenises entries as training reaches them (`trainer/lazy_dataset.py`). Before that,
a time-bounded run tokenised the whole dataset first (what the reference implementation did
for every run). Both runs use the same tiny model on the CPU, alternating, `--repeats` times;
the report is the ratio of the median times (time-bounded / step-bounded: 1.0 is the aim).
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
from tiny_model import build_tiny_model

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.trainer_io import RankReport
from ado_actuators.sfttrainer.execute import workspace
from ado_actuators.sfttrainer.execute.process import run_process
from ado_actuators.sfttrainer.plan.launch.launch_plan import PlanInputs, plan_launch

DATASET_ID = "news-tokens-16384plus-entries-4096"


def first_step_seconds(root: Path, model: Path, dataset: Path, name: str, **entity) -> float:
    definition = catalog_data().experiment("finetune_full_benchmark-v1.0.0")
    values = entity_values(
        {
            "model_name": "tiny",
            "model_max_length": 512,
            "batch_size": 2,
            "number_gpus": 0,
            "torch_dtype": "float32",
            "fms_hf_tuning_version": "3.2.2",
            **entity,
        }
    )
    workdir = root / name
    plan = plan_launch(
        PlanInputs(
            values=values,
            definition=definition,
            model_location=str(model),
            dataset_path=dataset,
            text_field="output",
            workdir=workdir,
            python=sys.executable,
            hf_home=str(root / "hf"),
            main_process_port=workspace.free_port(),
            aim_repo=None,
        )
    )
    started = time.time()
    workspace.prepare(plan)
    result = run_process(
        plan.node.argv,
        env={**_env(root)},
        cwd=workdir,
        log_path=workdir / "train.log",
        stall_timeout=3600,
    )
    reports = RankReport.read_all(plan.report_dir)
    if result.returncode != 0 or not reports or not reports[0].steps:
        raise SystemExit(f"{name} run failed:\n{result.log_tail()}")
    return reports[0].steps[0].start - started


def _env(root: Path) -> dict[str, str]:
    import os

    return {
        **os.environ,
        "HF_HOME": str(root / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=4096)
    parser.add_argument("--min-tokens", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="sfttrainer-bench-"))
    model = build_tiny_model(root / "tiny-llama")
    dataset = root / f"{DATASET_ID}.jsonl"
    if not dataset.exists():
        generator = Path(sys.executable).with_name("sfttrainer_generate_dataset_text")
        subprocess.run(
            [
                str(generator),
                "--dataset-id",
                DATASET_ID,
                "--entries",
                str(args.entries),
                "--min-tokens",
                str(args.min_tokens),
                "-o",
                str(dataset),
            ],
            check=True,
        )
    step_bounded, time_bounded = [], []
    for repeat in range(args.repeats):
        step_bounded.append(
            first_step_seconds(root, model, dataset, f"steps-{repeat}", max_steps=3)
        )
        # stops at the first step end after 1 s
        time_bounded.append(
            first_step_seconds(root, model, dataset, f"seconds-{repeat}", stop_after_seconds=1)
        )
    steps, seconds = statistics.median(step_bounded), statistics.median(time_bounded)
    print(f"dataset: {dataset} ({dataset.stat().st_size / 1e6:.0f} MB, {args.entries} entries)")
    print(f"time to first step, max_steps 3:          {steps:8.1f} s  {_each(step_bounded)}")
    print(f"time to first step, stop_after_seconds 1: {seconds:8.1f} s  {_each(time_bounded)}")
    print(f"ratio (time-bounded / step-bounded): {seconds / steps:.2f}")


def _each(times: list[float]) -> str:
    return "(" + ", ".join(f"{t:.1f}" for t in times) + ")"


if __name__ == "__main__":
    main()
