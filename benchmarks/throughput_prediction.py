"""The predicted step time (plan/speed/step_time.py) against fms-acceleration's published A100-80GB
throughput: fits the constants of `Fitted`, and prints the error with each model family left out
of the fit (leave one family out), the figure that says how well the predictor does on models it
was not fitted on.

Data: benchmarks/data/fms_acceleration_a100_80gb.csv (foundation-model-stack/fms-acceleration,
scripts/benchmarks/refs/*.csv at 876e2ed6fc4e966785e3f4315f5ee3cdf8e3d097; the file's header
cites it). Every run that finished, of the three tables whose runs trained packed sequences:
`a100_80gb`, `a100_80gb_granite`, `a100_80gb_liger` (yahma/alpaca-cleaned packed to 4096 tokens,
santacoder's 2048; flash attention; reentrant gradient checkpointing; FSDP FULL_SHARD over more
than one GPU; one micro-batch per step; benchmarks/memory_prediction.py cites where each
setting is declared). Their train_tokens_per_second is per device: batch x length x 100 steps /
train_runtime. Left out: the MoE table (unpacked alpaca samples padded to the longest of each
batch, whose lengths were not recorded, so its tokens per second count padding of an unknown
share) and the refs_orca tables (orca-math, unpacked; same reason).

How each run maps to the predictor: `foak` (and `-liger`) configurations are fast_kernels; the
`accelerated-peft-autogptq*` ones train LoRA over GPTQ 4-bit weights (the actuator's GPTQ-LoRA);
the `*-bnb*` ones over bitsandbytes 4-bit weights.

    python benchmarks/throughput_prediction.py            # the fit and the leave-one-family-out
    python benchmarks/throughput_prediction.py --rows     # and every run's prediction
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import statistics
import sys
from pathlib import Path

import numpy as np
from memory_bound import load_configs
from scipy.optimize import least_squares
from scipy.stats import spearmanr

from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    FastKernels,
    Kernels,
    Parallelism,
    Precision,
    TrainingConfiguration,
    Tuning,
)
from ado_actuators.sfttrainer.plan.speed.prediction import device_of, model_shape
from ado_actuators.sfttrainer.plan.speed.step_time import (
    FITTED,
    REFERENCE,
    Device,
    Fitted,
    ModelShape,
    step_time,
)

DATA = Path(__file__).parent / "data" / "fms_acceleration_a100_80gb.csv"
L40_DATA = Path(__file__).parent / "data" / "fms_acceleration_l40.csv"
"""fms-acceleration's L40 runs (8af8fa7, May 2024): nothing is fitted on them; they test the
step time on a device the constants never saw (benchmarks/throughput_validation.py scores them
with the other public runs)."""
PACKED_TABLES = ("a100_80gb", "a100_80gb_granite", "a100_80gb_liger")
FAMILIES = {
    "santacoder": "GPTBigCode",
    "mixtral": "Mixtral",
    "mistral": "Mistral",
    "llama": "Llama",
    "powerlm": "Granite",
}
BNB = {"quant_method": "bitsandbytes", "load_in_4bit": True}
START = Fitted(
    matmul_efficiency=0.5,
    elementwise_bytes=10.0,
    fast_kernels_elementwise=0.5,
    adapter_bytes=10.0,
    fused_lora_adapters=0.5,
    dequant_bytes_gptq=10.0,
    dequant_bytes_bnb=10.0,
    fsdp_unit_latency_s=1e-3,
    host_exposed=0.5,
)
"""Where every fit starts: round values, none taken from a fit, so no family's fit starts from
constants its own runs shaped."""


SHARES = ("matmul_efficiency", "fast_kernels_elementwise", "fused_lora_adapters", "host_exposed")
"""The constants that are shares of something, bounded by 1."""


METHOD_WORDS = {"none": "full"}
"""The method as the tables and the benchmark pages name it: full fine-tuning trains every weight."""


@dataclasses.dataclass(frozen=True)
class Observed:
    model: str
    family: str
    framework: str
    shape: ModelShape
    configuration: TrainingConfiguration
    tokens_per_second: float
    device: Device = REFERENCE

    def label(self) -> str:
        method = self.configuration.tuning.method
        return (
            f"{self.model.split('/')[-1]} {METHOD_WORDS.get(method, method)} "
            f"x{self.configuration.parallelism.gpus} "
            f"bs{self.configuration.batch.per_device_batch} {self.framework}"
        )


def family(model: str) -> str:
    return next(v for k, v in FAMILIES.items() if k in model.lower())


def _observed(
    row: dict[str, str], configs: dict[str, dict], device: Device = REFERENCE
) -> Observed:
    model, framework = row["model_name_or_path"], row["framework_config"]
    config = dict(configs[model])
    if "bnb" in framework:
        config["quantization_config"] = BNB
    foak = "foak" in framework  # fms-acceleration's fused ops and kernels: all three
    tuning = Tuning(
        method="lora" if row["peft_method"] == "lora" else "none",
        lora_r=int(float(row["r"] or 8)),
        target_modules=tuple(row["target_modules"].split()),
        fused_lora=foak and "peft" in framework,
    )
    configuration = TrainingConfiguration(
        tuning=tuning,
        parallelism=Parallelism(gpus=int(row["num_gpus"])),
        batch=Batch(
            per_device_batch=int(row["per_device_train_batch_size"]),
            sample_tokens=min(4096, config.get("n_positions") or 4096),
        ),
        precision=Precision(torch_dtype=row["torch_dtype"]),
        kernels=Kernels(
            flash_attention=True,
            attention="flash_attention_2",
            fast_kernels=FastKernels(foak, foak, foak),
            checkpointing="reentrant",
            # transformers 4.4x then: the model's forward checkpoints each layer's call
            checkpointed_by_model=True,
        ),
    )
    return Observed(
        model=model,
        family=family(model),
        framework=framework,
        shape=model_shape(config, tuning, "Vanilla"),
        configuration=configuration,
        tokens_per_second=float(row["train_tokens_per_second"]),
        device=device,
    )


def load(path: Path = DATA) -> list[Observed]:
    configs = load_configs()
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return [
        _observed(row, configs)
        for row in csv.DictReader(lines)
        if row["table"] in PACKED_TABLES
        and row["train_tokens_per_second"].strip()
        and row["model_name_or_path"] in configs
    ]


def load_l40(path: Path = L40_DATA) -> list[Observed]:
    configs, device = load_configs(), device_of("NVIDIA-L40")
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return [
        _observed({**row, "torch_dtype": "float16"}, configs, device)
        for row in csv.DictReader(lines)
        if row["model_name_or_path"] in configs
    ]


def predicted(observed: Observed, fitted: Fitted) -> float:
    step = step_time(observed.shape, observed.configuration, observed.device, fitted)
    return step.tokens_per_second_per_gpu


def _fit(runs: list[Observed], held: dict[str, float] | None = None) -> Fitted:
    """Least squares of log(predicted / measured) over `runs`, every constant positive and the
    shares at most 1; `held` constants are not fitted."""
    held = held or {}
    names = [f.name for f in dataclasses.fields(Fitted) if f.name not in held]
    start = [getattr(START, n) for n in names]
    upper = [1.0 if n in SHARES else math.inf for n in names]

    def residuals(vector: np.ndarray) -> list[float]:
        fitted = Fitted(**dict(zip(names, vector, strict=True)), **held)
        return [math.log(predicted(o, fitted) / o.tokens_per_second) for o in runs]

    found = least_squares(residuals, start, bounds=([0.0] * len(names), upper))
    return Fitted(**{n: float(f"{v:.3g}") for n, v in zip(names, found.x, strict=True)}, **held)


def fit(runs: list[Observed]) -> Fitted:
    """The constants, in two steps. First the host's exposed share, on the runs without
    bitsandbytes: its 4-bit linears dispatch host ops the count does not hold (the quantized
    matmul's Python side), and a share fitted beside them takes those up, running to its bound
    of 1. Then every other constant on all the runs, the share held."""
    plain = [o for o in runs if o.shape.quantization != "bnb"]
    share = _fit(plain).host_exposed
    return _fit(runs, {"host_exposed": share})


def errors(runs: list[Observed], fitted: Fitted) -> list[float]:
    return [predicted(o, fitted) / o.tokens_per_second - 1 for o in runs]


def figures(pairs: list[tuple[Observed, float]]) -> tuple[float, float, float]:
    """Median and 90th percentile |error| of tokens/s per GPU, and Spearman over the runs."""
    absolute = [abs(e) for _, e in pairs]
    measured = [o.tokens_per_second for o, _ in pairs]
    guessed = [o.tokens_per_second * (1 + e) for o, e in pairs]
    return (
        statistics.median(absolute),
        float(np.percentile(absolute, 90)),
        float(spearmanr(guessed, measured).statistic),
    )


def summary(label: str, pairs: list[tuple[Observed, float]]) -> None:
    median, p90, spearman = figures(pairs)
    print(
        f"{label}: {len(pairs)} runs, median |error| {median:.1%}, "
        f"90th percentile {p90:.1%}, Spearman {spearman:.3f}"
    )


def leave_one_family_out(runs: list[Observed]) -> list[tuple[Observed, float]]:
    pairs = []
    for left_out in sorted({o.family for o in runs}):
        fitted = fit([o for o in runs if o.family != left_out])
        judged = [o for o in runs if o.family == left_out]
        found = list(zip(judged, errors(judged, fitted), strict=True))
        median = statistics.median(abs(e) for _, e in found)
        print(f"  {left_out:<11} {len(judged):>3} runs  median |error| {median:.1%}  ({fitted})")
        pairs += found
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every run's prediction")
    args = parser.parse_args(argv)
    runs = load()
    fitted = fit(runs)
    print(f"fitted on all {len(runs)} runs: {fitted}")
    print(f"shipped (plan/speed/step_time.FITTED): {FITTED}")
    summary("all runs, the shipped constants", list(zip(runs, errors(runs, FITTED), strict=True)))
    print("leave one family out (each family predicted with the constants fitted on the others):")
    pairs = leave_one_family_out(runs)
    summary("leave one family out", pairs)
    median, p90, spearman = figures(pairs)
    met = median <= 0.035 and p90 <= 0.12 and spearman >= 0.97
    print(
        "goals (median <= 3.5 %, 90th percentile <= 12 %, Spearman >= 0.97): "
        + ("met" if met else "NOT met")
    )
    summary(
        "leave one family out, the actuator's methods only (no bitsandbytes)",
        [(o, e) for o, e in pairs if o.shape.quantization != "bnb"],
    )
    held_out = load_l40()
    summary(
        "another device, nothing fitted on it (L40, priced by what it achieves)",
        list(zip(held_out, errors(held_out, FITTED), strict=True)),
    )
    worst = sorted(pairs, key=lambda p: -abs(p[1]))
    print("largest errors (leave one family out):")
    for observed, error in worst[: len(worst) if args.rows else 10]:
        print(f"  {error:+7.1%}  {observed.tokens_per_second:8.0f} tokens/s  {observed.label()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
