"""What a measurement can end as. Each layer turns the failures it understands into one."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Measured:
    """A run that trained: its properties (is_valid = 1 among them)."""

    properties: dict[str, float]
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Invalid:
    """A configuration the spec deems invalid, or one that ran out of GPU memory.

    Stored as is_valid = 0 (and memoised): measuring it again gives the same answer.
    """

    reason: str
    gpu_oom: bool = False
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    properties: dict[str, float] = dataclasses.field(default_factory=dict)
    """Figures known without a full run (e.g. the memory lower bound); is_valid is added."""


@dataclasses.dataclass(frozen=True)
class Failed:
    """Anything else: nothing is stored and a rerun measures the entity again."""

    reason: str
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


Outcome = Measured | Invalid | Failed
