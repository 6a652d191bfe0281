"""What a Mamba-2 mixer (a hybrid's Mamba layer, without its norms and MLP) keeps for backward and
holds at its largest, per token, on each scan path (plan/model/mamba.py decides which). Pure.

- fused (mamba_ssm's `mamba_split_conv1d_scan_combined`, as plan/memory/trace/mamba_emulation.py
  allocates it, checked against the trace by benchmarks/memory_truth.py): kept, the in
  projection's output zxbcdt, the scan's output and the gated norm's rstd; its forward holds the
  convolution's output and fp32 scan buffers, its backward recomputes them beside every
  gradient of the projection's output;
- torch (transformers' torch_forward, counted tensor by tensor from its code and torch's
  autograd formulas, checked against its trace, StepSpec.mamba_scan "torch"): every broadcast
  product's fp32 operands kept, and transients of [chunk, chunk, state] floats per chunk and
  head (C·Bᵀ's product before its sum), many times the fused path's.

`w` is the bytes of the model's dtype; FP32 4.
"""

from __future__ import annotations

import math

from ado_actuators.sfttrainer.plan.model.mamba import MambaLayers, ScanPath

FP32 = 4


def padded_share(layer: MambaLayers, length: int) -> float:
    """torch_forward pads a sample to whole chunks before its chunked products: the padded
    tokens per token of the sample (1 when `length` is a multiple of the chunk; prompt
    tuning's virtual tokens make 1,032 of 1,024, padded to 1,280)."""
    return math.ceil(length / layer.chunk) * layer.chunk / max(1, length)


def chunks_per_token(layer: MambaLayers, length: int) -> float:
    """Chunks of the scan per token: a sample of `length` tokens is cut into whole chunks."""
    return math.ceil(length / layer.chunk) / max(1, length)


def scan_buffers(layer: MambaLayers, length: int) -> float:
    """The fused scan's fp32 buffers per token: dt and its cumulative sum (per head and chunk
    position), the chunk states and the passed states, C·B per chunk
    (mamba_emulation._Shape.scan_buffers)."""
    h, chunk, per_token = layer.heads, layer.chunk, chunks_per_token(layer, length)
    states = h * layer.head_dim * layer.state * per_token
    return FP32 * per_token * chunk * (2 * h + layer.groups * chunk) + FP32 * 2 * states


def mixer_saved(layer: MambaLayers, width: int, path: ScanPath, trains: bool, length: int) -> float:
    """Bytes per token one mixer keeps for backward when its input needs a gradient (`trains`:
    its own weights train, so in_proj and out_proj keep their inputs too)."""
    inputs = width * layer.hidden if trains else 0
    if path == "fused":
        return width * (layer.projected + layer.inner) + FP32 * layer.groups + inputs
    return _torch_saved(layer, width, trains, length) + inputs


def _torch_saved(layer: MambaLayers, width: int, trains: bool, length: int) -> float:
    """torch_forward's saved tensors per token: the projection's output (held by the
    convolution's saved input, a view of it), SiLU's input; the fp32 x and x·dt; B and C
    repeated per head; the decay mask L, C·Bᵀ and its masked product M ([chunk] per head each);
    B's decayed copy, the chunk states, the read-out's sum; the gated norm's fp32 gate, its
    SiLU, its product and the norm's output (modeling_granitemoehybrid.py)."""
    h, n, chunk, inner = layer.heads, layer.state, layer.chunk, layer.inner
    # the chunk states with the initial one joined (chunks + 1), kept twice
    joined = chunks_per_token(layer, length) + 1 / max(1, length)
    states = 2 * h * layer.head_dim * n * joined
    chunked = (3 * h * chunk + h * n) * padded_share(layer, length)
    fp32 = 2 * inner + 2 * h * n + chunked + states + inner + 4 * inner
    out_input = width * inner if trains else 0  # out_proj's input, the norm's output's cast
    return width * (layer.projected + layer.conv_dim + h) + FP32 * fp32 + out_input


def mixer_forward(layer: MambaLayers, width: int, path: ScanPath, length: int) -> float:
    """What a mixer's forward holds per token at its largest beyond what it keeps: the fused
    kernel's convolution output and scan buffers beside its scan output, the norm's output and
    the out projection's; torch_forward's C·Bᵀ product ([chunk, state] floats per head, a local
    alive to the function's end) beside the larger of the diagonal block's product ([chunk,
    head_dim] per head, freed by its sum) and the chunk states' ([head_dim, state] per head:
    B·x's before its sum, then C times the states, a local too). Measured on transformers
    4.55's torch_forward on CPU: within 5 %; against its trace at state 128 and head_dim 32
    (Granite 4.0's state, h-350m's heads), where the chunk states' outgrow the block's."""
    if path == "fused":
        stored = layer.conv_dim + 2 * layer.inner + layer.hidden
        return width * stored + scan_buffers(layer, length)
    chunk, state, head_dim = layer.chunk, layer.state, layer.head_dim
    product = FP32 * layer.heads * (chunk * state + max(chunk * head_dim, head_dim * state))
    return product * padded_share(layer, length)


def mixer_backward(layer: MambaLayers, width: int, path: ScanPath, length: int) -> float:
    """What a mixer's backward adds per token at its largest: the fused kernel's recomputed
    convolution output and norm output, the gradients of the projection's output, of the
    convolution's, of the norm's output and input, and two sets of scan buffers (recomputed
    states and their gradients); torch_forward's backward of a broadcast product materialises
    it twice, one per factor's gradient, the largest of the diagonal block's ([chunk, head_dim]
    floats per head and token), C·Bᵀ's ([chunk, state]) and the chunk states' ([head_dim,
    state]) (measured as for mixer_forward: within 2 %; C·Bᵀ's is the largest at Granite
    4.0's state of 128)."""
    if path == "fused":
        stored = 2 * layer.inner + 2 * layer.conv_dim + layer.projected + layer.inner
        return width * stored + 2 * scan_buffers(layer, length)
    chunk, state, head_dim = layer.chunk, layer.state, layer.head_dim
    product = 2 * FP32 * layer.heads * max(chunk * head_dim, chunk * state, head_dim * state)
    return product * padded_share(layer, length)
