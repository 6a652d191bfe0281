"""A model's matmul weights counted from transformers' own model, built from config.json on the
meta device (no memory, no weights): for the step time of architectures plan/model/architecture.py
does not count (Granite 4.0's Mamba hybrids, Bloom, and whatever else transformers builds).

Counted: every nn.Linear (the LM head included, tied or not), the experts' weights (stacked
3-D parameters of one slice per expert, not a convolution's, or an expert's own nn.Linear) and
the layers that hold attention. Needs torch and transformers (the fms extra); without them it
raises MetaCountUnavailable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from collections.abc import Iterator
from typing import Any

from ado_actuators.sfttrainer.plan.model.shape import (
    ModelShape,
    UnsupportedArchitecture,
    language_config,
)

ATTENTION_WORDS = ("attn", "attention")


class MetaCountUnavailable(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class MetaCounts:
    layers: int
    attention_layers: int
    hidden: int
    heads: int  # query heads (0: transformers' config names none)
    total: int
    linear: int  # every nn.Linear weight, the LM head's included
    attention_linear: int  # those inside attention modules
    lm_head: int
    experts: int  # stacked expert weights, all experts
    expert_share: float  # experts a token uses / experts
    linears: tuple[tuple[str, int, int, int], ...]  # (name, inputs, outputs, count)
    linear_names: frozenset[str] = frozenset()  # every nn.Linear's last name, experts' included
    stacked_experts: bool = False  # experts as 3-D parameters sliced per expert, not nn.Linear
    rms_norm: bool = True  # its norms are RMSNorms (False: LayerNorms)
    rotary: bool = True  # it has a rotary embedding (False: learned, ALiBi or no positions)

    @property
    def active_matmul(self) -> float:
        return self.linear + self.experts * self.expert_share


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # transformers'
    try:
        yield
    finally:
        logging.set_verbosity(level)


def _model(config: dict[str, Any]) -> Any:
    try:
        import torch
        import transformers
    except ImportError as error:
        raise MetaCountUnavailable(f"counting it needs torch and transformers: {error}") from None
    try:
        with _quiet(), torch.device("meta"), _no_init():
            built = transformers.AutoConfig.for_model(**config)
            model = transformers.AutoModelForCausalLM.from_config(built)  # type: ignore[no-untyped-call]  # transformers'
        model.tie_weights()  # skipped with the initialisation: a tied LM head is one weight
        return model
    except Exception as error:  # any failure of transformers to build it: not counted
        raise MetaCountUnavailable(f"transformers cannot build it: {error}") from None


def _no_init() -> contextlib.AbstractContextManager[Any]:
    """No weight initialisation: on the meta device it sets nothing, yet walks every module (most
    of a build's time: 2 of 2.3 s for the seven Granite 4.0 models, which a preview builds)."""
    try:
        from transformers.modeling_utils import no_init_weights
    except ImportError:
        return contextlib.nullcontext()
    found: contextlib.AbstractContextManager[Any] = no_init_weights()
    return found


@functools.cache
def _counts(config_json: str) -> MetaCounts:
    import torch

    config = language_config(json.loads(config_json))
    shape = ModelShape.of(config)
    model = _model(config)
    linears: dict[tuple[str, int, int], int] = {}
    linear = attention_linear = lm_head = experts = 0
    attention_layers = set()
    names = {
        p.rsplit(".", 1)[-1] for p, m in model.named_modules() if isinstance(m, torch.nn.Linear)
    }
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and ".experts." in path:
            experts += module.weight.numel()  # one expert's own nn.Linear (Mixtral's kind)
        elif isinstance(module, torch.nn.Linear):
            size = module.weight.numel()
            linear += size
            key = (path.rsplit(".", 1)[-1], module.in_features, module.out_features)
            linears[key] = linears.get(key, 0) + 1
            lm_head += size if path.endswith("lm_head") else 0
            if any(word in path.lower() for word in ATTENTION_WORDS):
                attention_linear += size
                attention_layers.add(path.rsplit(".", 2)[0])
    count = shape.experts_given or 0
    stacked_experts = 0
    for path, parameter in model.named_parameters():
        stacked = parameter.dim() == 3 and parameter.shape[0] == count and "conv" not in path
        stacked_experts += parameter.numel() if stacked else 0
    experts += stacked_experts
    share = shape.experts_per_token / count if count > 1 else 1.0
    # the built config: transformers maps each family's own names (MPT's n_layers, d_model,
    # n_heads; GPT-2's n_layer, n_embd) onto the common ones
    built = model.config
    layers = int(getattr(built, "num_hidden_layers", 0) or 0)
    if layers <= 0:
        raise MetaCountUnavailable("transformers' config names no number of layers")
    return MetaCounts(
        layers=layers,
        attention_layers=len(attention_layers),
        hidden=int(getattr(built, "hidden_size", 0) or 0),
        heads=int(getattr(built, "num_attention_heads", 0) or 0),
        total=sum(p.numel() for p in model.parameters()),
        linear=linear,
        attention_linear=attention_linear,
        lm_head=lm_head,
        experts=experts,
        expert_share=share,
        linears=tuple((n, i, o, c) for (n, i, o), c in linears.items()),
        linear_names=frozenset(names),
        stacked_experts=stacked_experts > 0,
        **_layer_kernels(model),
    )


def _layer_kernels(model: Any) -> dict[str, bool]:
    """The norms and positions the built model's modules say it runs, by their class names:
    transformers names every family's norm *RMSNorm or LayerNorm and its rotary embedding
    *RotaryEmbedding."""
    kinds = {type(module).__name__ for module in model.modules()}
    return {
        "rms_norm": any(kind.endswith("RMSNorm") for kind in kinds),
        "rotary": any("Rotary" in kind for kind in kinds),
    }


def meta_counts(config: dict[str, Any]) -> MetaCounts:
    """Raises MetaCountUnavailable where transformers (or torch) cannot build the model. A
    Granite 4.0 model is counted from config.json alone (plan/model/hybrid.py, equal to what
    transformers builds): a space of them previews without importing either."""
    from ado_actuators.sfttrainer.plan.model import hybrid

    if hybrid.is_hybrid(config):
        try:
            return MetaCounts(**hybrid.meta_fields(config))
        except (KeyError, TypeError, ValueError, UnsupportedArchitecture) as error:
            raise MetaCountUnavailable(f"config.json cannot be counted: {error}") from None
    return _counts(json.dumps(config, sort_keys=True))
