"""Mixture-of-experts layers as the pinned transformers releases run them (4.44 to 4.55, the
releases plan/packages/*.txt pin), priced beside plan/speed/step_time.py's dense parts, which
count the active experts' matmul FLOPs at the device's dense GEMM rate and nothing else of them.

How those releases run experts (each release's modeling file, read):

- Mixtral (`MixtralSparseMoeBlock.forward`): the router (`gate`, softmax, top-k, a one-hot
  mask), then a Python loop over the experts (4.44-4.48 every expert, from 4.49 every expert a
  token was routed to, which at any real batch is every one: a nonzero per layer, and the loop's
  tensor index read back per expert): `torch.where` on the expert's mask (a nonzero, whose size
  the host must read: a device-to-host sync per expert), the expert's
  tokens gathered, its own w1, w3 and w2 nn.Linear at those rows with the activation and product
  between, its routing weights gathered and multiplied, `index_add_` into the output.
- GraniteMoE, GraniteMoeShared and GraniteMoeHybrid (granite-4.0-h's experts): the router's
  top-k and one `expert_size.tolist()` per layer (one sync), the tokens sorted and gathered, then
  `ParallelExperts`: one F.linear per expert on `weight[i]`, a slice of one 3-D parameter of all
  experts, for input_linear (gate and up fused) and output_linear, concatenated; gates
  multiplied, `index_add` back.

What that costs beyond the dense pricing, per layer of experts and micro-batch:

- each expert's matmuls at its own rows, tokens x top_k / experts (routing taken as balanced),
  at the roofline: the longer of their FLOPs at the device's GEMM rate and their bytes (the
  expert's weights, read once a pass, and its rows in and out) at its memory bandwidth. At a few
  hundred rows an expert's weights take as long to read as its FLOPs take to run;
- the loop's host time: each eager op costs the host EAGER_OP_SECONDS (plan/speed/host.py); the
  GPU waits wherever the host queues kernels slower than they run (small experts), and each sync
  empties the queue. Its syncs are priced one by one (SYNC_SECONDS), so a pass takes the longer
  of its GPU's and its host's time: the share of the shorter a dense layer adds
  (step_time.exposed_host) stands for the syncs and runs of small ops no count prices;
- the gathers and scatters of the routed rows (ROUTED_ACCESSES);
- under FSDP, the forward's all-gathers the syncs leave exposed (`forward_tail_seconds`, priced
  with the other collectives in plan/speed/step_time.py);
- full fine-tuning of stacked experts (ParallelExperts): autograd's backward of `weight[i]`
  (SelectBackward) writes a zero tensor the size of all experts' weights and adds it into the
  parameter's gradient, once per expert: experts x all experts' bytes x STACKED_ACCESSES per
  layer, quadratic in the experts. Mixtral's experts own their weights: none.

fms-acceleration's ScatterMoE (`fast_moe`) replaces the loop with grouped kernels: nothing here.
No constant is fitted: the device's figures are metrics/gpu_peaks.yaml's, the host's are the
published per-op cost, and the op counts are counted from the release (benchmarks/host_ops.py).
docs/benchmarks/throughput.md gives the public MoE runs that test it.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration
from ado_actuators.sfttrainer.plan.speed.devices import Device
from ado_actuators.sfttrainer.plan.speed.host import (
    ADAPTER_BACKWARD_OPS,
    ADAPTER_FORWARD_OPS,
    EAGER_OP_SECONDS,
)

DispatchName = Literal["mixtral", "granitemoe"]

SYNC_SECONDS = 2 * EAGER_OP_SECONDS
"""A sync (nonzero's size, tolist) waits for the queue to drain, then the GPU idles while the host
reads the result and launches the next op: about two ops' host time."""
ROUTED_ACCESSES = 5
"""Accesses per routed row element and pass: the gather reads and writes it, index_add reads it
and reads and writes the output row."""
STACKED_ACCESSES = 4
"""Per expert and backward, of all experts' weight bytes: SelectBackward's zeros written, and the
gradient buffer's add (two read, one written)."""


@dataclasses.dataclass(frozen=True)
class Dispatch:
    """Eager ops and syncs of one family's expert loop. The ops are counted (torch's profiler,
    benchmarks/host_ops.py); a per-layer count is beyond host.py's Llama layer, which the step
    time charges every layer (negative where the family's layer dispatches fewer: it has no
    dense MLP). The syncs are read in the modeling file."""

    forward_per_layer: int  # the router and the output's assembly, beyond a Llama layer's
    forward_per_expert: int
    backward_per_layer: int
    backward_per_expert: int  # input gradients only (frozen experts)
    backward_per_trained_layer: int  # added when the weights train, beyond a Llama layer's
    backward_per_trained_expert: int  # added when the experts' weights train
    syncs_per_layer: int
    syncs_per_expert: int
    stacked: bool  # one 3-D parameter of all experts, sliced per expert


DISPATCH: dict[DispatchName, Dispatch] = {
    # counted on transformers 4.55.4, torch 2.13: a layer of 4 and 8 experts forward 66 + 17 per
    # expert, backward 92 + 24 (trained 125 + 39); syncs (from 4.49): the routed experts'
    # nonzero per layer, then per expert the loop index's item and torch.where's nonzero
    "mixtral": Dispatch(10, 17, -1, 24, -10, 15, 1, 2, stacked=False),
    # forward 83 + 4 per expert (weight[i] and F.linear, twice), backward 105 + 6 (trained
    # 138 + 18: the weight gradients and SelectBackward's zeros and add); one tolist per layer
    "granitemoe": Dispatch(27, 4, 12, 6, -10, 12, 1, 0, stacked=True),
}


@dataclasses.dataclass(frozen=True)
class Experts:
    """A model's experts as the step time prices them (plan/speed/prediction.py reads them)."""

    count: int  # experts per layer
    per_token: int  # experts each token is routed to
    params: int  # one expert's matmul weights in one layer
    io_width: int  # its matmuls' inputs plus outputs, summed
    hidden: int
    layers: int  # layers holding experts
    dispatch: DispatchName
    adapted: int = 0  # LoRA-adapted linears per expert

    def rows(self, tokens: int) -> float:
        """Rows each expert multiplies in a micro-batch of `tokens`: balanced routing."""
        return tokens * self.per_token / self.count

    def inactive_params(self) -> int:
        """Expert weights a token does not pass through, all layers."""
        return self.layers * self.params * (self.count - self.per_token)


def experts_train(configuration: TrainingConfiguration) -> bool:
    """The experts' own weights get gradients: full fine-tuning (LoRA adapts them beside)."""
    return not configuration.tuning.base_frozen


def _pass_seconds(experts: Experts, tokens: int, width: float, device: Device) -> float:
    """GPU time of one pass over every expert of a layer: each expert's matmuls at the
    roofline, then the routed rows' gathers and scatters."""
    rows = experts.rows(tokens)
    rate, bandwidth = device.gemm_tflops * 1e12, device.memory_gbps * 1e9
    flops = 2 * rows * experts.params / rate
    moved = (experts.params + rows * experts.io_width) * width / bandwidth
    routed = ROUTED_ACCESSES * tokens * experts.per_token * experts.hidden * width / bandwidth
    return experts.count * max(flops, moved) + routed


def _host_seconds(experts: Experts, trained: bool, backward: bool) -> float:
    """Host time of one pass of the loop over a layer's experts: its eager ops."""
    shape = DISPATCH[experts.dispatch]
    if backward:
        per_expert = shape.backward_per_expert + experts.adapted * ADAPTER_BACKWARD_OPS
        per_expert += shape.backward_per_trained_expert if trained else 0
        per_layer = shape.backward_per_layer + (shape.backward_per_trained_layer if trained else 0)
        return (per_layer + experts.count * per_expert) * EAGER_OP_SECONDS
    per_expert = shape.forward_per_expert + experts.adapted * ADAPTER_FORWARD_OPS
    syncs = shape.syncs_per_layer + experts.count * shape.syncs_per_expert
    ops = shape.forward_per_layer + experts.count * per_expert
    return ops * EAGER_OP_SECONDS + syncs * SYNC_SECONDS


def expert_seconds(
    experts: Experts | None,
    configuration: TrainingConfiguration,
    device: Device,
    width: float,
) -> dict[str, float]:
    """Seconds per micro-batch the expert loop adds to the dense pricing (module docstring):
    `{"experts": s}`, or nothing for a dense model or under ScatterMoE (`fast_moe`)."""
    if experts is None or experts.count <= 1 or configuration.parallelism.fast_moe:
        return {}
    tokens = configuration.positions_per_micro_batch
    trained = experts_train(configuration)
    forwards = 2 if configuration.kernels.gradient_checkpointing else 1
    gpu = _pass_seconds(experts, tokens, width, device)
    backwards = 2 if trained else 1  # input gradients, and the weights' where they train
    loop = forwards * max(gpu, _host_seconds(experts, trained, backward=False))
    loop += max(backwards * gpu, _host_seconds(experts, trained, backward=True))
    counted = 2 * tokens * experts.per_token * experts.params / (device.gemm_tflops * 1e12)
    stacked = 0.0
    if trained and DISPATCH[experts.dispatch].stacked:
        whole = experts.count * experts.params * width
        stacked = experts.count * whole * STACKED_ACCESSES / (device.memory_gbps * 1e9)
    per_layer = loop - (forwards + backwards) * counted + stacked
    return {"experts": experts.layers * max(0.0, per_layer)}


def forward_tail_seconds(
    experts: Experts | None,
    configuration: TrainingConfiguration,
    device: Device,
    width: float,
) -> float | None:
    """GPU seconds per micro-batch, all layers, that the forward still has queued when the host
    passes each layer's last sync; None where the forward holds no sync (a dense model, or
    ScatterMoE's grouped kernels).

    Why it matters: at a sync the host waits for the GPU, so it cannot run ahead. FSDP without
    forward prefetch (fms-hf-tuning's accelerate configuration, fsdp_forward_prefetch false)
    issues a unit's all-gather from that unit's pre-forward hook, on the host: after the
    previous layer's last sync, so only what that layer runs after its sync can hide it.
    Mixtral syncs once per expert: one expert's pass is left. GraniteMoE syncs once, at the
    router: every expert's pass is left."""
    if experts is None or experts.count <= 1 or configuration.parallelism.fast_moe:
        return None
    shape = DISPATCH[experts.dispatch]
    if not (shape.syncs_per_layer or shape.syncs_per_expert):
        return None
    tokens = configuration.positions_per_micro_batch
    whole = _pass_seconds(experts, tokens, width, device)
    return experts.layers * (whole / experts.count if shape.syncs_per_expert else whole)


def expert_note(experts: Experts, configuration: TrainingConfiguration) -> str:
    """How the preview priced the experts, for its notes."""
    if configuration.parallelism.fast_moe:
        return (
            f"{experts.count} experts, {experts.per_token} per token: ScatterMoE (fast_moe) "
            f"runs them as grouped kernels, priced as dense matmuls of the active experts"
        )
    tokens = configuration.positions_per_micro_batch
    text = (
        f"{experts.count} experts, {experts.per_token} per token: priced as transformers runs "
        f"them, a Python loop of per-expert matmuls at about {experts.rows(tokens):.0f} rows "
        f"each (memory-bound where an expert's weights take longer to read than its FLOPs), "
        f"with the router, gathers, scatters and each op's host time"
    )
    if experts_train(configuration) and DISPATCH[experts.dispatch].stacked:
        text += (
            "; full fine-tuning of stacked experts adds each expert's full-size gradient "
            "(weight[i]'s backward), quadratic in the experts"
        )
    if configuration.parallelism.sharded:
        text += (
            "; the loop's syncs hold the host back, so FSDP gathers each layer's weights for the "
            "forward only once the GPU has caught up, and little compute hides them"
        )
    return text + " (plan/speed/experts.py, not fitted)"
