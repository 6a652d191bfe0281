"""The runs behind each row of the GPU benchmark: the measurement through the engine (no ado,
no Ray), the same fms-hf-tuning command line run bare, and the plan's own FSDP / DDP accelerate
configs on one rank. Imports neither ado-core nor Ray: a lent GPU machine has neither.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rows import Config

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.outcomes import Invalid, Measured, MeasurementOutcome
from ado_actuators.sfttrainer.contract.trainer_io import FAULT_ENV, JOB_FLAG, RankReport
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.execute import workspace
from ado_actuators.sfttrainer.execute.classify import launch_outcome
from ado_actuators.sfttrainer.execute.environment import installed_fms_hf_tuning
from ado_actuators.sfttrainer.execute.node import NodeRun
from ado_actuators.sfttrainer.execute.process import run_process
from ado_actuators.sfttrainer.plan.launch.launch_plan import TRAINER_MODULE, PlanInputs, plan_launch

HERE = Path(__file__).resolve().parent
DEMO = HERE.parents[1] / "examples" / "local-cpu"
DATASET_ID = datasets.DEFAULT_DATASET_ID
EXPERIMENTS = {"full": "finetune_full_benchmark-v1.0.0", "lora": "finetune_lora_benchmark-v1.0.0"}
STALL_SECONDS = 1800


def environment(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HOME": str(root / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }


def prepare_models(root: Path, cpu: bool, names: set[str]) -> dict[str, Path]:
    if cpu:
        sys.path.insert(0, str(DEMO))  # the demo's tiny model builder, outside the wheel
        from tiny_model import build_tiny_model

        return {"tiny": build_tiny_model(root / "models" / "tiny")}
    paths = {}
    for name in sorted(names):
        subprocess.run(
            [
                sys.executable,
                str(HERE / "random_models.py"),
                name,
                str(root / "models" / name),
                "cuda",
            ],
            check=True,
        )
        paths[name] = root / "models" / name
    return paths


def prepare_dataset(root: Path, entries: int | None) -> Path:
    data = root / "data"
    path = data / datasets.dataset_filename(DATASET_ID)
    if not path.exists():
        # `python -m`, not the console script: a --target install (a lent GPU machine) puts
        # scripts nowhere near sys.executable
        extra = ["--entries", str(entries)] if entries else []
        subprocess.run(
            [
                sys.executable,
                "-m",
                "ado_actuators.sfttrainer.cli.generate_dataset_text",
                "--dataset-id",
                DATASET_ID,
                "--output-dir",
                str(data),
                *extra,
            ],
            check=True,
        )
    return path


def entity(config: Config, cpu: bool, steps: int, gpu_model: str | None, flash: bool) -> dict:
    return {
        "model_name": config.model,
        "model_max_length": config.seq,
        "batch_size": config.batch_size,
        "number_gpus": 0 if cpu else 1,
        "gpu_model": None if cpu else gpu_model,
        "dataset_id": DATASET_ID,
        "max_steps": steps,
        "gradient_accumulation_steps": 1,
        "torch_dtype": "float32" if cpu else "bfloat16",
        # flash attention where it can run; a GPU without the package measures without it
        "flash_attn": flash,
        "fms_hf_tuning_version": installed_fms_hf_tuning(),
    }


def hf_metrics_from_log(text: str) -> dict[str, float]:
    """The dict Hugging Face's Trainer prints at the end of training."""
    for line in reversed(text.splitlines()):
        start = line.find("{'train_runtime'")
        if start >= 0:
            return ast.literal_eval(line[start : line.rindex("}") + 1])
    return {}


def _plan(
    root: Path,
    sub: str,
    config: Config,
    values: dict,
    model: Path,
    dataset: Path,
    use_cpu: bool = False,
):
    plan = plan_launch(
        PlanInputs(
            values=entity_values(values),
            definition=catalog_data().experiment(EXPERIMENTS[config.method]),
            model_location=str(model),
            dataset_path=dataset,
            text_field="output",
            workdir=root / sub / config.label,
            python=sys.executable,
            hf_home=str(root / "hf"),
            main_process_port=workspace.free_port(),
            aim_repo=None,
            weights_offline=True,
            use_cpu=use_cpu,
        )
    )
    return plan


def bare_run(root: Path, config: Config, values: dict, model: Path, dataset: Path) -> dict:
    """The measurement's own fms-hf-tuning command line, without the wrapper."""
    plan = _plan(root, "bare", config, values, model, dataset)
    workspace.prepare(plan)
    argv = list(plan.node.argv)
    at = argv.index(TRAINER_MODULE)
    assert argv[at + 1] == JOB_FLAG
    argv[at : at + 3] = ["tuning.sft_trainer"]
    result = run_process(
        argv,
        env={**environment(root), **plan.env},
        cwd=plan.workdir,
        log_path=plan.workspace.train_log,
        stall_timeout=STALL_SECONDS,
    )
    metrics = hf_metrics_from_log(result.log_path.read_text(errors="replace"))
    if result.returncode != 0 or not metrics:
        raise SystemExit(f"bare run {config.label} failed:\n{result.log_tail()}")
    return metrics


def one_rank(
    root: Path, config: Config, values: dict, model: Path, dataset: Path, cpu: bool
) -> MeasurementOutcome:
    """The plan's accelerate config for `config.launcher`, launched with one rank.

    The plan renders FSDP / DDP configs only for several ranks: plan two GPUs (or, on a CPU,
    two gloo ranks), then launch one, on GPU 0, with the same per-device batch. What runs is
    the product's config, accelerate's wrapping (FSDP shards on one rank too) and the trainer
    wrapper under it; the outcome is classified as the engine classifies any launch.
    """
    two = {
        **values,
        "number_gpus": 2,
        "batch_size": 2 * config.batch_size,
        "distributed_backend": config.launcher,
    }
    plan = _plan(root, "one-rank", config, two, model, dataset, use_cpu=cpu)
    argv = list(plan.node.argv)
    argv[argv.index("--num_processes") + 1] = "1"
    node = plan.node.model_copy(
        update={
            "argv": argv,
            "accelerate_config": {**plan.node.accelerate_config, "num_processes": 1},
        }
    )
    job = plan.job.model_copy(update={"gpu_indices": [] if cpu else [0]})
    plan = plan.model_copy(update={"node": node, "job": job, "processes_per_node": 1})
    workspace.prepare(plan)
    fault = {FAULT_ENV: "oom@1"} if cpu and config.expect_oom else {}
    result = run_process(
        argv,
        env={**environment(root), **plan.env, **fault},
        cwd=plan.workdir,
        log_path=plan.workspace.train_log,
        stall_timeout=STALL_SECONDS,
        activity_paths=(plan.workspace.reports.path,),
    )
    run = NodeRun(
        returncode=result.returncode,
        signal_name=result.signal_name,
        stopped_by_watchdog=result.stopped_by_watchdog,
        log_tail=result.log_tail(),
        reports=RankReport.read_all(plan.workspace.reports.path),
        workdir=str(plan.workdir),
    )
    resolved = entity_values(two)
    outcome = launch_outcome(
        run.reports,
        [run],
        world_size=1,
        number_gpus=0 if cpu else 1,
        stop_after_seconds=resolved.stop_after_seconds,
        gpu_model=values["gpu_model"],
        devices=1,
    )
    outcome.metadata.update(
        {"workdir": str(plan.workdir), "accelerate_config": node.accelerate_config}
    )
    return outcome


def measure_one(root, config, models, dataset, cpu, steps, gpu_model, flash, repeats=1) -> dict:
    """The measurement (its properties are the first run's), then `repeats` pairs of wrapped
    and bare throughput, in alternating order so that drift favours neither; ratio of medians."""
    values = entity(config, cpu, steps, gpu_model, flash)
    settings = MeasurementSettings(
        data_directory=str(dataset.parent),
        hf_home=str(root / "hf"),
        output_dir=str(root / "measured"),
        stall_timeout_seconds=STALL_SECONDS,
        model_map={config.model: {"Vanilla": str(models[config.model])}},
        oom_dominance=False,  # a benchmark measures each configuration it lists, OOMs too
    )

    def wrapped():
        if config.launcher != "single":
            return one_rank(root, config, values, models[config.model], dataset, cpu)
        fault = {FAULT_ENV: "oom@1"} if cpu and config.expect_oom else {}
        os.environ.update(fault)
        try:
            return measure(values, EXPERIMENTS[config.method], settings, label=config.label)
        finally:
            for name in fault:
                os.environ.pop(name, None)

    def wrapped_throughput(outcome) -> float:
        reports = RankReport.read_all(Path(outcome.metadata["workdir"]) / "reports")
        return reports[0].hf_metrics.train_samples_per_second

    def bare() -> float:
        return bare_run(root, config, values, models[config.model], dataset)[
            "train_samples_per_second"
        ]

    outcome = wrapped()
    row = {"config": dataclasses.asdict(config), "label": config.label}
    if isinstance(outcome, Invalid):
        row |= {
            "properties": {"is_valid": 0},
            "reason": outcome.reason[:2000],
            "gpu_oom": outcome.gpu_oom,
        }
        return row
    if not isinstance(outcome, Measured):
        row |= {"properties": {}, "reason": outcome.reason[:4000]}
        return row
    row |= {
        "properties": outcome.properties,
        "model_flops_per_token": outcome.metadata.get("model_flops_per_token"),
        "model_parameters": outcome.metadata.get("model_parameters"),
        "flash_attention": outcome.metadata.get("flash_attention"),
        "distributed_type": outcome.metadata.get("distributed_type"),
        "notes": outcome.metadata.get("notes"),
        "train_loss": outcome.metadata.get("train_loss"),
        "machine": outcome.metadata.get("machine"),
    }
    if not config.bare:
        return row
    with_harness, without = [wrapped_throughput(outcome)], [bare()]
    for repeat in range(1, repeats):
        if repeat % 2:  # bare first this time
            without.append(bare())
            with_harness.append(wrapped_throughput(wrapped()))
        else:
            with_harness.append(wrapped_throughput(wrapped()))
            without.append(bare())
    row |= {
        "hf_samples_per_second": {"wrapped": with_harness, "bare": without},
        "observer_ratio": statistics.median(with_harness) / statistics.median(without),
    }
    return row
