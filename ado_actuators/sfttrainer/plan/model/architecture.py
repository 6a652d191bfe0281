"""A model's parameter count from its config.json alone: no weights, no torch, no transformers.

Counted per part (embeddings, attention with grouped-query heads, MLP gated or MoE experts,
norms, LM head tied or not) for the decoder families the catalogue trains. Everything here
feeds a *lower* bound of memory (plan/memory/bound.py): where a config leaves a shape open,
the count takes the smaller reading, and an architecture not understood raises
`UnsupportedArchitecture` rather than guessing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Bytes per element of each torch_dtype the entity can ask for."""
PROMPT_TUNING_VIRTUAL_TOKENS = 8
"""fms-hf-tuning's PromptTuningConfig.num_virtual_tokens default (the experiments set none)."""


class UnsupportedArchitecture(ValueError):
    """config.json names a model this module cannot count; the bound is then not computed."""


# Decoders whose blocks are Llama's: q/k/v/o projections (GQA by num_key_value_heads), a gated
# MLP (gate/up/down) or MoE experts of the same shape, RMSNorm before attention and MLP.
_LLAMA_LIKE = {"llama", "mistral", "granite", "qwen2", "qwen3"}
_MOE = {"mixtral", "granitemoe", "granitemoeshared"}
_SUPPORTED = _LLAMA_LIKE | _MOE | {"gpt_bigcode"}
COUNTED = frozenset(_SUPPORTED)
"""The model types counted by hand here and in plan/memory/activations.py; any other is traced
(plan/memory/traced.py)."""
# transformers' own default where a config omits the key (MistralConfig/MixtralConfig: 8 kv
# heads; the others: as many as query heads).
_DEFAULT_KV_HEADS = {"mistral": 8, "mixtral": 8}


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

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.mlp + self.norms + self.lm_head

    def parts(self) -> dict[str, int]:
        return {
            "embedding": self.embedding,
            "attention": self.attention,
            "mlp": self.mlp,
            "norms": self.norms,
            "lm_head": self.lm_head,
        }


def language_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's settings: multimodal configs nest them under text_config (the
    vision tower is then not counted: a smaller count, as a lower bound wants)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) and text.get("model_type") else config


def _int(config: dict[str, Any], *names: str, default: int | None = None) -> int:
    for name in names:
        value = config.get(name)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UnsupportedArchitecture(f"config.json {name} {value!r} is not a count")
            return value
    if default is not None:
        return default
    raise UnsupportedArchitecture(f"config.json lacks {' / '.join(names)}")


def count_parameters(config: dict[str, Any]) -> ParameterCounts:
    """Parameters of the model `config` (a parsed config.json) describes."""
    config = language_config(config)
    model_type = str(config.get("model_type") or "")
    if model_type not in _SUPPORTED:
        raise UnsupportedArchitecture(
            f"model_type {model_type or '(none)'!r} is not one the bound counts "
            f"({', '.join(sorted(_SUPPORTED))})"
        )
    if model_type == "gpt_bigcode":
        return _gpt_bigcode(config)
    return _llama_like(config, model_type)


def _llama_like(config: dict[str, Any], model_type: str) -> ParameterCounts:
    vocab, hidden = _int(config, "vocab_size"), _int(config, "hidden_size")
    layers, heads = _int(config, "num_hidden_layers"), _int(config, "num_attention_heads")
    if not heads or (hidden % heads and not config.get("head_dim")):
        raise UnsupportedArchitecture(f"hidden_size {hidden} / num_attention_heads {heads}")
    kv = _int(config, "num_key_value_heads", default=_DEFAULT_KV_HEADS.get(model_type, heads))
    head_dim = _int(config, "head_dim", default=hidden // heads)
    inter = _int(config, "intermediate_size")
    q_width, kv_width = heads * head_dim, kv * head_dim
    qkv_bias = model_type == "qwen2" or bool(config.get("attention_bias"))
    attention_bias = (q_width + 2 * kv_width) if qkv_bias else 0
    if config.get("attention_bias") and model_type != "qwen2":
        attention_bias += hidden  # o_proj's bias too (Llama's attention_bias covers all four)
    linears = [
        LinearShape("q_proj", hidden, q_width, layers),
        LinearShape("k_proj", hidden, kv_width, layers),
        LinearShape("v_proj", hidden, kv_width, layers),
        LinearShape("o_proj", q_width, hidden, layers),
    ]
    attention = layers * (2 * hidden * q_width + 2 * hidden * kv_width + attention_bias)
    norms_per_layer = 2 * hidden
    if model_type == "qwen3":
        norms_per_layer += 2 * head_dim  # q_norm and k_norm
    if model_type in _MOE:
        mlp, quantizable_mlp = _moe_mlp(config, model_type, hidden, inter, layers, linears)
    else:
        mlp_bias = (2 * inter + hidden) if config.get("mlp_bias") else 0
        linears += [
            LinearShape("gate_proj", hidden, inter, layers),
            LinearShape("up_proj", hidden, inter, layers),
            LinearShape("down_proj", inter, hidden, layers),
        ]
        mlp = layers * (3 * hidden * inter + mlp_bias)
        quantizable_mlp = layers * 3 * hidden * inter
    embedding = vocab * hidden
    return ParameterCounts(
        model_type=model_type,
        hidden_size=hidden,
        embedding=embedding,
        attention=attention,
        mlp=mlp,
        norms=layers * norms_per_layer + hidden,
        lm_head=0 if _tied(config) else embedding,
        quantizable=layers * (2 * hidden * q_width + 2 * hidden * kv_width) + quantizable_mlp,
        linears=tuple(linears),
    )


def _moe_mlp(
    config: dict[str, Any],
    model_type: str,
    hidden: int,
    inter: int,
    layers: int,
    linears: list[LinearShape],
) -> tuple[int, int]:
    """A mixture of experts' MLP parameters, all and quantizable; the experts' linears are
    added to `linears` where LoRA can target them."""
    experts = _int(config, "num_local_experts")
    router = hidden * experts
    if model_type == "mixtral":
        # each expert: w1 (gate) and w3 (up) hidden->inter, w2 (down) inter->hidden
        linears += [
            LinearShape("w1", hidden, inter, layers * experts),
            LinearShape("w3", hidden, inter, layers * experts),
            LinearShape("w2", inter, hidden, layers * experts),
        ]
    # granitemoe's experts are fused ParallelExperts tensors, not nn.Linear: LoRA cannot
    # target them, so they get no LinearShape.
    expert_params = experts * 3 * hidden * inter
    shared = 0
    if model_type == "granitemoeshared":
        shared = 3 * hidden * _int(config, "shared_intermediate_size", default=0)
    return layers * (expert_params + router + shared), layers * (expert_params + shared)


def _tied(config: dict[str, Any]) -> bool:
    # Absent means tied in PretrainedConfig but untied in LlamaConfig and its kin: a tied LM
    # head is the smaller count, so an absent key reads as tied.
    return bool(config.get("tie_word_embeddings", True))


def _gpt_bigcode(config: dict[str, Any]) -> ParameterCounts:
    """GPTBigCode (granite-13b/20b/34b-code, santacoder): learned positions, LayerNorms and
    biases everywhere, multi-query attention (one shared key/value head), a 2-matrix GELU MLP,
    LM head always tied to the token embedding."""
    vocab, hidden = _int(config, "vocab_size"), _int(config, "n_embd", "hidden_size")
    layers, heads = _int(config, "n_layer", "num_hidden_layers"), _int(config, "n_head")
    positions = _int(config, "n_positions", default=0)
    inter = _int(config, "n_inner", default=4 * hidden)
    head_dim = hidden // heads
    kv_width = head_dim if config.get("multi_query", True) else hidden
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
        embedding=(vocab + positions) * hidden,
        attention=attention,
        mlp=mlp,
        norms=(2 * layers + 1) * 2 * hidden,
        lm_head=0,
        quantizable=layers * (hidden * qkv + hidden * hidden + 2 * hidden * inter),
        linears=linears,
    )


def quantized_bits(config: dict[str, Any]) -> int | None:
    """Bits per weight of a pre-quantized checkpoint (GPTQ `bits`, bitsandbytes 4/8), None when
    the weights are not quantized. A quantization this cannot read raises."""
    quant = config.get("quantization_config")
    if not quant:
        return None
    if not isinstance(quant, dict):
        raise UnsupportedArchitecture(f"quantization_config {quant!r} is not a mapping")
    if isinstance(quant.get("bits"), int) and 1 <= quant["bits"] <= 16:
        return int(quant["bits"])
    if quant.get("load_in_4bit"):
        return 4
    if quant.get("load_in_8bit"):
        return 8
    raise UnsupportedArchitecture(
        f"quantization {quant.get('quant_method', '?')!r} without a readable bit width"
    )


@dataclasses.dataclass(frozen=True)
class Trainable:
    """Which parameters train: every one (method none), LoRA's adapters of rank `lora_r` on the
    modules named, or prompt tuning's virtual token embeddings."""

    method: str = "none"  # none | lora | pt
    lora_r: int = 8
    target_modules: tuple[str, ...] = ()

    def count(self, counts: ParameterCounts) -> int:
        if self.method == "lora":
            # PEFT matches a target name against the end of every module's name, so a name can
            # match several shapes (GPTBigCode's attn.c_proj and mlp.c_proj); names this cannot
            # size (e.g. a model-specific module) add nothing.
            wanted = set(self.target_modules)
            return sum(
                self.lora_r * (shape.inputs + shape.outputs) * shape.count
                for shape in counts.linears
                if shape.name in wanted
            )
        if self.method == "pt":
            return PROMPT_TUNING_VIRTUAL_TOKENS * counts.hidden_size
        return counts.total
