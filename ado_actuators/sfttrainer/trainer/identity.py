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
