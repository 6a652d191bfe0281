"""The memory lower bound (plan/memory/bound.py) against published A100-80GB fine-tuning runs.

For every configuration of fms-acceleration's reference tables (benchmarks/data/, sources
cited there) this computes the bound the certain-OOM check would compute and compares it with
what the run measured:
- a configuration that ran must need MORE than the bound: torch's peak allocation (rank 0)
  above the bound without the CUDA context, and nvidia-smi's peak above the whole bound;
- a configuration that ran out of memory is "caught" when the bound exceeds the device's
  80 GiB: the actuator would answer it is_valid = 0 without launching.

Then the predicted peak (benchmarks/memory_prediction.py): the same runs against the prediction,
its error against torch's peak, which OOMs it predicts, and its constants fitted with each model
family left out.

    python benchmarks/memory_bound.py            # the bound's table and counts, then the prediction's
"""

from __future__ import annotations

import csv
import dataclasses
import re
import sys
from pathlib import Path

import yaml

from ado_actuators.sfttrainer.contract.units import GIB, MIB
from ado_actuators.sfttrainer.metrics.gpu_memory import device_memory_bytes
from ado_actuators.sfttrainer.plan.memory.bound import MemoryBound, memory_bound
from ado_actuators.sfttrainer.plan.model.architecture import count_parameters
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Parallelism,
    Precision,
    TrainingConfiguration,
    Tuning,
)

DATA = Path(__file__).resolve().parent / "data"
GPU_MODEL = "NVIDIA-A100-SXM4-80GB"


@dataclasses.dataclass(frozen=True)
class Run:
    table: str
    framework: str
    model: str
    gpus: int
    peft: str
    batch: int
    accumulation: int
    mixed_precision: bool
    r: int
    targets: tuple[str, ...]
    dtype: str
    nvidia_mib: float | None
    torch_peak: int | None
    ran: bool

    def label(self) -> str:
        peft = f"lora r{self.r}" if self.peft == "lora" else "full"
        return f"{self.model.split('/')[-1]} {peft} x{self.gpus} bs{self.batch} {self.framework}"


@dataclasses.dataclass(frozen=True)
class Verdict:
    run: Run
    bound: MemoryBound | None
    problem: str | None = None  # a run that ran, yet measured less than the bound

    @property
    def caught(self) -> bool:
        return self.bound is not None and self.bound.total > device_memory_bytes(GPU_MODEL)


def _number(text: str) -> float | None:
    return float(text) if text.strip() else None


def load_runs(path: Path = DATA / "fms_acceleration_a100_80gb.csv") -> list[Run]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    runs = []
    for row in csv.DictReader(lines):
        peak = _number(row["mem_peak_torch_mem_alloc_in_bytes"])
        runs.append(
            Run(
                table=row["table"],
                framework=row["framework_config"],
                model=row["model_name_or_path"],
                gpus=int(row["num_gpus"]),
                peft="lora" if row["peft_method"] == "lora" else "none",
                batch=int(row["per_device_train_batch_size"]),
                accumulation=int(row["gradient_accumulation_steps"] or 1),
                mixed_precision=row["bf16"] == "True" or row["fp16"] == "True",
                r=int(float(row["r"] or 8)),
                targets=tuple(row["target_modules"].split()),
                dtype=row["torch_dtype"],
                nvidia_mib=_number(row["mem_nvidia_mem_reserved"]),
                torch_peak=int(peak) if peak else None,
                ran=bool(row["train_runtime"].strip()),
            )
        )
    return runs


def load_configs(path: Path = DATA / "model_configs.yaml") -> dict[str, dict]:
    raw = yaml.safe_load(path.read_text())
    configs = {}
    for model, entry in raw.items():
        base = raw[entry["same_as"]]["config"] if "same_as" in entry else entry["config"]
        configs[model] = {
            **base,
            **(
                {"quantization_config": entry["quantization_config"]}
                if "quantization_config" in entry
                else {}
            ),
        }
    return configs


def expert_parallel(framework: str) -> int:
    """The expert-parallel degree of fms-acceleration's ScatterMoE runs (`moe-scattermoe-granite-
    ep2`: 2), as the entity's fast_moe says it; 0 for every other run."""
    found = re.search(r"scattermoe-granite-ep(\d+)", framework)
    return int(found.group(1)) if found else 0


def configuration_of(run: Run, config: dict, *, quantized: bool = True) -> TrainingConfiguration:
    """How `run` trained, as the product reads a measurement; `quantized=False`: its block
    weights read at the model's dtype (the prediction's reading, benchmarks/memory_prediction.py)."""
    if not quantized:
        config = {key: value for key, value in config.items() if key != "quantization_config"}
    elif "bnb" in run.framework:
        # bitsandbytes QLoRA: the plugin loads the block weights in 4 bits
        config = {**config, "quantization_config": {"load_in_4bit": True}}
    return TrainingConfiguration(
        tuning=Tuning(method=run.peft, lora_r=run.r, target_modules=run.targets),
        parallelism=Parallelism(gpus=run.gpus, fast_moe=expert_parallel(run.framework)),
        # the MoE table's micro-batches: more than one a step holds FSDP's gradients whole
        batch=Batch(gradient_accumulation_steps=run.accumulation),
        precision=Precision(
            torch_dtype=run.dtype,
            optim="adamw_torch",
            mixed_precision=run.mixed_precision,
            # the tables mix in the weights' own 16-bit dtype (bf16 with bfloat16, fp16 with float16)
            autocast_dtype=run.dtype,
        ),
        config=config,
    )


def bound_of(run: Run, config: dict) -> MemoryBound:
    return memory_bound(count_parameters(config), configuration_of(run, config))


def judge(run: Run, configs: dict[str, dict]) -> Verdict:
    config = configs.get(run.model)
    if config is None:
        return Verdict(run, None)
    bound = bound_of(run, config)
    problems = []
    if run.ran:
        without_context = bound.total - bound.parts["cuda_context"]
        if run.torch_peak is not None and run.torch_peak <= without_context:
            problems.append(
                f"torch peak {run.torch_peak / GIB:.2f} GiB <= bound "
                f"{without_context / GIB:.2f} GiB"
            )
        if run.nvidia_mib is not None and run.nvidia_mib * MIB <= bound.total:
            problems.append(
                f"nvidia-smi {run.nvidia_mib / 1024:.2f} GiB <= bound {bound.gib:.2f} GiB"
            )
    return Verdict(run, bound, "; ".join(problems) or None)


def evaluate() -> list[Verdict]:
    configs = load_configs()
    return [judge(run, configs) for run in load_runs()]


def _cell(value: float | None) -> str:
    return f"{value:7.2f}" if value is not None else "      -"


def report(verdicts: list[Verdict]) -> str:
    lines = [f"{'configuration':<62} {'bound':>7} {'torch':>7} {'nvidia':>7}  outcome"]
    for v in verdicts:
        run = v.run
        if v.bound is None:
            outcome = "no config: skipped"
        elif run.ran:
            outcome = "ran, bound below" if v.problem is None else f"RAN ABOVE BOUND: {v.problem}"
        else:
            outcome = "OOM, caught" if v.caught else "OOM, not caught (activations)"
        torch_peak = run.torch_peak / GIB if run.torch_peak else None
        nvidia = run.nvidia_mib / 1024 if run.nvidia_mib else None
        bound = v.bound.gib if v.bound else None
        lines.append(
            f"{run.label()[:62]:<62} {_cell(bound)} {_cell(torch_peak)} {_cell(nvidia)}  {outcome}"
        )
    return "\n".join(lines)


def counts(verdicts: list[Verdict]) -> dict[str, int]:
    judged = [v for v in verdicts if v.bound is not None]
    ran = [v for v in judged if v.run.ran]
    oom = [v for v in judged if not v.run.ran]
    return {
        "configurations": len(verdicts),
        "judged": len(judged),
        "ran": len(ran),
        "ran_below_bound_violations": sum(v.problem is not None for v in ran),
        "ran_called_certain_oom": sum(v.caught for v in ran),
        "out_of_memory": len(oom),
        "out_of_memory_caught": sum(v.caught for v in oom),
    }


def main() -> int:
    verdicts = evaluate()
    print(report(verdicts))
    print(
        "\nGiB per device; bound = weights + gradients + AdamW state (sharded) + 0.25 CUDA "
        "context;\ntorch = rank 0's max_memory_allocated, nvidia = nvidia-smi peak."
    )
    summary = counts(verdicts)
    print("\n" + ", ".join(f"{k}: {v}" for k, v in summary.items()))
    bad = summary["ran_below_bound_violations"] + summary["ran_called_certain_oom"]
    import memory_prediction

    print()
    predicted = memory_prediction.main()
    return 1 if bad or predicted["ran_predicted_out_of_memory"] else 0


if __name__ == "__main__":
    sys.exit(main())
