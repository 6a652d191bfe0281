"""The error each regime of the predicted step time was validated at, as data a preview row
reads: the regimes a run belongs to (device, one node or several, sequence length) and, for each,
the median |error| benchmarks/throughput_validation.py measured on public runs nothing was fitted
on, or that the regime was not validated. docs/benchmarks/throughput.md reports the figures with
their date and commit.
"""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.plan.speed.step_time import REFERENCE, Run


@dataclasses.dataclass(frozen=True)
class Validated:
    median_error: float  # median |predicted / measured - 1|
    runs: int
    data: str  # what it was validated on


FITTED_ON = Validated(
    median_error=0.033,
    runs=244,
    data="fms-acceleration's A100-80GB table, each model family predicted from the others' fit "
    "(benchmarks/throughput_prediction.py)",
)
VALIDATED: dict[str, Validated] = {
    "NVIDIA-A100-SXM4-80GB, several nodes": Validated(
        0.096, 12, "PyTorch's FSDP blog (16 nodes) and torchtitan (8 nodes), Llama 2 and 3"
    ),
    "NVIDIA-H100-80GB-HBM3, several nodes": Validated(
        0.132, 4, "PyTorch's FSDP blog (12 nodes of H100), Llama 2 7B-70B"
    ),
    "NVIDIA-A100-SXM4-80GB, 16k tokens and longer": Validated(
        0.071, 4, "xtuner's Llama 3 8B on 8 A100s at 16k-128k tokens, sequence parallel"
    ),
    "16k tokens and longer": Validated(
        0.071,
        4,
        "xtuner's Llama 3 8B on 8 A100s at 16k-128k tokens, sequence parallel; no other device",
    ),
    "several nodes": Validated(
        0.108, 16, "PyTorch's FSDP blog and torchtitan, A100 and H100, 8-16 nodes"
    ),
    "NVIDIA-L40, one node": Validated(
        0.146, 20, "fms-acceleration's L40 table (Mistral, Mixtral; 1 and 2 GPUs)"
    ),
}
"""Written from benchmarks/throughput_validation.py's output (docs/benchmarks/throughput.md
records its date and commit)."""


def regime(run: Run, gpu_model: str) -> tuple[str, ...]:
    """The regimes `run` on `gpu_model` belongs to, most specific first."""
    nodes = "several nodes" if run.nodes > 1 else "one node"
    length = "16k tokens and longer" if run.sequence_length >= 16384 else "up to 8k tokens"
    return (f"{gpu_model}, {nodes}", f"{gpu_model}, {length}", length, nodes)


def validated_note(run: Run, gpu_model: str) -> str:
    """What a preview row says of how well its regime's prediction is known."""
    fitted = (
        gpu_model == REFERENCE.name
        and run.nodes == 1
        and run.sequence_length <= 8192
        and run.gpus <= 8
    )
    if fitted:
        return (
            f"regime validated: {FITTED_ON.median_error:.1%} median error on {FITTED_ON.runs} runs "
            f"of {FITTED_ON.data}"
        )
    for name in regime(run, gpu_model):
        if name in VALIDATED:
            found = VALIDATED[name]
            return (
                f"regime validated ({name}): {found.median_error:.1%} median error on "
                f"{found.runs} public runs nothing was fitted on ({found.data})"
            )
    return (
        f"regime not validated: no public run of {gpu_model} with {run.nodes} node(s) at "
        f"{run.sequence_length} tokens was at hand (benchmarks/throughput_validation.py)"
    )
