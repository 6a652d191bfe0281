"""What FSDP keeps through backward when its layer units hold only frozen weights (CPU, gloo,
one rank, a few seconds): the evidence for plan/memory/fsdp.held_input_gradient_bytes.

    python benchmarks/fsdp_frozen_layers.py

Eight checkpointed residual blocks, each its own FSDP unit, fed by a trainable layer (the
embedding's stand-in, so the blocks' inputs require grad as under PEFT's
enable_input_require_grads). For each of frozen/trainable blocks x reentrant/non-reentrant
checkpointing x with/without FSDP it counts, at the moment the gradient reaches the first
layer (the end of the decoder's backward), how many of the recomputed block inputs are still
alive and how many hold a gradient. fms-acceleration's A100 runs (transformers' default
reentrant checkpointing, LoRA under FSDP) peak ~0.93 GiB per 4,096-token sample higher on 2
and 4 GPUs than on 1 for Mistral-7B: 31 layers' hidden-state-sized gradients.
"""

from __future__ import annotations

import itertools
import os
import socket
import warnings
import weakref

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.utils.checkpoint import checkpoint

BLOCKS, WIDTH = 8, 64


class Block(nn.Module):
    def __init__(self, inputs: list) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)
        self.inputs = inputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inputs.append(weakref.ref(x))
        return x + torch.tanh(self.linear(x))


class Stack(nn.Module):
    def __init__(self, inputs: list) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(inputs) for _ in range(BLOCKS))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor, reentrant: bool) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=reentrant)
        return self.head(x).sum()


def held(frozen: bool, reentrant: bool, fsdp: bool) -> tuple[int, int]:
    """(inputs alive, inputs holding a gradient) when the gradient reaches the first layer."""
    inputs: list = []
    stack = Stack(inputs)
    if frozen:
        for block in stack.blocks:
            block.linear.requires_grad_(False)
    if fsdp:
        stack = FullyShardedDataParallel(
            stack, auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=torch.device("cpu")
        )
    first = nn.Linear(WIDTH, WIDTH)
    hidden = first(torch.randn(2, 16, WIDTH))
    seen: list = []
    hidden.register_hook(
        lambda grad: seen.append(
            (
                sum(ref() is not None for ref in inputs),
                sum(ref() is not None and ref().grad is not None for ref in inputs),
            )
        )
    )
    loss = stack(hidden, reentrant)
    inputs.clear()  # the first forward's inputs: only the recomputed ones count
    loss.backward()
    return seen[0]


def free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def main() -> None:
    warnings.filterwarnings("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    print(f"torch {torch.__version__}; {BLOCKS} checkpointed blocks, each an FSDP unit")
    print(f"{'blocks':<10} {'checkpoint':<14} {'FSDP':<5} inputs alive / with a gradient")
    for frozen, reentrant, fsdp in itertools.product((True, False), repeat=3):
        alive, with_grad = held(frozen, reentrant, fsdp)
        print(
            f"{'frozen' if frozen else 'trainable':<10} "
            f"{'reentrant' if reentrant else 'non-reentrant':<14} {'yes' if fsdp else 'no':<5} "
            f"{alive} / {with_grad}"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
