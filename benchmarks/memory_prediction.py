"""The predicted peak (plan/memory/peak.py) against fms-acceleration's published A100-80GB runs.

How each run was trained, per table (fms-acceleration at the data's commit, cited in
benchmarks/data/fms_acceleration_a100_80gb.csv): yahma/alpaca-cleaned packed into full
sequences of max_seq_length 4096 (santacoder: 2048, its tokenizer's limit), flash attention,
gradient checkpointing (transformers' default, reentrant: defaults.yaml sets no
gradient_checkpointing_kwargs), FSDP for more than one GPU (accelerate.yaml), AdamW, one
micro-batch per step (scripts/benchmarks/scenarios*.yaml, defaults.yaml, benchmark.py);
transformers 4.48.1 for `a100_80gb`, 4.45.2 for the granite and liger tables
(scripts/benchmarks/refs/requirements*.txt). The MoE table trained unpacked
batches padded to their longest sample (about 280 tokens at the first batch, the longest one
unrecorded) and recorded no torch peak: its runs are judged for OOM only.
"""

from __future__ import annotations

import dataclasses
import statistics

from memory_bound import GPU_MODEL, Run, bound_of, configuration_of, load_configs, load_runs

from ado_actuators.sfttrainer.contract.units import GIB, MIB
from ado_actuators.sfttrainer.metrics.gpu_memory import (
    CUDA_CONTEXT_ESTIMATE_BYTES,
    allocatable_bytes,
)
from ado_actuators.sfttrainer.plan.memory.logits import loss_code
from ado_actuators.sfttrainer.plan.memory.peak import (
    ALLOCATOR_HEADROOM,
    Dimensions,
    PeakPrediction,
    ReleaseBehaviour,
    predict_peak,
)
from ado_actuators.sfttrainer.plan.model.architecture import count_parameters
from ado_actuators.sfttrainer.plan.model.releases import checkpointing
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    FastKernels,
    Kernels,
    TrainingConfiguration,
)

TRANSFORMERS = {
    "a100_80gb": "4.48.1",
    "a100_80gb_granite": "4.45.2",
    "a100_80gb_liger": "4.45.2",
    "a100_80gb_moe": "4.52.4",
}
PACKED_LENGTH = 4096
MOE_PADDED_LENGTH = 280  # the first batch's; the longest batch's is not recorded


def sequence_length(run: Run, config: dict) -> int:
    if run.table == "a100_80gb_moe":
        return MOE_PADDED_LENGTH
    return min(PACKED_LENGTH, config.get("n_positions") or PACKED_LENGTH)


def fused_loss(framework: str) -> str | None:
    if "liger" in framework:
        return "chunked"  # LigerFusedLinearCrossEntropy: the logits are never whole
    if "foak" in framework:
        return "in_place"  # the unsloth cross-entropy kernel writes its gradient in place
    return None


def fast_rms(framework: str) -> bool:
    # the -liger sample configurations misspell fast_rsm_layernorm: the kernel stays off there
    return "foak" in framework and not ("liger" in framework and "peft" in framework)


def configuration(run: Run, config: dict) -> TrainingConfiguration:
    """How `run` trained, as the prediction reads it: its micro-batch, padded length and
    accumulation, flash attention and fused norms; its block weights at the model's dtype (the
    tables' fit reads the quantized runs' FSDP upcast as unquantized ones')."""
    plain = configuration_of(run, config, quantized=False)
    return dataclasses.replace(
        plain,
        batch=Batch(
            per_device_batch=run.batch,
            model_max_length=sequence_length(run, config),
            gradient_accumulation_steps=run.accumulation,
        ),
        kernels=Kernels(
            attention="flash_attention_2",
            checkpointing="reentrant",  # transformers' default: no gradient_checkpointing_kwargs
            fast_kernels=FastKernels(fast_rms_layernorm=fast_rms(run.framework)),
        ),
    )


def behaviour(run: Run, config: dict) -> ReleaseBehaviour:
    """What the release the run's table pins did with it."""
    dims = Dimensions.of(config)
    return ReleaseBehaviour(
        checkpointed_by_model=checkpointing(TRANSFORMERS[run.table], dims.model_type) == "model",
        loss=loss_code(TRANSFORMERS[run.table], dims.model_type),
        fused_loss=fused_loss(run.framework),
        fsdp_upcast=run.mixed_precision and run.gpus > 1,
    )


@dataclasses.dataclass(frozen=True)
class Case:
    """A run with everything the prediction reads, computed once (fitting predicts each run
    hundreds of times)."""

    run: Run
    family: str
    inputs: tuple

    def predict(self) -> PeakPrediction:
        return predict_peak(*self.inputs)


def cases(runs: list[Run] | None = None) -> list[Case]:
    configs = load_configs()
    found = []
    for run in runs if runs is not None else load_runs():
        config = configs.get(run.model)
        if config is None:
            continue
        dims = Dimensions.of(config)
        inputs = (
            count_parameters(config),
            dims,
            configuration(run, config),
            bound_of(run, config),
            behaviour(run, config),
            run.targets if run.peft == "lora" else (),
        )
        found.append(Case(run, dims.model_type, inputs))
    return found


@dataclasses.dataclass(frozen=True)
class Judged:
    run: Run
    family: str
    predicted: float  # bytes, torch's allocator peak

    @property
    def error(self) -> float | None:
        if not (self.run.ran and self.run.torch_peak):
            return None
        return self.predicted / self.run.torch_peak - 1


def judge(found: list[Case]) -> list[Judged]:
    return [Judged(c.run, c.family, c.predict().total) for c in found]


def median_error(rows: list[Judged]) -> float:
    errors = [abs(j.error) for j in rows if j.error is not None]
    return statistics.median(errors) if errors else float("nan")


def device_need(judged: Judged, headroom: float = ALLOCATOR_HEADROOM) -> float:
    """What the product compares with the device (plan/memory/verdict.py): the allocated peak
    and the allocator's headroom over it (the device's allocatable memory already leaves the
    CUDA context out)."""
    return judged.predicted * (1 + headroom)


def reserved_over_allocated(run: Run) -> float | None:
    """What a run's allocator held beyond its allocated peak, as a share of it: nvidia-smi's
    peak less the CUDA context, over torch's peak, less 1 (cached blocks, fragmentation, the
    workspaces cuBLAS takes through the allocator)."""
    if not (run.ran and run.torch_peak and run.nvidia_mib):
        return None
    return (run.nvidia_mib * MIB - CUDA_CONTEXT_ESTIMATE_BYTES) / run.torch_peak - 1


def fit_headroom(rows: list[Judged]) -> float:
    """The one constant fitted on these runs, from what the GPUs show and a CPU cannot: the
    least any run that ran reserved beyond its allocated peak (reserved_over_allocated), so the
    OOM call asks no configuration for more than a run was seen to need. Not fitted on the OOM
    calls themselves: their best headroom depends on which family's runs sit nearest the
    device's limit (6.4 % for Llama-3-8B, 9.3 % for a Mistral-7B OOM)."""
    found = [reserved_over_allocated(j.run) for j in rows]
    return min(v for v in found if v is not None)


def leave_one_family_out(rows: list[Judged]) -> dict[str, tuple[float, list[Judged]]]:
    """Per model family: the headroom fitted on every other family, with this family's rows
    (the prediction itself has no constant fitted on any run)."""
    families = sorted({j.family for j in rows})
    return {
        family: (
            fit_headroom([j for j in rows if j.family != family]),
            [j for j in rows if j.family == family],
        )
        for family in families
    }


def summary(rows: list[Judged], headroom: float = ALLOCATOR_HEADROOM) -> dict[str, float]:
    device = allocatable_bytes(GPU_MODEL)
    ran = [j for j in rows if j.run.ran]
    oom = [j for j in rows if not j.run.ran]
    return {
        "runs_with_torch_peak": sum(j.error is not None for j in rows),
        "median_abs_error": median_error(rows),
        "out_of_memory": len(oom),
        "out_of_memory_predicted": sum(device_need(j, headroom) > device for j in oom),
        "ran_predicted_out_of_memory": sum(device_need(j, headroom) > device for j in ran),
    }


def left_out_summary(rows: list[Judged], refit: bool = True) -> dict[str, float]:
    """Each family judged with the headroom fitted on the others (`refit`) or held at the
    product's ALLOCATOR_HEADROOM, pooled."""
    pooled = dict.fromkeys(
        ("runs_with_torch_peak", "out_of_memory", "out_of_memory_predicted"), 0
    ) | {"ran_predicted_out_of_memory": 0}
    for headroom, own in leave_one_family_out(rows).values():
        for key, value in summary(own, headroom if refit else ALLOCATOR_HEADROOM).items():
            if key != "median_abs_error":
                pooled[key] += value
    return {**pooled, "median_abs_error": median_error(rows)}


def report(rows: list[Judged]) -> str:
    device = allocatable_bytes(GPU_MODEL)
    lines = [
        f"{'table':6} {'configuration':<52} {'pred':>6} {'torch':>6} {'nvidia':>6} {'error':>6}  outcome"
    ]
    for j in rows:
        run = j.run
        torch_peak = f"{run.torch_peak / GIB:6.2f}" if run.torch_peak else "     -"
        nvidia = f"{run.nvidia_mib * MIB / GIB:6.2f}" if run.nvidia_mib else "     -"
        error = f"{j.error:+6.1%}" if j.error is not None else "      "
        if run.ran:
            outcome = "ran, PREDICTED OOM" if device_need(j) > device else "ran"
        else:
            outcome = "OOM, predicted" if device_need(j) > device else "OOM, not predicted"
        lines.append(
            f"{run.table[9:15] or '80gb':6} {run.label()[:52]:<52} {j.predicted / GIB:6.2f} "
            f"{torch_peak} {nvidia} {error}  {outcome}"
        )
    return "\n".join(lines)


def main() -> dict[str, float]:
    rows = judge(cases())
    print(report(rows))
    print(
        "\nGiB per device; pred = the predicted peak (plan/memory/peak.py: every tensor counted, "
        "no constant fitted to runs), torch = rank 0's max_memory_allocated, nvidia = "
        "nvidia-smi's peak; error against torch; OOM predicted when pred x "
        f"{1 + ALLOCATOR_HEADROOM:g} exceeds what the device can allocate "
        f"({allocatable_bytes(GPU_MODEL) / GIB:.2f} GiB, metrics/gpu_memory.yaml)."
    )
    found = summary(rows)
    print("prediction: " + _line(found))
    print(
        "leave one family out (the prediction fits nothing on runs; the headroom held at "
        f"{ALLOCATOR_HEADROOM:g}): " + _line(left_out_summary(rows, refit=False))
    )
    for family, (_, own) in leave_one_family_out(rows).items():
        judged_runs = sum(j.error is not None for j in own)
        print(f"  {family:<12} median |error| {median_error(own):.1%} over {judged_runs} runs")
    print(
        f"the allocator headroom, the one constant fitted here (ALLOCATOR_HEADROOM "
        f"{ALLOCATOR_HEADROOM:g}): the least any run that ran reserved beyond its allocated "
        f"peak (nvidia-smi less the CUDA context, over torch's), on every run: "
        f"{fit_headroom(rows):.4f}; refit on the other families:"
    )
    for family, (headroom, own) in leave_one_family_out(rows).items():
        print(f"  without {family:<12} {headroom:.4f}: " + _line(summary(own, headroom)))
    print("  pooled: " + _line(left_out_summary(rows)))
    print("without any headroom: " + _line(summary(rows, 0.0)))
    return found


def _line(values: dict[str, float]) -> str:
    return ", ".join(
        f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in values.items()
    )


if __name__ == "__main__":
    main()
