"""The flash-attn emulation (plan/memory/trace/flash_emulation.py) casts as transformers 4.55's
flash_attention_forward does on CUDA: an fp32 query (rotary's fp32 tables promote it under
autocast over fp32 weights) goes to autocast's dtype when autocast is on, else to the linears'
weights' (issue 44: the trace had kept fp32 q, k, v and output, which flash-attn cannot run)."""

from __future__ import annotations

import contextlib

import torch

from ado_actuators.sfttrainer.plan.memory.trace import flash_emulation


def _attention(autocast: bool) -> torch.dtype:
    flash_emulation.register("test_emulated_flash", contextlib.nullcontext)
    module = torch.nn.Linear(4, 4)  # fp32 weights
    query, key = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    value = torch.randn(1, 2, 3, 4, dtype=torch.bfloat16 if autocast else torch.float32)
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with context:
        out, _ = flash_emulation.attention_forward(module, query, key, value, None)
    return out.dtype


def test_an_fp32_query_goes_to_autocasts_dtype_under_autocast():
    assert _attention(autocast=True) == torch.bfloat16


def test_an_fp32_query_stays_in_the_weights_dtype_without_autocast():
    assert _attention(autocast=False) == torch.float32
