"""A decoder layer (plan/memory/activations.Block) varied by hand in tests: what trains and
which attention runs are the configuration's parts the layer holds, changed one field at a
time, the rest of each part kept."""

from __future__ import annotations

import dataclasses

from ado_actuators.sfttrainer.contract.memory_trace import Attention
from ado_actuators.sfttrainer.plan.memory.activations import Block
from ado_actuators.sfttrainer.plan.model.training import PeftMethod


def trained(block: Block, method: PeftMethod, **tuning: int) -> Block:
    """`block` under another PEFT method (and any other of Tuning's fields given)."""
    return dataclasses.replace(
        block, tuning=dataclasses.replace(block.tuning, method=method, **tuning)
    )


def attending(block: Block, attention: Attention) -> Block:
    """`block` with another attention implementation."""
    return dataclasses.replace(
        block, kernels=dataclasses.replace(block.kernels, attention=attention)
    )
