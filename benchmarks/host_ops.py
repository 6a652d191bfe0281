"""The eager ops one decoder layer dispatches per micro-batch, counted: what plan/speed/host.py's
counts are. Builds tiny Llama models (transformers' LlamaForCausalLM, SDPA) of 2 and 4 layers on
the CPU, trains a micro-batch under torch's profiler, counts the aten ops the dispatcher saw from
Python and autograd (top-level ones: an op another op calls inside is not another dispatch from
the host), and differences the two models so only a layer's ops remain. Each variant changes one
thing: the weights train or not, LoRA adapters (PEFT) on 2, 3 or 4 linears, gradient
checkpointing reentrant or not. The counts do not depend on the widths: every op is dispatched
once whatever its size.

    python benchmarks/host_ops.py
"""

from __future__ import annotations

import sys

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


def model_of(
    layers: int, lora: tuple[str, ...] = (), checkpointing: str = "none", trainable: bool = False
) -> torch.nn.Module:
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    if checkpointing != "none":
        reentrant = checkpointing == "reentrant"
        model.gradient_checkpointing_enable({"use_reentrant": reentrant})
        model.enable_input_require_grads()
    if lora:
        return get_peft_model(model, LoraConfig(r=8, target_modules=list(lora), lora_dropout=0.0))
    if not trainable:
        model.requires_grad_(False)
        model.get_input_embeddings().weight.requires_grad_(True)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
