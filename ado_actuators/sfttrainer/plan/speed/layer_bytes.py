"""What a decoder layer's memory-bound kernels move, by the kernels its architecture runs: the
scale of the step time's elementwise part against the Llama layer its constants were fitted on.

The fitted elementwise bytes (step_time.Fitted.elementwise_bytes) are per unit of activated
width of a Llama-style layer: two RMSNorms as transformers writes them (to fp32, square, mean,
scale, back to bf16, weight), rotary embedding on the queries and keys, the attention's layout
copies, two residual adds, a SwiGLU. A layer of LayerNorms, learned or no positions and a 2-matrix
GELU MLP (GPTBigCode, MPT) runs far fewer bytes at the same widths, and fms-acceleration's fused
kernels (fast_rms_layernorm, fast_rope_embeddings) have nothing of it to fuse.

Counted op by op, forward, bf16, per token (`python benchmarks/layer_bytes.py`: transformers'
Llama, GPTBigCode and MPT of 2 and 4 layers under a dispatch mode adding up every op's tensors in
and out; torch 2.13, transformers 4.55.4): an RMSNorm 36.1 bytes per hidden element, a LayerNorm
4.05; the rotary embedding 20.5 per query and key element; the attention's layout copies 16 per
hidden element; the residual adds 12; the activation 10 per element of an MLP branch gated
(SiLU and the product), 4 plain (GELU). The backward moves 2.0 times the forward's bytes in
Llama's layer and 1.7 times in GPTBigCode's (the same benchmark); the forward's ratio stands for
every pass, which overstates a GPTBigCode layer's bytes over forward, backward and recompute by
about 7 %.
"""

from __future__ import annotations

import dataclasses

NORM_BYTES = {"rms": 36.1, "layer": 4.05}
"""Per hidden element, one norm's forward (two a layer)."""
ROTARY_BYTES = 20.5
"""Per query and key element: the rotary embedding's forward."""
LAYOUT_BYTES = 16.0
"""Per hidden element: the attention's transposes made contiguous."""
RESIDUAL_BYTES = 12.0
"""Per hidden element: the layer's two residual adds."""
ACTIVATION_BYTES = {True: 10.0, False: 4.0}
"""Per element of an MLP branch: gated (SiLU, then the product), or plain (GELU)."""


@dataclasses.dataclass(frozen=True)
class LayerKernels:
    """The memory-bound kernels a decoder layer runs, as transformers writes the architecture."""

    rms_norm: bool = True  # RMSNorm (False: LayerNorm)
    rotary: bool = True  # rotary positions on the queries and keys (False: learned, ALiBi, none)
    gated_mlp: bool = True  # a gate beside the up projection (False: a 2-matrix MLP)


LLAMA = LayerKernels()
"""The layer the step time's constants were fitted on (fms-acceleration's Llama, Mistral,
Granite and Mixtral runs)."""
FUSABLE_WITHOUT_WIDTHS = 0.65
"""The fusable share of a Llama layer whose hidden width is not known: Llama-2-7B's 0.67,
Mistral-7B's 0.61 by the counts above."""


@dataclasses.dataclass(frozen=True)
class LayerWidths:
    hidden: int
    query: int  # query heads x head dimension
    key: int  # key heads x head dimension
    activated: int  # hidden + the MLP width a token activates (x2 when gated)


def _bytes(kernels: LayerKernels, widths: LayerWidths) -> tuple[float, float]:
    """(what fms-acceleration's fused kernels replace, the rest), bytes per token forward."""
    hidden = widths.hidden
    branch = (widths.activated - hidden) / (2 if kernels.gated_mlp else 1)
    norms = 2 * NORM_BYTES["rms" if kernels.rms_norm else "layer"] * hidden
    rotary = ROTARY_BYTES * (widths.query + widths.key) if kernels.rotary else 0.0
    fused = (norms if kernels.rms_norm else 0.0) + rotary
    rest = (
        (0.0 if kernels.rms_norm else norms)
        + (LAYOUT_BYTES + RESIDUAL_BYTES) * hidden
        + ACTIVATION_BYTES[kernels.gated_mlp] * branch
    )
    return fused, rest


@dataclasses.dataclass(frozen=True)
class ElementwiseScale:
    """A layer's memory-bound bytes over a Llama layer's of the same widths (`bytes`), and the
    share of its own bytes fms-acceleration's fused kernels replace (`fusable`: its RMSNorms and
    rotary embedding)."""

    bytes: float = 1.0
    fusable: float = 0.0

    def fast_kernels(self, left: float) -> float:
        """The fused kernels' factor on this layer's bytes, where `left` is the share of the
        bytes they replace that they still move."""
        return 1 - (1 - left) * self.fusable


def elementwise_scale(kernels: LayerKernels, widths: LayerWidths) -> ElementwiseScale:
    """`bytes` 1 for a Llama-style layer, whatever its widths; `fusable` follows the widths (a
    wide MLP leaves the norms and rotary embedding a smaller share)."""
    if widths.hidden <= 0:
        return ElementwiseScale(fusable=FUSABLE_WITHOUT_WIDTHS)
    fused, rest = _bytes(kernels, widths)
    llama_fused, llama_rest = _bytes(LLAMA, widths)
    total = fused + rest
    return ElementwiseScale(bytes=total / (llama_fused + llama_rest), fusable=fused / total)
