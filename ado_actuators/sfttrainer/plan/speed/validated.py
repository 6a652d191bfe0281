"""The error each regime of the predicted step time was validated at, as data a preview row
reads: the regimes a configuration belongs to (device, one node or several, sequence length) and, for each,
the median |error| benchmarks/throughput_validation.py measured on public runs nothing was fitted
on, or that the regime was not validated. docs/benchmarks/throughput.md reports the figures with
their date and commit.
"""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.plan.model.mamba import mamba_layers
from ado_actuators.sfttrainer.plan.model.shape import language_config
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration
from ado_actuators.sfttrainer.plan.speed.devices import link_kind_of
from ado_actuators.sfttrainer.plan.speed.experts import Experts
from ado_actuators.sfttrainer.plan.speed.mamba import HYBRID_NOT_VALIDATED
from ado_actuators.sfttrainer.plan.speed.step_time import REFERENCE, gpus, nodes


@dataclasses.dataclass(frozen=True)
class Validated:
    median_error: float  # median |predicted / measured - 1|
    runs: int
    data: str  # what it was validated on


PCIE_SEVERAL_GPUS = "several GPUs over PCIe, one node"
"""The regime of FSDP or DDP over a node's PCIe link, any PCIe device's: what the collectives
cost over it, the part a device's own figures do not say."""


FITTED_ON = Validated(
    median_error=0.031,
    runs=244,
    data="fms-acceleration's A100-80GB table, each model family predicted from the others' fit "
    "(benchmarks/throughput_prediction.py)",
)
VALIDATED: dict[str, Validated] = {
    "NVIDIA-A100-SXM4-80GB, up to 8k tokens": Validated(
        0.063,
        73,
        "llm-foundry's MPT, torchtitan, PyTorch's FSDP blog, xtuner and Qwen's LoRA profile (one "
        "sample a micro-batch, one GPU) on A100s, 256-8k tokens",
    ),
    "NVIDIA-A100-SXM4-80GB, one node": Validated(
        0.079,
        83,
        "llm-foundry's MPT 125M-30B on 8 A100s (512-65k tokens), xtuner's Llama 3 8B and Qwen's "
        "LoRA profile on one A100 (256-8k tokens)",
    ),
    "NVIDIA-A100-SXM4-80GB, several nodes": Validated(
        0.071,
        14,
        "PyTorch's FSDP blog (16 nodes), torchtitan (8 nodes) and llm-foundry (4-8 nodes)",
    ),
    "NVIDIA-A100-SXM4-80GB, 16k tokens and longer": Validated(
        0.125, 24, "llm-foundry's MPT (16k-65k tokens) and xtuner's Llama 3 8B (16k-128k)"
    ),
    "NVIDIA-A100-SXM4-40GB, up to 8k tokens": Validated(
        0.048, 58, "llm-foundry's MPT 125M-70B on A100-40GBs, 512-8k tokens, 1-8 nodes"
    ),
    "NVIDIA-A100-SXM4-40GB, one node": Validated(
        0.056, 46, "llm-foundry's MPT 125M-13B on 8 A100-40GBs, 512-65k tokens"
    ),
    "NVIDIA-A100-SXM4-40GB, several nodes": Validated(
        0.031, 23, "llm-foundry's MPT 125M-70B on 2-8 nodes of A100-40GB, 2k tokens"
    ),
    "NVIDIA-A100-SXM4-40GB, 16k tokens and longer": Validated(
        0.117, 11, "llm-foundry's MPT on 8 A100-40GBs, 16k-65k tokens"
    ),
    "NVIDIA-H100-80GB-HBM3, up to 8k tokens": Validated(
        0.110, 44, "llm-foundry's MPT 760M-70B on 1-8 nodes of H100 and PyTorch's FSDP blog"
    ),
    "NVIDIA-H100-80GB-HBM3, one node": Validated(
        0.090, 37, "llm-foundry's MPT 760M-30B on 8 H100s, 512-65k tokens"
    ),
    "NVIDIA-H100-80GB-HBM3, several nodes": Validated(
        0.061, 19, "PyTorch's FSDP blog (12 nodes) and llm-foundry (2-8 nodes) on H100s"
    ),
    "NVIDIA-H100-80GB-HBM3, 16k tokens and longer": Validated(
        0.066, 12, "llm-foundry's MPT on 8 H100s, 16k-65k tokens"
    ),
    "16k tokens and longer": Validated(
        0.111, 47, "llm-foundry's MPT and xtuner's Llama 3 8B on A100s and H100s, 16k-128k tokens"
    ),
    "several nodes": Validated(
        0.050, 56, "PyTorch's FSDP blog, torchtitan and llm-foundry, A100 and H100, 2-16 nodes"
    ),
    "NVIDIA-L40, one node": Validated(
        0.174, 20, "fms-acceleration's L40 table (Mistral, Mixtral; 1 and 2 GPUs)"
    ),
    PCIE_SEVERAL_GPUS: Validated(
        0.185,
        12,
        "fms-acceleration's L40 table, its 2-GPU runs: Mistral-7B and Mixtral under FSDP over "
        "PCIe without peer-to-peer, every one predicted too slow as an L40 (3.5 % read as the "
        "L40S-class GPUs their speed says they were)",
    ),
}
"""Written from benchmarks/throughput_validation.py's output (docs/benchmarks/throughput.md
records its date and commit). PEFT's L40S runs (one GPU, about 840 tokens a micro-batch) test the
host's time, not a regime's: a row of several GPUs or thousands of tokens on an L40S is not
validated by them, so they are stated on the benchmark's page, not here. Qwen's profile counts
in the A100's regimes for its LoRA runs on one GPU; its runs through auto-gptq and DeepSpeed
ZeRO 3, which the actuator never runs, only on that page."""


EXPERTS_VALIDATED: dict[str, Validated] = {
    "mixtral": Validated(
        0.052,
        24,
        "fms-acceleration's Mixtral-8x7B LoRA runs on 1 and 2 A100s, the family left out of the "
        "fit (benchmarks/throughput_prediction.py)",
    ),
    "granitemoe": Validated(
        0.176,
        3,
        "fms-acceleration's granite-3.0-3b-a800m full fine-tuning on 1, 2 and 4 A100s through "
        "transformers' loop, every run predicted too fast (benchmarks/moe_throughput.py)",
    ),
    "scattermoe": Validated(
        1.202,
        1,
        "fms-acceleration's granite-3.0-3b-a800m under ScatterMoE on one A100, predicted too "
        "fast (benchmarks/moe_throughput.py)",
    ),
}
"""The experts' pricing (plan/speed/experts.py) by how they run: transformers' loop as Mixtral
or GraniteMoE dispatch it, or ScatterMoE's kernels (fast_moe). Written from the benchmarks
named; docs/benchmarks/throughput.md gives their date and commit. Only Mixtral's runs are among
the fitted table's families."""


def experts_run_as(experts: Experts, configuration: TrainingConfiguration) -> str:
    """EXPERTS_VALIDATED's key for a configuration's experts."""
    return "scattermoe" if configuration.parallelism.fast_moe else experts.dispatch


def experts_validated_note(experts: Experts, configuration: TrainingConfiguration) -> str:
    """What a preview row of a mixture of experts says of how well its experts' pricing is
    known, beside its regime's figure."""
    found = EXPERTS_VALIDATED[experts_run_as(experts, configuration)]
    return (
        f"mixture of experts validated: {found.median_error:.1%} median error on {found.runs} "
        f"public run(s) run as this one's experts are ({found.data})"
    )


def _over_pcie(configuration: TrainingConfiguration, gpu_model: str) -> bool:
    """Whether `configuration` runs several GPUs of one node whose link is PCIe (the device
    table's `link`)."""
    one_node = nodes(configuration) == 1 and gpus(configuration) > 1
    return one_node and link_kind_of(gpu_model) == "pcie"


def regime(configuration: TrainingConfiguration, gpu_model: str) -> tuple[str, ...]:
    """The regimes `configuration` on `gpu_model` belongs to, most specific first."""
    spread = "several nodes" if nodes(configuration) > 1 else "one node"
    tokens = configuration.batch.sample_tokens
    length = "16k tokens and longer" if tokens >= 16384 else "up to 8k tokens"
    if nodes(configuration) > 1:  # the network dominates what is left to know
        return (f"{gpu_model}, {spread}", f"{gpu_model}, {length}", spread, length)
    pcie = (PCIE_SEVERAL_GPUS,) if _over_pcie(configuration, gpu_model) else ()
    return (f"{gpu_model}, {length}", f"{gpu_model}, {spread}", *pcie, length, spread)


def validated_note(
    configuration: TrainingConfiguration, gpu_model: str, experts: Experts | None = None
) -> str:
    """What a preview row says of how well its regime's prediction is known. The fitted
    table's figure holds for the families it held: a mixture of experts run other than as
    Mixtral's loop gets the regime's validation instead (and its experts' own, in
    `experts_validated_note`)."""
    if configuration.config and mamba_layers(language_config(configuration.config)):
        return HYBRID_NOT_VALIDATED
    tokens = configuration.batch.sample_tokens
    fitted = (
        (experts is None or experts_run_as(experts, configuration) == "mixtral")
        and gpu_model == REFERENCE.name
        and nodes(configuration) == 1
        and tokens <= 8192
        and gpus(configuration) <= 8
    )
    if fitted:
        return (
            f"regime validated: {FITTED_ON.median_error:.1%} median error on {FITTED_ON.runs} runs "
            f"of {FITTED_ON.data}"
        )
    for name in regime(configuration, gpu_model):
        if name in VALIDATED:
            found = VALIDATED[name]
            return (
                f"regime validated ({name}): {found.median_error:.1%} median error on "
                f"{found.runs} public runs nothing was fitted on ({found.data})"
            )
    return (
        f"regime not validated: no public run of {gpu_model} with {nodes(configuration)} "
        f"node(s) at {tokens} tokens was at hand (benchmarks/throughput_validation.py)"
    )
