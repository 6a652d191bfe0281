"""Who this process is (rank, node) and what it runs with (library versions)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import socket

VERSIONED_PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "fms-hf-tuning")


@dataclasses.dataclass(frozen=True)
class RankIdentity:
    rank: int
    local_rank: int
    world_size: int
    hostname: str

    @classmethod
    def from_env(cls, environ=os.environ) -> RankIdentity:
        """torchrun/accelerate set RANK, LOCAL_RANK and WORLD_SIZE; a plain run has none."""
        rank = int(environ.get("RANK", "0"))
        return cls(
            rank=rank,
            local_rank=int(environ.get("LOCAL_RANK", str(rank))),
            world_size=int(environ.get("WORLD_SIZE", "1")),
            hostname=socket.gethostname(),
        )


def library_versions(packages=VERSIONED_PACKAGES) -> dict[str, str]:
    versions = {}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def accelerate_distributed_type() -> str | None:
    """The distributed mode accelerate actually ran this rank in (e.g. FSDP, MULTI_GPU,
    MULTI_CPU, NO); None when accelerate never initialised.

    It can differ from the config file's `distributed_type`: on CPU accelerate runs an FSDP
    config as MULTI_CPU (DDP over gloo), and a report must say what was measured.
    """
    import sys

    if "accelerate.state" not in sys.modules:
        return None
    from accelerate.state import AcceleratorState, PartialState

    for state in (AcceleratorState, PartialState):
        kind = state._shared_state.get("distributed_type")
        if kind is not None:
            return str(getattr(kind, "value", kind))
    return None
