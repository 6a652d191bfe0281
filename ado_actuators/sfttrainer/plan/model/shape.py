"""A model's shape, read once from its config.json into one typed, frozen record: what the
parameter count (plan/model/architecture.py), the memory prediction (plan/memory/peak.py) and
the step time (plan/speed/prediction.py) read, each key spelled as its family spells it
(plan/model/families/). No weights, no torch, no transformers.

Reading never fails: a shape config.json omits reads as None, and one it gives as no count is
kept as a problem; the reader that needs it (`ModelShape.count`, `ModelShape.needed`) raises.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.plan.model.families.registry import family_of
from ado_actuators.sfttrainer.plan.model.families.spec import UNCOUNTED_SPELLING, Family, Spelling
from ado_actuators.sfttrainer.plan.model.vision import VisionShape

RESIDUAL_DROPOUT_DEFAULT = 0.1
"""GPTBigCodeConfig's resid_pdrop where config.json omits it."""


class UnsupportedArchitecture(ValueError):
    """config.json names a model the planner cannot count; the bound is then not computed."""


def language_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's settings: multimodal configs nest them under text_config (the
    vision tower and projector are `ModelShape.vision`, plan/model/vision.py)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) and text.get("model_type") else config


@dataclasses.dataclass(frozen=True)
class Quantization:
    """A pre-quantized checkpoint's quantization_config, as config.json states it."""

    method: str = ""  # quant_method in lower case; "" where unnamed
    bits: int | None = None  # GPTQ's bits, or bitsandbytes' load_in_4bit / load_in_8bit
    bitsandbytes_load: bool = False  # load_in_4bit or load_in_8bit
    problem: str | None = None  # stated, but with no bit width this can read

    @classmethod
    def of(cls, stated: Any) -> Quantization | None:  # config.json's JSON
        """None where config.json states no quantization."""
        if not stated:
            return None
        if not isinstance(stated, dict):
            return cls(problem=f"quantization_config {stated!r} is not a mapping")
        method = str(stated.get("quant_method") or "").lower()
        loaded = bool(stated.get("load_in_4bit") or stated.get("load_in_8bit"))
        bits = stated.get("bits")
        if isinstance(bits, int) and 1 <= bits <= 16:
            return cls(method, int(bits), loaded)
        if loaded:
            return cls(method, 4 if stated.get("load_in_4bit") else 8, loaded)
        why = f"quantization {stated.get('quant_method', '?')!r} without a readable bit width"
        return cls(method, None, loaded, why)

    @property
    def bitsandbytes(self) -> bool:
        return self.method == "bitsandbytes" or self.bitsandbytes_load


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """The language model's shapes; None where config.json gives none (or no count: `problems`).

    The `*_given` fields are as config.json states them (a 0 as absent); their properties
    without the suffix fill in what transformers would."""

    model_type: str
    vocab: int | None
    hidden: int | None
    layers: int | None
    heads: int | None
    kv_heads_given: int | None
    head_dim_given: int | None
    intermediate_given: int | None
    experts_given: int | None  # num_local_experts
    experts_per_token_given: int | None  # num_experts_per_tok
    shared_intermediate: int  # granitemoeshared's shared MLP; 0 without one
    positions: int | None  # learned positions (the family's spelling; None for rotary ones)
    tied_embeddings: bool
    attention_bias: bool
    mlp_bias: bool
    multi_query: bool  # GPTBigCode's one shared key/value head
    residual_dropout: bool  # GPTBigCode's resid_pdrop > 0
    problems: tuple[str, ...] = ()
    quantization: Quantization | None = None  # config.json's own, beside the language model's
    """What config.json gives that is no count, one sentence each."""
    vision: VisionShape | None = None  # a vision-language model's image side; None: text only

    @classmethod
    def of(cls, config: dict[str, Any]) -> ModelShape:
        """The shape of the model a parsed config.json describes (its language model's, for a
        multimodal one)."""
        text = language_config(config)
        model_type = str(text.get("model_type") or "")
        family = family_of(model_type)
        spelling = family.spelling if family else UNCOUNTED_SPELLING
        reader = _Reader(text)
        dropout = text.get("resid_pdrop", RESIDUAL_DROPOUT_DEFAULT)
        return cls(
            model_type=model_type,
            vocab=reader.count("vocab_size"),
            hidden=reader.count(*spelling.hidden),
            layers=reader.count(*spelling.layers),
            heads=reader.count(*spelling.heads),
            kv_heads_given=reader.count("num_key_value_heads") or None,
            head_dim_given=reader.count("head_dim") or None,
            intermediate_given=reader.count(*spelling.intermediate) or None,
            experts_given=reader.count("num_local_experts") or None,
            experts_per_token_given=reader.count("num_experts_per_tok") or None,
            shared_intermediate=reader.count("shared_intermediate_size") or 0,
            positions=reader.count(*spelling.positions) if spelling.positions else None,
            # absent means tied in PretrainedConfig but untied in LlamaConfig and its kin: a
            # tied LM head is the smaller count, so an absent key reads as tied
            tied_embeddings=bool(text.get("tie_word_embeddings", True)),
            attention_bias=bool(text.get("attention_bias")),
            mlp_bias=bool(text.get("mlp_bias")),
            multi_query=bool(text.get("multi_query", True)),
            residual_dropout=isinstance(dropout, int | float) and dropout > 0,
            problems=tuple(reader.problems),
            quantization=Quantization.of(config.get("quantization_config")),
            vision=VisionShape.of(config),
        )

    @property
    def family(self) -> Family | None:
        """The family this model_type belongs to (plan/model/families/); None for one counted
        from a trace or transformers' meta-device model."""
        return family_of(self.model_type)

    @property
    def spelling(self) -> Spelling:
        family = self.family
        return family.spelling if family else UNCOUNTED_SPELLING

    def needed(self, name: str) -> int:
        """The shape `name` (a field), or KeyError naming config.json's key when it has none."""
        value = getattr(self, name)
        if value is None:
            raise KeyError(" / ".join(_keys(self.spelling, name)))
        return int(value)

    def count(self, name: str) -> int:
        """`needed`, for the parameter count: UnsupportedArchitecture instead of KeyError, and
        for any shape config.json gives that is no count."""
        if self.problems:
            raise UnsupportedArchitecture(self.problems[0])
        try:
            return self.needed(name)
        except KeyError as missing:
            raise UnsupportedArchitecture(f"config.json lacks {missing.args[0]}") from None

    @property
    def quantized_bits(self) -> int | None:
        """Bits per weight of a pre-quantized checkpoint, None when the weights are not
        quantized; UnsupportedArchitecture for a quantization this cannot read."""
        if self.quantization is None:
            return None
        if self.quantization.problem:
            raise UnsupportedArchitecture(self.quantization.problem)
        return self.quantization.bits

    @property
    def kv_heads(self) -> int:
        """Key/value heads: config.json's, else the family's default, else one per query head."""
        family = self.family
        default = family.default_kv_heads if family else None
        return self.kv_heads_given or default or self.needed("heads")

    @property
    def head_dim(self) -> int:
        """A head's width: config.json's head_dim, else the whole part of hidden / heads."""
        return self.head_dim_given or self.needed("hidden") // self.needed("heads")

    @property
    def intermediate(self) -> int:
        """The MLP's width; GPTBigCode's n_inner defaults to 4 x hidden."""
        family = self.family
        if self.intermediate_given is None and family and family.layout == "gpt_bigcode":
            return 4 * self.needed("hidden")
        return self.needed("intermediate_given")

    @property
    def q_width(self) -> int:
        """The queries' width: heads x head_dim; GPTBigCode's c_attn gives queries hidden."""
        if self.fused_attention:
            return self.needed("hidden")
        return self.needed("heads") * self.head_dim

    @property
    def kv_width(self) -> int:
        """The keys' (and the values') width: one head under multi-query attention."""
        if self.fused_attention:
            return self.head_dim if self.multi_query else self.needed("hidden")
        return self.kv_heads * self.head_dim

    @property
    def fused_attention(self) -> bool:
        family = self.family
        return bool(family and family.layout == "gpt_bigcode")

    @property
    def experts(self) -> int:
        return self.experts_given or 1

    @property
    def experts_per_token(self) -> int:
        return self.experts_per_token_given or 1


def _keys(spelling: Spelling, name: str) -> tuple[str, ...]:
    """config.json's keys for the field `name`, as the family spells them."""
    spelled = {
        "hidden": spelling.hidden,
        "layers": spelling.layers,
        "heads": spelling.heads,
        "intermediate_given": spelling.intermediate,
        "positions": spelling.positions,
        "vocab": ("vocab_size",),
        "experts_given": ("num_local_experts",),
    }
    return spelled.get(name) or (name,)


class _Reader:
    """Reads counts from a config.json, keeping what is no count as a problem."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.problems: list[str] = []

    def count(self, *names: str) -> int | None:
        """The first of `names` config.json gives, None when it gives none."""
        for name in names:
            value = self.config.get(name)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                self.problems.append(f"config.json {name} {value!r} is not a count")
                return None
            return value
        return None
