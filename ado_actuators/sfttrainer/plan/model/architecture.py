"""A model's parameter count from its config.json alone: no weights, no torch, no transformers.

Counted per part (embeddings, attention with grouped-query heads, MLP gated or MoE experts,
norms, LM head tied or not) for the decoder families the catalogue trains. Everything here
feeds a *lower* bound of memory (plan/memory/bound.py): where a config leaves a shape open,
the count takes the smaller reading, and an architecture not understood raises
`UnsupportedArchitecture` rather than guessing.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ado_actuators.sfttrainer.plan.model.families.registry import COUNTED
from ado_actuators.sfttrainer.plan.model.families.spec import Family
from ado_actuators.sfttrainer.plan.model.shape import (
    ModelShape,
    UnsupportedArchitecture,
)

__all__ = [
    "COUNTED",
    "DTYPE_BYTES",
    "PROMPT_TUNING_VIRTUAL_TOKENS",
    "LinearShape",
    "ParameterCounts",
    "UnsupportedArchitecture",
    "count_parameters",
    "model_length",
    "virtual_tokens",
]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Bytes per element of each torch_dtype the entity can ask for."""
ADAPTER_BYTES = 4
"""PEFT (0.12 on, every pinned release) keeps LoRA and prompt-tuning weights in fp32
(autocast_adapter_dtype): their gradients and AdamW state are fp32 too."""
PROMPT_TUNING_VIRTUAL_TOKENS = 8
"""fms-hf-tuning's PromptTuningConfig.num_virtual_tokens default (the experiments set none)."""


def virtual_tokens(method: str) -> int:
    """The tokens prompt tuning prepends to every sample (none for another method)."""
    return PROMPT_TUNING_VIRTUAL_TOKENS if method == "pt" else 0


def model_length(method: str, model_max_length: int) -> int:
    """The sequence the layers see: the padded sample and, under prompt tuning, its virtual
    tokens."""
    return model_max_length + virtual_tokens(method)


@dataclasses.dataclass(frozen=True)
class LinearShape:
    """One kind of nn.Linear in the model: its name (as LoRA's target_modules spell it)."""

    name: str
    inputs: int
    outputs: int
    count: int  # occurrences in the whole model


@dataclasses.dataclass(frozen=True)
class ParameterCounts:
    """Parameters per part. `linear` holds the block matmul weights a GPTQ/bnb checkpoint
    quantizes; embeddings, LM head, norms, routers and biases stay in the training dtype."""

    model_type: str
    hidden_size: int
    embedding: int
    attention: int
    mlp: int
    norms: int
    lm_head: int  # 0 when tied to the embedding
    quantizable: int
    linears: tuple[LinearShape, ...]
    vision: int = 0  # a vision-language model's tower and projector (plan/model/vision.py)
    vision_linears: tuple[LinearShape, ...] = ()  # the tower's, as LoRA's target names match

    @property
    def total(self) -> int:
        language = self.embedding + self.attention + self.mlp + self.norms + self.lm_head
        return language + self.vision

    def parts(self) -> dict[str, int]:
        parts = {
            "embedding": self.embedding,
            "attention": self.attention,
            "mlp": self.mlp,
            "norms": self.norms,
            "lm_head": self.lm_head,
        }
        return parts | ({"vision": self.vision} if self.vision else {})


def count_parameters(model: ModelShape | dict[str, Any]) -> ParameterCounts:
    """Parameters of the model `model` describes: its shape, or a parsed config.json."""
    return _counted(model if isinstance(model, ModelShape) else ModelShape.of(model))


@functools.lru_cache(maxsize=1024)
def _counted(shape: ModelShape) -> ParameterCounts:
    """Once per shape: the memory verdict and the step time of a configuration both ask."""
    family = shape.family
    if family is None:
        raise UnsupportedArchitecture(
            f"model_type {shape.model_type or '(none)'!r} is not one the bound counts "
            f"({', '.join(sorted(COUNTED))})"
        )
    counts = _gpt_bigcode(shape) if family.layout == "gpt_bigcode" else _llama_like(shape, family)
    vision = shape.vision
    if vision is None:
        return counts
    linears = tuple(LinearShape(*linear) for linear in vision.tower_linears)
    total = vision.tower_parameters + vision.projector_parameters
    return dataclasses.replace(counts, vision=total, vision_linears=linears)


def _llama_like(shape: ModelShape, family: Family) -> ParameterCounts:
    vocab, hidden = shape.count("vocab"), shape.count("hidden")
    layers, heads = shape.count("layers"), shape.count("heads")
    if not heads or (hidden % heads and not shape.head_dim_given):
        raise UnsupportedArchitecture(f"hidden_size {hidden} / num_attention_heads {heads}")
    head_dim, inter = shape.head_dim, shape.count("intermediate_given")
    q_width, kv_width = shape.q_width, shape.kv_width
    qkv_bias = family.qkv_bias or shape.attention_bias
    attention_bias = (q_width + 2 * kv_width) if qkv_bias else 0
    if shape.attention_bias and not family.qkv_bias:
        attention_bias += hidden  # o_proj's bias too (Llama's attention_bias covers all four)
    linears = [
        LinearShape("q_proj", hidden, q_width, layers),
        LinearShape("k_proj", hidden, kv_width, layers),
        LinearShape("v_proj", hidden, kv_width, layers),
        LinearShape("o_proj", q_width, hidden, layers),
    ]
    attention = layers * (2 * hidden * q_width + 2 * hidden * kv_width + attention_bias)
    norms_per_layer = 2 * hidden
    if family.qk_norm:
        norms_per_layer += 2 * head_dim  # q_norm and k_norm
    if family.moe:
        mlp, quantizable_mlp = _moe_mlp(shape, family, hidden, inter, layers, linears)
    else:
        mlp_bias = (2 * inter + hidden) if shape.mlp_bias else 0
        linears += [
            LinearShape("gate_proj", hidden, inter, layers),
            LinearShape("up_proj", hidden, inter, layers),
            LinearShape("down_proj", inter, hidden, layers),
        ]
        mlp = layers * (3 * hidden * inter + mlp_bias)
        quantizable_mlp = layers * 3 * hidden * inter
    embedding = vocab * hidden
    return ParameterCounts(
        model_type=shape.model_type,
        hidden_size=hidden,
        embedding=embedding,
        attention=attention,
        mlp=mlp,
        norms=layers * norms_per_layer + hidden,
        lm_head=0 if shape.tied_embeddings else embedding,
        quantizable=layers * (2 * hidden * q_width + 2 * hidden * kv_width) + quantizable_mlp,
        linears=tuple(linears),
    )


def _moe_mlp(
    shape: ModelShape,
    family: Family,
    hidden: int,
    inter: int,
    layers: int,
    linears: list[LinearShape],
) -> tuple[int, int]:
    """A mixture of experts' MLP parameters, all and quantizable; the experts' linears are
    added to `linears` where LoRA can target them."""
    experts = shape.count("experts_given")
    router = hidden * experts
    if family.expert_linears:
        # each expert: gate and up hidden->inter, down inter->hidden
        gate, up, down = family.expert_linears
        linears += [
            LinearShape(gate, hidden, inter, layers * experts),
            LinearShape(up, hidden, inter, layers * experts),
            LinearShape(down, inter, hidden, layers * experts),
        ]
    expert_params = experts * 3 * hidden * inter
    shared = 3 * hidden * shape.shared_intermediate if family.shared_experts else 0
    return layers * (expert_params + router + shared), layers * (expert_params + shared)


def _gpt_bigcode(shape: ModelShape) -> ParameterCounts:
    """GPTBigCode (granite-13b/20b/34b-code, santacoder): learned positions, LayerNorms and
    biases everywhere, multi-query attention (one shared key/value head), a 2-matrix GELU MLP,
    LM head always tied to the token embedding."""
    vocab, hidden = shape.count("vocab"), shape.count("hidden")
    layers = shape.count("layers")
    shape.count("heads")  # raises where n_head is missing: a head's width is hidden / n_head
    inter, kv_width = shape.intermediate, shape.kv_width
    qkv = hidden + 2 * kv_width
    linears = (
        LinearShape("c_attn", hidden, qkv, layers),
        LinearShape("c_proj", hidden, hidden, layers),  # attn.c_proj
        LinearShape("c_fc", hidden, inter, layers),
        LinearShape("c_proj", inter, hidden, layers),  # mlp.c_proj: the same name matches both
    )
    attention = layers * (hidden * qkv + qkv + hidden * hidden + hidden)
    mlp = layers * (2 * hidden * inter + inter + hidden)
    return ParameterCounts(
        model_type="gpt_bigcode",
        hidden_size=hidden,
        embedding=(vocab + (shape.positions or 0)) * hidden,
        attention=attention,
        mlp=mlp,
        norms=(2 * layers + 1) * 2 * hidden,
        lm_head=0,
        quantizable=layers * (hidden * qkv + hidden * hidden + 2 * hidden * inter),
        linears=linears,
    )
