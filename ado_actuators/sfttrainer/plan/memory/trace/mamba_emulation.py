"""The mamba_ssm kernels' memory on CPU, for plan/memory/trace/step.py: a GPU run of a Mamba-2 layer
(Bamba, GraniteMoeHybrid, FalconH1, Mamba2, Zamba2) trains through mamba_ssm's fused
`mamba_split_conv1d_scan_combined` (transformers' `cuda_kernels_forward`, training without a
cache), which needs CUDA. Without it transformers falls back to `torch_forward`, whose chunked
scan materialises [batch, chunks, chunk, chunk, heads, state] products: several times what the
kernel holds, so tracing that path would call a Granite 4.0 hybrid out of memory on any GPU.

`install()` sends the training path of those layers through `cuda_kernels_forward` with the
kernel replaced by `SplitConv1dScanCombined`, which allocates what the kernel allocates
(state-spaces/mamba, mamba_ssm/ops/triton/ssd_combined.py, MambaSplitConv1dScanCombinedFn):

- forward: the causal convolution's output xBC [b, s, conv_dim]; dt and its cumulative sum
  (fp32, [b, heads, chunks, chunk]); the chunk states and the passed states (fp32, [b, chunks,
  heads, head_dim, state]); C·B per chunk (fp32, [b, chunks, groups, chunk, chunk]); the scan's
  output out_x [b, s, heads, head_dim]; the gated RMSNorm's output [b, s, dim] and its rstd
  (fp32, [b·s·groups]); the out projection [b, s, hidden]. Kept for backward: zxbcdt (the in
  projection's output), out_x and rstd;
- backward: the recomputed xBC and RMSNorm output, dzxbcdt, dxBC, the out projection's input
  gradient and the RMSNorm's, the recomputed dt, states and C·B with their gradients (fp32), and
  the parameters' gradients.

Real tensors get zeros for values (the memory is the point; trace/step.py's fake-against-real
check runs a model without Mamba layers). Imports torch at the top: imported only by
trace/step.py, lazily.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import torch

FAMILIES = ("bamba", "granitemoehybrid", "falcon_h1", "mamba2", "zamba2")
"""transformers' model families whose Mamba-2 layers call mamba_split_conv1d_scan_combined."""
ASSUMED = (
    "Mamba-2 layers as mamba_ssm's fused kernel allocates (plan/memory/trace/mamba_emulation.py)"
)


def install(assumed: list[str]) -> list[tuple[Any, str, Any]]:
    """Route every family's Mamba layer through the emulated kernel when it trains; returns
    what was replaced (module or class, name, original) for `uninstall`. `assumed` collects
    the note a trace then carries."""
    replaced: list[tuple[Any, str, Any]] = []
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        except ImportError:
            continue
        for owner, name, value in (
            (module, "mamba_split_conv1d_scan_combined", split_conv1d_scan_combined),
            (module, "is_fast_path_available", True),
        ):
            replaced.append((owner, name, getattr(owner, name, None)))
            setattr(owner, name, value)
        for cls in vars(module).values():
            if isinstance(cls, type) and hasattr(cls, "cuda_kernels_forward"):
                forward = cls.torch_forward  # type: ignore[attr-defined]  # hasattr: a Mamba-2 mixer
                replaced.append((cls, "torch_forward", forward))
                cls.torch_forward = _through_kernel(forward, assumed)  # type: ignore[attr-defined]
    return replaced


def uninstall(replaced: list[tuple[Any, str, Any]]) -> None:
    for owner, name, value in reversed(replaced):
        setattr(owner, name, value)


def _through_kernel(original: Any, assumed: list[str]) -> Any:
    def torch_forward(self: Any, hidden_states: Any, cache_params: Any = None, *args: Any) -> Any:
        if not (self.training and cache_params is None):
            return original(self, hidden_states, cache_params, *args)
        assumed.append(ASSUMED)
        return self.cuda_kernels_forward(hidden_states, cache_params, *args)

    return torch_forward


def split_conv1d_scan_combined(
    zxbcdt: Any,
    conv1d_weight: Any,
    conv1d_bias: Any,
    dt_bias: Any,
    A: Any,
    D: Any,
    chunk_size: int,
    initial_states: Any = None,
    seq_idx: Any = None,
    dt_limit: Any = (0.0, float("inf")),
    return_final_states: bool = False,
    activation: str = "silu",
    rmsnorm_weight: Any = None,
    rmsnorm_eps: float = 1e-6,
    outproj_weight: Any = None,
    outproj_bias: Any = None,
    headdim: int | None = None,
    ngroups: int = 1,
    norm_before_gate: bool = True,
    **_: Any,
) -> Any:
    """mamba_split_conv1d_scan_combined's signature, its memory (module docstring)."""
    nheads = D.shape[0]
    headdim = headdim if D.dim() == 1 else D.shape[1]
    assert headdim is not None  # the mixer passes it whenever D holds one value per head
    shape = _Shape(zxbcdt, conv1d_weight, nheads, headdim, ngroups, chunk_size)
    out = SplitConv1dScanCombined.apply(  # type: ignore[no-untyped-call]  # torch's
        zxbcdt,
        conv1d_weight,
        conv1d_bias,
        dt_bias,
        A,
        D,
        rmsnorm_weight,
        outproj_weight,
        outproj_bias,
        shape,
    )
    if return_final_states:
        final = zxbcdt.new_zeros((shape.batch, nheads, headdim, shape.state), dtype=torch.float32)
        return out, final
    return out


class _Shape:
    """The kernel's sizes, from its arguments."""

    def __init__(
        self, zxbcdt: Any, conv1d_weight: Any, heads: int, headdim: int, groups: int, chunk: int
    ) -> None:
        self.batch, self.length, self.projected = zxbcdt.shape
        self.heads, self.headdim, self.groups, self.chunk = heads, headdim, groups, chunk
        self.dim = heads * headdim
        self.conv = conv1d_weight.shape[0]
        self.state = (self.conv - self.dim) // groups // 2
        self.chunks = math.ceil(self.length / chunk)

    def scan_buffers(self, like: Any) -> list[Any]:
        """dt and its cumulative sum, the chunk states and the passed ones, C·B: fp32."""
        f32 = {"dtype": torch.float32}
        b, h, c, n = self.batch, self.heads, self.chunks, self.chunk
        states = (b, c, h, self.headdim, self.state)
        return [
            like.new_zeros((b, h, c, n), **f32),
            like.new_zeros((b, h, c, n), **f32),
            like.new_zeros(states, **f32),
            like.new_zeros(states, **f32),
            like.new_zeros((b, c, self.groups, n, n), **f32),
        ]


class SplitConv1dScanCombined(torch.autograd.Function):
    # autograd's protocol: a context and the tensors (or None); Any as torch types them
    @staticmethod
    def forward(
        ctx: Any,
        zxbcdt: Any,
        conv_w: Any,
        conv_b: Any,
        dt_bias: Any,
        A: Any,
        D: Any,
        norm_w: Any,
        out_w: Any,
        out_b: Any,
        shape: _Shape,
    ) -> Any:
        b, s = shape.batch, shape.length
        xbc = zxbcdt.new_zeros((b, s, shape.conv))
        buffers = shape.scan_buffers(zxbcdt)
        out_x = zxbcdt.new_zeros((b, s, shape.heads, shape.headdim))
        del xbc, buffers
        normed = zxbcdt.new_zeros((b, s, shape.dim))
        rstd = zxbcdt.new_zeros((b * s * shape.groups,), dtype=torch.float32)
        out = normed if out_w is None else torch.nn.functional.linear(normed, out_w, out_b)
        ctx.shape = shape
        ctx.save_for_backward(
            zxbcdt, conv_w, conv_b, dt_bias, A, D, norm_w, out_w, out_b, out_x, rstd
        )
        return out

    @staticmethod
    def backward(ctx: Any, dout: Any) -> tuple[Any, ...]:
        zxbcdt, conv_w, conv_b, dt_bias, A, D, norm_w, out_w, out_b, out_x, _rstd = (
            ctx.saved_tensors
        )
        shape = ctx.shape
        b, s = shape.batch, shape.length
        recomputed = zxbcdt.new_zeros((b, s, shape.dim))  # the RMSNorm's output, for out_w
        xbc = zxbcdt.new_zeros((b, s, shape.conv))
        dzxbcdt = torch.zeros_like(zxbcdt)
        dxbc = zxbcdt.new_zeros((b, s, shape.conv))
        dnormed = zxbcdt.new_zeros((b, s, shape.dim)) if out_w is not None else dout
        dscan = zxbcdt.new_zeros((b, s, shape.dim))  # the RMSNorm's input gradient
        buffers = shape.scan_buffers(zxbcdt) + shape.scan_buffers(zxbcdt)
        needs = ctx.needs_input_grad
        grads = [
            dzxbcdt,
            *(
                torch.zeros_like(t) if t is not None and needs[i + 1] else None
                for i, t in enumerate((conv_w, conv_b, dt_bias, A, D, norm_w, out_w, out_b))
            ),
            None,
        ]
        del recomputed, xbc, dxbc, dnormed, dscan, buffers, out_x
        return tuple(grads)
