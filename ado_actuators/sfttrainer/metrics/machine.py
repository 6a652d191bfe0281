"""The machine block of a row's metadata, from the ranks that described their node. Pure.

Local rank 0 of each node describes it (trainer/machine.py). The row carries rank 0's node;
another node is added under `other_nodes` only where it differs in what makes figures differ
(CPU, GPUs, driver, CUDA, NCCL): a 2-node measurement on two identical nodes reads as one.
"""

from __future__ import annotations

from typing import Any

from ado_actuators.sfttrainer.contract.trainer_io import Machine, RankReport


def _kind(machine: Machine) -> tuple:
    return (
        machine.cpu_model,
        tuple(g.name for g in machine.gpus),
        machine.gpu_driver,
        machine.cuda_runtime,
        machine.nccl,
        machine.interconnect,
    )


def machine_metadata(reports: list[RankReport]) -> dict[str, Any] | None:
    """Rank 0's node, with each node unlike it; None where no rank described its node."""
    described = [r.machine for r in sorted(reports, key=lambda r: r.rank) if r.machine]
    if not described:
        return None
    first, block = described[0], described[0].model_dump(mode="json")
    others = [m.model_dump(mode="json") for m in described[1:] if _kind(m) != _kind(first)]
    block["nodes"] = len({m.node for m in described})
    if others:
        block["other_nodes"] = others
    return block


def machine_note(reports: list[RankReport]) -> str | None:
    """What a row measured on unlike nodes must say."""
    block = machine_metadata(reports)
    if not block or "other_nodes" not in block:
        return None
    nodes = ", ".join(n["node"] for n in block["other_nodes"])
    return (
        f"the nodes differ (CPU, GPUs, driver, CUDA, NCCL or links): {nodes} unlike "
        f"{block['node']}; the metadata's machine block has each"
    )
