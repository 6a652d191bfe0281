"""The step time's experts (plan/speed/experts.py) against fms-acceleration's public MoE table: a
test, nothing fitted on it.

Data: benchmarks/data/fms_acceleration_a100_80gb.csv, table `a100_80gb_moe` (the file's header
cites the commit): ibm-granite/granite-3.0-3b-a800m-instruct (40 experts, 8 per token), full
fine-tuning, 8 samples a device, 128 a step, bfloat16, gradient checkpointing, flash attention;
one A100-80GB SXM (transformers' expert loop, and fms-acceleration's ScatterMoE with no expert
parallelism) and FSDP over 2 and 4 (the loop). yahma/alpaca-cleaned unpacked, each batch padded
to its longest sample; the table does not record the lengths. Its tokens and runtime give
tokens/s x runtime / samples = 279 tokens a padded sample if the runs were 100 steps (the
padding-free rows then give 194 unpadded, alpaca-cleaned's size with the prompt template); the
ratio of the loop's rate to ScatterMoE's at the same length is the figure that does not depend
on it. Printed at half and twice that length too.

    python benchmarks/moe_throughput.py
"""

from __future__ import annotations

import csv
from pathlib import Path

from memory_bound import expert_parallel, load_configs

from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    Parallelism,
    Precision,
    TrainingConfiguration,
    Tuning,
)
from ado_actuators.sfttrainer.plan.speed.prediction import device_of, model_shape
from ado_actuators.sfttrainer.plan.speed.step_time import step_time

DATA = Path(__file__).parent / "data" / "fms_acceleration_a100_80gb.csv"
MODEL = "ibm-granite/granite-3.0-3b-a800m-instruct"
FRAMEWORKS = ("none", "moe-scattermoe-granite-ep1")
"""The rows priced: transformers' loop, and ScatterMoE on one device (fast_moe 1). Expert
parallelism over several devices and padding-free runs are left out: neither is priced."""
LENGTH = 279


def rows() -> list[dict[str, str]]:
    lines = [line for line in DATA.read_text().splitlines() if not line.startswith("#")]
    return [
        row
        for row in csv.DictReader(lines)
        if row["table"] == "a100_80gb_moe"
        and row["model_name_or_path"] == MODEL
        and row["framework_config"] in FRAMEWORKS
    ]


def predicted(row: dict[str, str], length: int) -> float:
    tuning = Tuning(method="none")
    configuration = TrainingConfiguration(
        tuning=tuning,
        parallelism=Parallelism(
            gpus=int(row["num_gpus"]), fast_moe=expert_parallel(row["framework_config"])
        ),
        batch=Batch(
            per_device_batch=int(row["per_device_train_batch_size"]),
            sample_tokens=length,
            gradient_accumulation_steps=int(row["gradient_accumulation_steps"]),
        ),
        precision=Precision(torch_dtype="bfloat16"),
        kernels=Kernels(
            flash_attention=True, attention="flash_attention_2", checkpointing="reentrant"
        ),
    )
    shape = model_shape(load_configs()[MODEL], tuning, "Vanilla")
    device = device_of("NVIDIA-A100-SXM4-80GB")
    assert device is not None
    return step_time(shape, configuration, device).tokens_per_second_per_gpu


def main() -> int:
    found = rows()
    for length in (LENGTH // 2, LENGTH, 2 * LENGTH):
        print(f"{length} tokens a sample:")
        rates = {}
        for row in found:
            measured = float(row["train_tokens_per_second"])
            rate = predicted(row, length)
            key = (row["framework_config"], row["num_gpus"])
            rates[key] = (rate, measured)
            print(
                f"  {row['framework_config']:28} x{row['num_gpus']}: measured {measured:7.0f}, "
                f"predicted {rate:7.0f} tokens/s ({rate / measured - 1:+.1%})"
            )
        loop, scatter = rates[("none", "1")], rates[("moe-scattermoe-granite-ep1", "1")]
        print(
            f"  ScatterMoE over the loop, one GPU: measured {scatter[1] / loop[1]:.2f}x, "
            f"predicted {scatter[0] / loop[0]:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
