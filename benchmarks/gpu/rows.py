"""The rows the GPU benchmark measures: model x method x batch size x sequence length x launcher.
Plain data, importing nothing of the engine (check.py reads the labels before any training)."""

from __future__ import annotations

import dataclasses

LAUNCHERS = ("single", "FSDP", "DDP")
"""single: the engine's own one-GPU launch; FSDP / DDP: the plan's accelerate config, one rank."""


@dataclasses.dataclass(frozen=True)
class Config:
    model: str
    method: str
    batch_size: int
    seq: int
    expect_oom: bool = False
    launcher: str = "single"
    bare: bool = True
    """Also train the same command line without the wrapper (the observer effect)."""

    @property
    def label(self) -> str:
        launcher = "" if self.launcher == "single" else f"-{self.launcher.lower()}1"
        oom = "-oom" if self.expect_oom else ""
        return f"{self.model}-{self.method}-b{self.batch_size}-s{self.seq}{launcher}{oom}"

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher {self.launcher!r}: one of {', '.join(LAUNCHERS)}")


GRANITE = "granite-3.1-2b"
# full fine-tuning of 2.5 B parameters at 32 x 8192: the logits alone are ~50 GB (fp32)
GRANITE_OOM = dict(
    model=GRANITE, method="full", batch_size=32, seq=8192, expect_oom=True, bare=False
)
SETS: dict[str, dict[str, tuple[Config, ...]]] = {
    "bench": {
        "gpu": (
            Config(GRANITE, "full", 4, 1024),
            Config(GRANITE, "full", 8, 2048),
            Config(GRANITE, "lora", 4, 1024),
            Config(GRANITE, "lora", 8, 2048),
            Config("llama3.1-8b", "lora", 4, 2048),
            # full fine-tuning of 8 B parameters at 32 x 8192: far beyond one GPU's memory
            Config("llama3.1-8b", "full", 32, 8192, expect_oom=True),
        ),
        "cpu": (
            Config("tiny", "full", 2, 64),
            Config("tiny", "lora", 2, 64),
            Config("tiny", "full", 2, 64, expect_oom=True),
        ),
    },
    # device-check.sh: the observer effect, the plan's own FSDP and DDP configs on one rank,
    # and a real OOM in one process and under FSDP
    "check": {
        "gpu": (
            Config(GRANITE, "full", 4, 1024),
            Config(GRANITE, "lora", 4, 1024),
            Config(GRANITE, "full", 4, 1024, launcher="FSDP", bare=False),
            Config(GRANITE, "full", 4, 1024, launcher="DDP", bare=False),
            Config(**GRANITE_OOM),
            Config(**GRANITE_OOM, launcher="FSDP"),
        ),
        "cpu": (
            Config("tiny", "full", 2, 64),
            Config("tiny", "lora", 2, 64),
            Config("tiny", "full", 2, 64, launcher="FSDP", bare=False),
            Config("tiny", "full", 2, 64, launcher="DDP", bare=False),
            Config("tiny", "full", 2, 64, expect_oom=True, bare=False),
            Config("tiny", "full", 2, 64, launcher="FSDP", expect_oom=True, bare=False),
        ),
    },
}
