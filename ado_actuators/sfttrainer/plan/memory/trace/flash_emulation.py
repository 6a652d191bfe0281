"""flash-attn 2's memory on CPU, for plan/memory/trace/step.py: flash-attn needs CUDA, and its memory
is its contract. transformers 4.55's flash_attention_forward hands it q, k, v as (batch, seq,
heads, dim) views (casting fp32 ones to the linears' dtype, its fa_peft_integration_check);
flash_attn_interface.FlashAttnFunc saves q, k, v, its output, softmax_lse (fp32, batch x heads
x seq) and a rng_state; its backward allocates dq, dk, dv (empty_like) and, in flash_api.cpp's
mha_bwd, softmax_d (fp32, seq rounded to 128), dq_accum (fp32, seq rounded to 128, head dim to
32) and, for grouped-query heads, dk and dv expanded to every head
(Dao-AILab/flash-attention, csrc/flash_attn/flash_api.cpp). Real tensors get attention's
values computed while the counting is paused (what flash-attn computes in place); fake ones get
none. Imports torch and transformers at the top: imported only by plan/memory/trace/step.py, lazily.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

from ado_actuators.sfttrainer.plan.memory.trace.objects import Module, Tensor

_PAUSED: list[Callable[[], contextlib.AbstractContextManager[Any]]] = []


def register(name: str, paused: Callable[[], contextlib.AbstractContextManager[Any]]) -> None:
    """Register the emulation as attention implementation `name`; `paused` stops the counting
    while values are computed."""
    _PAUSED[:] = [paused]
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, flash_attention_mask)


def attention_forward(
    module: Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor, **kwargs: Any
) -> tuple[Tensor, None]:
    query, key, value = (t.transpose(1, 2) for t in (query, key, value))
    if query.dtype == torch.float32:
        # transformers casts an fp32 query (rotary's fp32 tables promote it under autocast over
        # fp32 weights) to CUDA autocast's dtype when that is on (torch.is_autocast_enabled(),
        # CUDA's), else to the linears' weights': the trace's CPU autocast stands for CUDA's
        if torch.is_autocast_enabled("cpu"):
            dtype = torch.get_autocast_dtype("cpu")
        else:
            dtype = next(m for m in module.modules() if isinstance(m, torch.nn.Linear)).weight.dtype
        query, key, value = (t.to(dtype) for t in (query, key, value))
    out = FlashAttention.apply(query, key, value, kwargs.get("scaling"))  # type: ignore[no-untyped-call]  # torch's
    return out, None


def _round(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


class FlashAttention(torch.autograd.Function):
    # autograd's protocol: a context and the tensors; Any as torch types them
    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, scale: float | None) -> Tensor:
        batch, length, heads, _ = q.shape
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = q.new_empty((batch, heads, length), dtype=torch.float32)
        rng_state = torch.empty(2, dtype=torch.int64)
        if not isinstance(q, FakeTensor):
            with _PAUSED[0]():
                out.copy_(_attention(q, k, v, scale))
        ctx.scale = scale
        ctx.save_for_backward(q, k, v, out, lse, rng_state)
        return out

    @staticmethod
    def backward(ctx: Any, dout: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        q, k, v, _out, _lse, _rng = ctx.saved_tensors
        batch, length, heads, dim = q.shape
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        f32 = {"dtype": torch.float32}
        workspace = [
            q.new_empty((batch, heads, _round(length, 128)), **f32),  # softmax_d
            q.new_empty((batch, heads, _round(length, 128), _round(dim, 32)), **f32),  # dq_accum
        ]
        if k.shape[2] != heads:  # dk, dv expanded to every query head
            workspace += [q.new_empty(q.shape), q.new_empty(q.shape)]
        if not isinstance(q, FakeTensor):
            with _PAUSED[0](), torch.enable_grad():
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                _attention(*leaves, ctx.scale).backward(dout)  # type: ignore[call-arg]  # q, k, v
                for grad, leaf in zip((dq, dk, dv), leaves, strict=True):
                    grad.copy_(leaf.grad)
        del workspace
        return dq, dk, dv, None


def _attention(q: Tensor, k: Tensor, v: Tensor, scale: float | None) -> Tensor:
    """Causal attention's values on (batch, seq, heads, dim) tensors (real tensors only)."""
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        is_causal=True,
        scale=scale,
        enable_gqa=k.shape[2] != q.shape[2],
    )
    return out.transpose(1, 2)
