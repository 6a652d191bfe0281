"""Decoders whose blocks are Llama's: q/k/v/o projections (grouped-query heads), a gated MLP,
RMSNorm before attention and MLP, rotary positions."""

from __future__ import annotations

from ado_actuators.sfttrainer.plan.model.families.spec import Family

FAMILIES = (
    Family("llama"),
    Family("mistral", default_kv_heads=8),  # MistralConfig's default
    Family("granite", transformed_embedding=True),  # embedding_multiplier
    Family("qwen2", qkv_bias=True),
    Family("qwen3", qk_norm=True),
)
