"""The eager ops one decoder layer dispatches per micro-batch, counted: what plan/speed/host.py's
counts are. Builds tiny Llama models (transformers' LlamaForCausalLM, SDPA) of 2 and 4 layers on
the CPU, trains a micro-batch under torch's profiler, counts the aten ops the dispatcher saw from
Python and autograd (top-level ones: an op another op calls inside is not another dispatch from
the host), and differences the two models so only a layer's ops remain. Each variant changes one
thing: the weights train or not, LoRA adapters (PEFT) on 2, 3 or 4 linears, gradient
checkpointing reentrant or not. The counts do not depend on the widths: every op is dispatched
once whatever its size.

Then the expert loops (plan/speed/experts.py's DISPATCH): transformers' Mixtral and GraniteMoE
of 4 and 8 experts, 2 and 4 layers, experts frozen and trained. The layers' difference per
expert is the loop's per expert; the rest is the layer's own (attention, norms, router, the
output's assembly), of which plan/speed/experts.py keeps what a Llama layer's counts above
(host.py's, charged to every layer) do not already hold.

    python benchmarks/host_ops.py
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from peft import LoraConfig, get_peft_model
from torch.profiler import ProfilerActivity, profile
from transformers import LlamaConfig, LlamaForCausalLM

VARIANTS: dict[str, dict] = {
    "frozen": {},
    "trainable": {"trainable": True},
    "lora q v": {"lora": ("q_proj", "v_proj")},
    "lora q k v o": {"lora": ("q_proj", "k_proj", "v_proj", "o_proj")},
    "lora mlp": {"lora": ("gate_proj", "up_proj", "down_proj")},
    "frozen, reentrant checkpointing": {"checkpointing": "reentrant"},
    "trainable, reentrant checkpointing": {"trainable": True, "checkpointing": "reentrant"},
    "trainable, non-reentrant checkpointing": {
        "trainable": True,
        "checkpointing": "non_reentrant",
    },
    "lora q k v o, reentrant checkpointing": {
        "lora": ("q_proj", "k_proj", "v_proj", "o_proj"),
        "checkpointing": "reentrant",
    },
}


TINY = {
    "vocab_size": 256,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "attn_implementation": "sdpa",
}
"""The tiny layer every count builds: the expert loops' per-layer counts are differenced against
the Llama layer's, so both are built alike."""


def _built(model_class: Any, config: Any, trainable: bool) -> torch.nn.Module:
    """The model in bfloat16, the same weights each time; frozen but for the embedding (so the
    backward runs through every layer) unless `trainable`."""
    torch.manual_seed(0)
    model = model_class(config).to(torch.bfloat16)
    if not trainable:
        model.requires_grad_(False)
        model.get_input_embeddings().weight.requires_grad_(True)
    return model


def model_of(
    layers: int, lora: tuple[str, ...] = (), checkpointing: str = "none", trainable: bool = False
) -> torch.nn.Module:
    config = LlamaConfig(intermediate_size=128, num_hidden_layers=layers, **TINY)
    model = _built(LlamaForCausalLM, config, trainable=trainable or bool(lora))
    if checkpointing != "none":
        reentrant = checkpointing == "reentrant"
        model.gradient_checkpointing_enable({"use_reentrant": reentrant})
        model.enable_input_require_grads()
    if lora:
        return get_peft_model(model, LoraConfig(r=8, target_modules=list(lora), lora_dropout=0.0))
    return model


def _dispatched(prof: profile) -> int:
    def top(event) -> bool:
        parent = event.cpu_parent
        return event.name.startswith("aten::") and not (
            parent is not None and parent.name.startswith("aten::")
        )

    return sum(1 for event in prof.events() if top(event))


def ops(model: torch.nn.Module) -> tuple[int, int]:
    """Ops dispatched by one micro-batch's forward and by its backward."""
    model.train()
    tokens = torch.randint(0, 256, (2, 32))
    for _ in range(2):  # first calls initialise caches and lazy state
        model(input_ids=tokens, labels=tokens).loss.backward()
        model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU]) as forward:
        loss = model(input_ids=tokens, labels=tokens).loss
    with profile(activities=[ProfilerActivity.CPU]) as backward:
        loss.backward()
    return _dispatched(forward), _dispatched(backward)


def per_layer(**variant) -> tuple[float, float]:
    """A layer's forward and backward ops: 4 layers' less 2 layers', halved."""
    (f2, b2), (f4, b4) = ops(model_of(2, **variant)), ops(model_of(4, **variant))
    return (f4 - f2) / 2, (b4 - b2) / 2


EXPERT_FAMILIES = ("mixtral", "granitemoe")


def moe_of(family: str, layers: int, experts: int, trainable: bool) -> torch.nn.Module:
    """A tiny model of `family`'s experts (2 a token), the weights frozen unless `trainable`."""
    import transformers

    config_class, model_class = {
        "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
        "granitemoe": (transformers.GraniteMoeConfig, transformers.GraniteMoeForCausalLM),
    }[family]
    config = config_class(
        intermediate_size=32,
        num_hidden_layers=layers,
        num_local_experts=experts,
        num_experts_per_tok=2,
        **TINY,
    )
    return _built(model_class, config, trainable)


def expert_loop(family: str, trainable: bool) -> dict[str, float]:
    """Per expert and per layer (beyond host.py's Llama layer), forward and backward."""
    found = {}
    for experts in (4, 8):
        (f2, b2) = ops(moe_of(family, 2, experts, trainable))
        (f4, b4) = ops(moe_of(family, 4, experts, trainable))
        found[experts] = ((f4 - f2) / 2, (b4 - b2) / 2)
    forward_expert = (found[8][0] - found[4][0]) / 4
    backward_expert = (found[8][1] - found[4][1]) / 4
    return {
        "forward_per_expert": forward_expert,
        "backward_per_expert": backward_expert,
        "forward_per_layer": found[4][0] - 4 * forward_expert,
        "backward_per_layer": found[4][1] - 4 * backward_expert,
    }


def main() -> int:
    import peft
    import transformers

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}"
    )
    for name, variant in VARIANTS.items():
        forward, backward = per_layer(**variant)
        print(
            f"  {name:<40} forward {forward:5.0f}  backward {backward:5.0f}  both {forward + backward:5.0f}"
        )
    print("expert loops, 2 experts a token (whole layer, per layer and per expert):")
    for family in EXPERT_FAMILIES:
        for trainable in (False, True):
            found = expert_loop(family, trainable)
            state = "trained" if trainable else "frozen"
            print(f"  {family:<10} {state:<7} " + ", ".join(f"{k} {v:g}" for k, v in found.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
