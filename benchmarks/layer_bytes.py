"""The bytes one decoder layer's memory-bound kernels move per token, counted op by op: what
plan/speed/layer_bytes.py's figures are. Builds tiny models (transformers' Llama, GPTBigCode and
MPT) of 2 and 4 layers on the CPU in bfloat16, runs a micro-batch's forward under a dispatch mode
that adds up every aten op's tensors in and out (an op reads its inputs and writes its outputs
once: no fusion), and differences the two models so only a layer's ops remain. Views move
nothing; the matmuls, the attention kernel and the embedding are priced elsewhere and left out.
Each op is charged to the innermost module it ran in: a norm, the attention (rotary embedding,
layout copies), the MLP (its activation and, gated, the product) or the layer itself (the
residual adds). Per hidden element, or per MLP element for the MLP.

    python benchmarks/layer_bytes.py
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import transformers
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

HIDDEN, HEADS, TOKENS, BATCH = 256, 4, 128, 2
PRICED_ELSEWHERE = ("mm", "addmm", "bmm", "_scaled_dot_product", "embedding", "_unsafe_view")
"""Matmuls and attention (their own parts), the embedding, and reshapes that copy nothing."""
EAGER_SCORES = ("_softmax", "masked_fill", "baddbmm", "div")
"""Eager attention's ops on the scores (MPT's only attention in transformers): quadratic in the
length, not the memory-bound kernels of a flash-attention layer."""


class _Bytes(TorchDispatchMode):
    def __init__(self, where: list[str]) -> None:
        super().__init__()
        self.where = where
        self.bytes: dict[str, float] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view or name.startswith(PRICED_ELSEWHERE):
            return out
        if self.where[-1] == "attention" and name.startswith(EAGER_SCORES):
            return out
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        moved = sum(t.numel() * t.element_size() for t in tensors)
        self.bytes[self.where[-1]] = self.bytes.get(self.where[-1], 0.0) + moved
        return out


def _part(module: torch.nn.Module) -> str | None:
    kind = type(module).__name__
    if kind.endswith(("RMSNorm", "LayerNorm")):
        return "norm"
    if kind.endswith(("Attention", "SdpaAttention")):
        return "attention"
    if kind.endswith("MLP"):
        return "mlp"
    if kind.endswith(("DecoderLayer", "Block")):
        return "layer"
    return None


def _label(model: torch.nn.Module, where: list[str]) -> None:
    for module in model.modules():
        part = _part(module)
        if part is None:
            continue
        module.register_forward_pre_hook(lambda m, a, p=part: where.append(p))
        module.register_forward_hook(lambda m, a, o: (where.pop(), None)[1])


def forward_bytes(build: Any, layers: int) -> dict[str, float]:
    """The forward's bytes by part, and the backward's in all (`backward`: autograd runs no
    module hooks, so its ops are not charged to a part)."""
    torch.manual_seed(0)
    model = build(layers).to(torch.bfloat16)
    where = ["model"]
    _label(model, where)
    ids = torch.randint(0, 250, (BATCH, TOKENS))
    counter = _Bytes(where)
    with counter:
        loss = model(input_ids=ids, labels=ids).loss
    backward = _Bytes(["backward"])
    with backward:
        loss.backward()
    return counter.bytes | backward.bytes


def llama(layers: int) -> torch.nn.Module:
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=HIDDEN,
        intermediate_size=688,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        attn_implementation="sdpa",
    )
    return transformers.LlamaForCausalLM(config)


def gpt_bigcode(layers: int) -> torch.nn.Module:
    config = transformers.GPTBigCodeConfig(
        vocab_size=256,
        n_embd=HIDDEN,
        n_inner=4 * HIDDEN,
        n_layer=layers,
        n_head=HEADS,
        multi_query=False,
        attn_implementation="sdpa",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPTBigCodeForCausalLM(config)


def mpt(layers: int) -> torch.nn.Module:
    config = transformers.MptConfig(
        vocab_size=256, d_model=HIDDEN, n_heads=HEADS, n_layers=layers, expansion_ratio=4
    )
    return transformers.MptForCausalLM(config)


MODELS = {"Llama": (llama, 688), "GPTBigCode": (gpt_bigcode, 1024), "MPT": (mpt, 1024)}


def per_layer(build: Any) -> dict[str, float]:
    """Bytes per token of one layer, by part."""
    two, four = forward_bytes(build, 2), forward_bytes(build, 4)
    tokens = BATCH * TOKENS
    return {part: (four.get(part, 0) - two.get(part, 0)) / 2 / tokens for part in four}


def forward_total(found: dict[str, float]) -> float:
    return sum(moved for part, moved in found.items() if part != "backward")


def main() -> int:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; forward, bf16")
    for name, (build, mlp) in MODELS.items():
        found = per_layer(build)
        print(
            f"  {name:<11} norms {found.get('norm', 0) / HIDDEN:5.1f} a hidden element (two), "
            f"attention {found.get('attention', 0) / HIDDEN:5.1f}, residual adds "
            f"{found.get('layer', 0) / HIDDEN:5.1f}; MLP {found.get('mlp', 0) / mlp:5.1f} an MLP "
            f"element; backward over forward {found['backward'] / forward_total(found):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
