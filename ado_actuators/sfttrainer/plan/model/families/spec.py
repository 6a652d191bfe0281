"""What the planner knows of one decoder family, beside the numbers its config.json gives: how
its layers are laid out, how its MLP and experts run, and the defaults transformers fills in
where a config.json is silent. Each family's module (plan/model/families/) declares its own; the
registry (plan/model/families/__init__.py) looks them up by config.json's model_type."""

from __future__ import annotations

import dataclasses
from typing import Literal

Layout = Literal["llama", "gpt_bigcode"]
Dispatch = Literal["mixtral", "granitemoe"]


@dataclasses.dataclass(frozen=True)
class Spelling:
    """The config.json keys a family names each shape by, the first one present read."""

    hidden: tuple[str, ...] = ("hidden_size",)
    layers: tuple[str, ...] = ("num_hidden_layers",)
    heads: tuple[str, ...] = ("num_attention_heads",)
    intermediate: tuple[str, ...] = ("intermediate_size",)
    positions: tuple[str, ...] = ()  # learned position embeddings; rotary families have none


@dataclasses.dataclass(frozen=True)
class Family:
    """One model_type's layer layout and defaults.

    layout "llama": q/k/v/o projections with grouped-query heads, RMSNorm, rotary positions, a
    gated MLP (gate/up/down) or experts of that shape. layout "gpt_bigcode": one fused c_attn
    (multi-query unless the config says otherwise), LayerNorm, learned positions, a 2-matrix
    GELU MLP, biases everywhere, the LM head tied.
    """

    model_type: str
    layout: Layout = "llama"
    moe: Dispatch | None = None
    """How the family's code dispatches to its experts (plan/memory/activations.py): mixtral
    loops over experts of their own nn.Linear, granitemoe runs fused ParallelExperts."""
    expert_linears: tuple[str, str, str] | None = None
    """The experts' gate, up and down nn.Linear names, where LoRA can target them (fused
    ParallelExperts tensors are no nn.Linear: none)."""
    shared_experts: bool = False  # a dense shared MLP beside the experts
    default_kv_heads: int | None = None  # transformers' own where config.json omits them
    qkv_bias: bool = False  # q/k/v biases whatever attention_bias says (Qwen2)
    qk_norm: bool = False  # RMSNorm over each query and key head (Qwen3)
    transformed_embedding: bool = False
    """The first layer's input is not the embedding's output: Granite multiplies it by
    embedding_multiplier, GPTBigCode adds the position embeddings."""
    spelling: Spelling = Spelling()
    transformers_folder: str | None = None
    """The folder of transformers/models/ holding its modeling file; None: the model_type."""

    @property
    def modeling_folder(self) -> str:
        return self.transformers_folder or self.model_type

    @property
    def gated_mlp(self) -> bool:
        return self.layout == "llama"

    @property
    def rotary(self) -> bool:
        return self.layout == "llama"

    @property
    def rms_norm(self) -> bool:
        return self.layout == "llama"


UNCOUNTED_SPELLING = Spelling(heads=("num_attention_heads", "n_head"))
"""How a model_type no family declares is read (its counts come from a trace or transformers'
meta-device model): the common keys, GPT-2's n_head beside them."""
