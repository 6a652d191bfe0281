"""The counting half of plan/step_trace.py: a dispatch mode that counts the bytes of every live
tensor storage, by part and phase. It imports torch at the top: only step_trace imports it, and
only inside the functions that trace, so the package's own imports stay light.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

from ado_actuators.sfttrainer.plan.step_trace import PARTS, PHASES


class LiveBytes(TorchDispatchMode):
    """Every storage an operator returns is counted until a weak reference sees it freed; each
    carries a part (where it was made, re-tagged by `count(tensor, part)`), and each phase
    keeps its largest total with the parts at that moment (a later step wins a tie)."""

    def __init__(self, record: bool = False) -> None:
        super().__init__()
        self.storages: dict[int, list] = {}  # id -> [weakref, bytes, part]
        self.parts = dict.fromkeys(PARTS, 0)
        self.phase, self.part = "setup", "weights"
        self.peaks: dict[str, tuple[int, dict[str, int]]] = {}
        self.record = record
        self.events: list[tuple[int, ...]] = []
        self.assumed: list[str] = []
        self.paused = 0

    def count(self, tensor: Any, part: str | None = None) -> None:
        storage = tensor.untyped_storage()
        key = id(storage)
        known = self.storages.get(key)
        if known is not None and known[0]() is storage:
            if part is not None and known[2] != part:
                self.parts[known[2]] -= known[1]
                self.parts[part] += known[1]
                known[2] = part
            return
        size, part = storage.nbytes(), part or self.part
        self.storages[key] = [weakref.ref(storage, functools.partial(self._gone, key)), size, part]
        self.parts[part] += size

    def _gone(self, key: int, _ref: Any) -> None:
        known = self.storages.pop(key, None)
        if known is not None:
            self.parts[known[2]] -= known[1]

    def resized(self, storage: Any) -> None:
        known = self.storages.get(id(storage))
        if known is not None and known[0]() is storage:
            self.parts[known[2]] += storage.nbytes() - known[1]
            known[1] = storage.nbytes()
            self.note()

    def note(self) -> None:
        total = sum(self.parts.values())
        best = self.peaks.get(self.phase)
        if best is None or total >= best[0]:
            self.peaks[self.phase] = (total, dict(self.parts))
        if self.record and self.phase in PHASES:
            self.events.append((PHASES.index(self.phase), *self.parts.values()))

    def enter(self, phase: str, part: str | None = None) -> None:
        self.phase, self.part = phase, part or phase
        self.note()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (
            func is torch.ops.aten._local_scalar_dense.default
            and isinstance(args[0], FakeTensor)
            and args[0].dtype == torch.bool
        ):
            # a fake tensor has no value; the model's own checks of its inputs ask for one
            # (`padding_mask.all()`, true for the mask of ones fms-hf-tuning's collator gives
            # full rows). Any other value a fake step asks for fails the trace.
            self.assumed.append("a boolean check of the inputs is true")
            return True
        out = func(*args, **(kwargs or {}))
        if not self.paused:
            tree_map_only(torch.Tensor, self.count, out)
            self.note()
        return out
