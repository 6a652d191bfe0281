"""The predicted step time (plan/speed/step_time.py) on public throughput it was not fitted on:
other frameworks, devices and clusters (benchmarks/data/public_throughput.yaml, each run's source
cited there), fms-acceleration's L40 table (benchmarks/data/fms_acceleration_l40.csv) and
llm-foundry's MPT pretraining tables on A100 and H100 (benchmarks/data/llm_foundry_throughput.csv;
MPT's shape counted by transformers on the meta device, as the preview counts it) and PEFT's
method comparison on one L40S (benchmarks/data/peft_method_comparison.csv: short micro-batches,
where the host's time is a third of the step) and Qwen's profile of its own fine-tuning on A100s
(benchmarks/data/qwen_finetune_profile.csv: one sample of 256-8,192 tokens a micro-batch). The
constants are the shipped ones (FITTED, fitted on fms-acceleration's A100 table only); nothing
is fitted here. Prints the error per regime (device, one node or several, sequence length) and
every run with --rows. The regimes' figures are what plan/speed/validated.py states on each
preview row.

    python benchmarks/throughput_validation.py           # the figures per regime
    python benchmarks/throughput_validation.py --rows    # and every run
    python benchmarks/throughput_validation.py --attention  # the error against the attention's
                                                            # share, per source and device
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.stats import spearmanr
from throughput_prediction import Observed, errors, load_l40

from ado_actuators.sfttrainer.plan.model.architecture import PROMPT_TUNING_VIRTUAL_TOKENS
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Checkpointing,
    FlashBuild,
    Kernels,
    Parallelism,
    Precision,
    TrainingConfiguration,
    Tuning,
)
from ado_actuators.sfttrainer.plan.speed.devices import DEFAULT_NETWORK_GBPS, device_named
from ado_actuators.sfttrainer.plan.speed.prediction import model_shape
from ado_actuators.sfttrainer.plan.speed.step_time import FITTED, step_time
from ado_actuators.sfttrainer.plan.speed.validated import regime

DATA = Path(__file__).parent / "data" / "public_throughput.yaml"
FOUNDRY_DATA = Path(__file__).parent / "data" / "llm_foundry_throughput.csv"
PEFT_DATA = Path(__file__).parent / "data" / "peft_method_comparison.csv"
LLAMA_32_3B = {
    # huggingface.co/meta-llama/Llama-3.2-3B config.json (the catalogue's llama3.2-3b)
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 28,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "tie_word_embeddings": True,
}
PEFT_SAMPLE_TOKENS = 210
"""PEFT's runs' mean sample: 4,198,051 tokens over 20,000 samples (the data file's header); the
length-sorted buckets leave little padding beside it."""
MPT_SIZES = {
    # d_model, n_heads, n_layers of llm-foundry's scripts/train/yamls/pretrain/mpt-*.yaml at
    # 495218376830947dce625efabc4d86be7c47cc45 (expansion_ratio 4, vocabulary 50,368 in all)
    "125m": (768, 12, 12),
    "350m": (1024, 16, 24),
    "760m": (1536, 12, 24),
    "1b": (2048, 16, 24),
    "3b": (2560, 20, 32),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 56, 48),
    "70b": (8192, 64, 80),
}
QWEN_DATA = Path(__file__).parent / "data" / "qwen_finetune_profile.csv"
QWEN_SIZES = {
    # hidden, MLP width, heads, layers, vocabulary of huggingface.co/Qwen/Qwen-<size>/blob/main/
    # config.json as abhibambhaniya/GenZ-LLM-Analyzer's GenZ/Models/Model_sets/alibaba.py
    # (13ebfb842b4248bf0252d089a904181e33ead320) quotes them; the MLP width is config.json's
    # intermediate_size halved (Qwen's modeling_qwen.py: w1 and w2 are intermediate_size // 2
    # wide). Qwen's attention has no grouped keys: every head its own key and value.
    "Qwen-1.8B": (2048, 5504, 16, 24, 151936),
    "Qwen-7B": (4096, 11008, 32, 32, 151936),
    "Qwen-14B": (5120, 13696, 40, 40, 152064),
    "Qwen-72B": (8192, 24576, 64, 80, 152064),
}
QWEN_PEFT, QWEN_GPTQ, QWEN_DEEPSPEED = (
    "qwen lora (PEFT)",
    "qwen qlora (auto-gptq)",
    "qwen (DeepSpeed ZeRO 3)",
)
"""How each of Qwen's runs trained, as the rows name it: LoRA through PEFT on one GPU, Q-LoRA
through auto-gptq's kernels, and full fine-tuning or several GPUs under DeepSpeed ZeRO 3."""
QWEN_LORA_TARGETS = ("q_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Qwen's five adapted linears a layer (c_attn, the attention's c_proj, w1, w2, the MLP's
c_proj) by the names of Qwen2's layer, the same layer with its query, key and value unfused:
c_attn's one adapter stands as q_proj's (the host dispatches one adapter's ops, as for c_attn;
its bytes are counted at the query's output width, a third of c_attn's)."""
FOUNDRY_NETWORK_GBPS = {"NVIDIA-A100-SXM4-80GB": 200.0, "NVIDIA-A100-SXM4-40GB": 200.0}
"""The A100 tables' '1600 Gbps node-node interconnect (RoCE)' per node; the H100 table states
none (the default)."""
FOUNDRY_FLASH_BUILD: FlashBuild = "triton"
"""The attention llm-foundry's tables ran: scripts/train/benchmarking/submit_benchmarks.py set
every run's attn_impl from `--attn_impl`, whose default was 'triton' from the A100 tables
(300cc5c58, 2023-05-03) through the H100 table (b2a43a147, 2023-10-19) until 7f0fdae66
(2024-03-26), with setup.py's `gpu` extra installing triton-pre-mlir beside flash-attn 1.0.x:
flash attention's Triton port, not flash-attn 2."""
GPUS_PER_NODE = 8
RECOMPUTING = {"full", "yes", "selective", "selective layer"}
"""Checkpointing as the sources name it that recomputes every layer here (the data file says
why)."""


def _kernels(recomputing: bool, build: FlashBuild = "flash-attn") -> Kernels:
    """Flash attention, as every source runs it (flash-attn 2's kernels unless `build` says
    otherwise), and full recompute where a source says it recomputes. The step time prices any
    recompute alike; torchtitan's and llm-foundry's checkpoint wrappers are non-reentrant."""
    checkpointing: Checkpointing = "non_reentrant" if recomputing else "none"
    return Kernels(
        flash_attention=True,
        attention="flash_attention_2",
        checkpointing=checkpointing,
        flash_build=build,
    )


def _observed(row: list[Any], models: dict[str, dict[str, Any]]) -> Observed:
    source, gpu, gpus, nodes, network, model, length, batch, checkpointing, measured = row
    config = models[model]["config"]
    configuration = TrainingConfiguration(  # full fine-tuning in bfloat16: the parts' defaults
        # one micro-batch a step, so when the gradients sync does not matter
        parallelism=Parallelism(gpus=int(gpus), nodes=int(nodes)),
        batch=Batch(per_device_batch=int(batch), sample_tokens=int(length)),
        kernels=_kernels(str(checkpointing) in RECOMPUTING),
    )
    return Observed(
        model=model,
        family=source,
        framework=f"{source} ({checkpointing})",
        shape=model_shape(config, configuration.tuning, "Vanilla"),
        configuration=configuration,
        tokens_per_second=float(measured),
        device=device_named(gpu, float(network or DEFAULT_NETWORK_GBPS)),
    )


def load(path: Path = DATA) -> list[Observed]:
    raw = yaml.safe_load(path.read_text())
    return [_observed(row, raw["models"]) for row in raw["runs"]]


def _foundry(row: dict[str, str]) -> Observed:
    d_model, heads, layers = MPT_SIZES[row["model"]]
    length, gpus = int(row["seq_len"]), int(row["gpus"])
    config = {
        "model_type": "mpt",
        "d_model": d_model,
        "n_heads": heads,
        "n_layers": layers,
        "expansion_ratio": 4,
        "max_seq_len": length,
        "vocab_size": 50368,
    }
    configuration = TrainingConfiguration(
        # Composer syncs FSDP's gradients after every micro-batch (no no_sync: it applies its
        # sync strategy to DDP models only)
        parallelism=Parallelism(
            gpus=gpus, nodes=max(1, gpus // GPUS_PER_NODE), gradient_sync="each"
        ),
        batch=Batch(
            per_device_batch=int(row["micro_batch"]),
            sample_tokens=length,
            gradient_accumulation_steps=int(row["grad_accum"]),
        ),
        kernels=_kernels(row["activation_checkpointing"] == "True", FOUNDRY_FLASH_BUILD),
    )
    network = FOUNDRY_NETWORK_GBPS.get(row["gpu"], DEFAULT_NETWORK_GBPS)
    return Observed(
        model=f"MPT-{row['model']}",
        family="llm_foundry",
        framework=f"llm_foundry ({row['precision']}, checkpointing {row['activation_checkpointing']})",
        shape=model_shape(config, Tuning(), "Vanilla"),
        configuration=configuration,
        tokens_per_second=float(row["tokens_per_second_per_gpu"]),
        device=device_named(row["gpu"], network),
    )


def load_foundry(path: Path = FOUNDRY_DATA) -> list[Observed]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return [_foundry(row) for row in csv.DictReader(lines)]


def _peft(row: dict[str, str]) -> Observed:
    """A PEFT run as the entity would state it. Prompt tuning's virtual tokens lengthen every
    sample the model runs, which its figure does not count: the entity's prompt tuning prepends
    PROMPT_TUNING_VIRTUAL_TOKENS of PEFT's 200, the sample carries the rest, and the measured
    rate is scaled to the sample the prediction counts."""
    virtual = int(row["virtual_tokens"])
    if virtual:
        virtual -= PROMPT_TUNING_VIRTUAL_TOKENS
    tuning = Tuning(
        method=row["method"],  # type: ignore[arg-type]
        lora_r=int(row["r"] or 8),
        lora_alpha=2 * int(row["r"] or 8),
        target_modules=tuple(row["target_modules"].split()),
    )
    length = PEFT_SAMPLE_TOKENS + virtual
    configuration = TrainingConfiguration(
        tuning=tuning,
        batch=Batch(per_device_batch=4, model_max_length=length, sample_tokens=length),
        kernels=Kernels(attention="sdpa"),
    )
    return Observed(
        model="Llama-3.2-3B",
        family="peft",
        framework=f"peft {row['experiment'].split('--')[0]} (torch {row['torch'].split('+')[0]})",
        shape=model_shape(LLAMA_32_3B, tuning, "Vanilla"),
        configuration=configuration,
        tokens_per_second=float(row["tokens_per_second"]) * length / PEFT_SAMPLE_TOKENS,
        device=device_named("NVIDIA-L40S"),
    )


def load_peft(path: Path = PEFT_DATA) -> list[Observed]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return [_peft(row) for row in csv.DictReader(lines)]


def _qwen(row: dict[str, str]) -> Observed:
    """A run of Qwen's profile: one sample of exactly the length a micro-batch, 8 a step."""
    hidden, width, heads, layers, vocabulary = QWEN_SIZES[row["model"]]
    config: dict[str, Any] = {
        "model_type": "qwen2",  # Qwen's layer: RMSNorm, rotary, biased qkv, SwiGLU
        "vocab_size": vocabulary,
        "hidden_size": hidden,
        "intermediate_size": width,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "tie_word_embeddings": False,
    }
    method = row["method"]
    if method == "qlora":  # the Int4 chat models: GPTQ, fp16
        config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    lora = method != "full"
    tuning = Tuning(
        method="lora" if lora else "none",
        lora_r=64,
        lora_alpha=16,
        target_modules=QWEN_LORA_TARGETS if lora else (),
    )
    length = int(row["sequence_length"])
    configuration = TrainingConfiguration(
        tuning=tuning,
        # DeepSpeed's ZeRO reduces the gradients into their partitions after every micro-batch
        parallelism=Parallelism(
            gpus=int(row["gpus_per_node"]), nodes=int(row["nodes"]), gradient_sync="each"
        ),
        batch=Batch(
            per_device_batch=1,
            model_max_length=length,
            sample_tokens=length,
            gradient_accumulation_steps=8,
        ),
        precision=Precision(torch_dtype="float16" if method == "qlora" else "bfloat16"),
        kernels=Kernels(
            flash_attention=True, attention="flash_attention_2", checkpointing="reentrant"
        ),
    )
    runner = QWEN_GPTQ if method == "qlora" else QWEN_PEFT
    if method == "full" or configuration.parallelism.gpus > 1:
        runner = QWEN_DEEPSPEED
    return Observed(
        model=row["model"],
        family="qwen",
        framework=runner,
        shape=model_shape(config, tuning, "Vanilla"),
        configuration=configuration,
        tokens_per_second=8 * length / float(row["seconds_per_iteration"]),
        device=device_named("NVIDIA-A100-SXM4-80GB"),
    )


def load_qwen(path: Path = QWEN_DATA) -> list[Observed]:
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return [_qwen(row) for row in csv.DictReader(lines)]


def load_all() -> list[Observed]:
    """Every run the validation scores: other frameworks', the L40 table, llm-foundry's, PEFT's,
    Qwen's."""
    return load() + load_l40() + load_foundry() + load_peft() + load_qwen()


QWEN_AS_THE_ACTUATOR = QWEN_PEFT
"""Qwen's runs that train as the actuator does: LoRA through PEFT on one GPU. Its others go
through what the actuator never runs (auto-gptq's CUDA kernels, DeepSpeed ZeRO 3's parameter
hooks), whose host work the count does not hold: left out of the regimes' figures, reported as
groups."""


def in_regimes(observed: Observed) -> bool:
    """Whether a run counts in the regimes' figures: every source's, but Qwen's other runners'."""
    return observed.family != "qwen" or observed.framework == QWEN_AS_THE_ACTUATOR


def by_regime(pairs: list[tuple[Observed, float]]) -> dict[str, list[float]]:
    """Each run's error under every regime it belongs to (plan/speed/validated.regime), of the
    runs `in_regimes`."""
    found: dict[str, list[float]] = {}
    for observed, error in pairs:
        if not in_regimes(observed):
            continue
        for name in regime(observed.configuration, observed.device.name):
            found.setdefault(name, []).append(error)
    return found


def report(pairs: list[tuple[Observed, float]], show: Callable[[str], None] = print) -> None:
    for name, found in sorted(by_regime(pairs).items()):
        absolute = sorted(abs(e) for e in found)
        show(
            f"  {name:<28} {len(found):>3} runs  median |error| {statistics.median(absolute):6.1%}"
            f"  median error {statistics.median(found):+6.1%}  worst {absolute[-1]:6.1%}"
        )


GROUPS: dict[str, Callable[[Observed], bool]] = {
    "one node, up to 8k tokens": lambda o: (
        o.family != "qwen"
        and o.configuration.parallelism.nodes == 1
        and o.configuration.batch.sample_tokens <= 8192
    ),
    "H100": lambda o: "H100" in o.device.name,
    "L40": lambda o: o.device.name == "NVIDIA-L40",
    "one GPU, short micro-batches (PEFT)": lambda o: o.family == "peft",
    "several nodes": lambda o: o.configuration.parallelism.nodes > 1,
    "16k tokens and longer": lambda o: o.configuration.batch.sample_tokens >= 16384,
    "Qwen LoRA, one GPU, one sample a micro-batch": lambda o: o.framework == QWEN_AS_THE_ACTUATOR,
    "the same at 256-1,024 tokens": lambda o: (
        o.framework == QWEN_AS_THE_ACTUATOR and o.configuration.batch.sample_tokens <= 1024
    ),
    "Qwen Q-LoRA (auto-gptq)": lambda o: o.framework == QWEN_GPTQ,
    "Qwen under DeepSpeed ZeRO 3": lambda o: o.framework == QWEN_DEEPSPEED,
}
"""The groups issue 43 sets its goals on (its first without Qwen's runs, which came later), and
Qwen's profile by how it ran."""


def groups(pairs: list[tuple[Observed, float]], show: Callable[[str], None] = print) -> None:
    """Median and 90th percentile |error| per group, and Spearman over every run."""
    for name, member in GROUPS.items():
        absolute = [abs(e) for o, e in pairs if member(o)]
        show(
            f"  {name:<28} {len(absolute):>3} runs  median |error| "
            f"{statistics.median(absolute):6.1%}  90th percentile "
            f"{float(np.percentile(absolute, 90)):6.1%}"
        )
    measured = [o.tokens_per_second for o, _ in pairs]
    guessed = [o.tokens_per_second * (1 + e) for o, e in pairs]
    show(f"  Spearman over all {len(pairs)} runs: {spearmanr(guessed, measured).statistic:.3f}")


def attention_slopes(
    pairs: list[tuple[Observed, float]], show: Callable[[str], None] = print
) -> None:
    """Per framework and device with 3 runs or more: the log error (measured over predicted)
    against the attention's share of the predicted step, by least squares, and the spread
    about the line against the spread about the mean (what the calibration's attention kernel
    factor takes up; space/calibration.py's ATTENTION_KERNEL_SD)."""
    by: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for observed, error in pairs:
        step = step_time(observed.shape, observed.configuration, observed.device, FITTED)
        share = step.attention_share
        key = (observed.framework, observed.device.name)
        by.setdefault(key, []).append((share, -float(np.log1p(error))))
    for (framework, device), found in sorted(by.items()):
        shares, ys = [x for x, _ in found], [y for _, y in found]
        if len(found) < 3 or statistics.pstdev(shares) < 0.02:
            continue
        slope, intercept = statistics.linear_regression(shares, ys)
        left = statistics.pstdev([y - intercept - slope * x for x, y in found])
        show(
            f"  {framework}, {device}: {len(found)} runs, shares {min(shares):.2f}-"
            f"{max(shares):.2f}, slope {slope:+.2f}, spread {left:.3f} about the line, "
            f"{statistics.pstdev(ys):.3f} about the mean"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every run's prediction")
    parser.add_argument(
        "--attention", action="store_true", help="the error against the attention's share"
    )
    args = parser.parse_args(argv)
    public, l40, foundry, peft, qwen = load(), load_l40(), load_foundry(), load_peft(), load_qwen()
    runs = public + l40 + foundry + peft + qwen  # load_all's, each source read once
    pairs = list(zip(runs, errors(runs, FITTED), strict=True))
    print(f"the shipped constants: {FITTED}")
    print(
        f"{len(public)} public runs of other frameworks, {len(l40)} fms-acceleration L40 runs, "
        f"{len(foundry)} llm-foundry MPT runs, {len(peft)} PEFT runs on one L40S, {len(qwen)} "
        "runs of Qwen's profile on A100s (its auto-gptq and DeepSpeed runs in groups only):"
    )
    report(pairs)
    print("as issue 43 groups them:")
    groups(pairs)
    if args.attention:
        print("the log error against the attention's share of the step:")
        attention_slopes(pairs)
    if args.rows:
        for observed, error in pairs:
            configuration = observed.configuration
            print(
                f"  {error:+7.1%}  {observed.tokens_per_second:8.0f} tokens/s  "
                f"{observed.label()} {observed.device.name} {configuration.parallelism.nodes} node(s) "
                f"{configuration.batch.sample_tokens} tokens"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
