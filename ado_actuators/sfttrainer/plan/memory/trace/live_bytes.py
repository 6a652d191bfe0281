"""The counting half of plan/memory/trace/step.py: a dispatch mode that counts the bytes of every live
tensor storage, by part and phase. It imports torch at the top: only plan/memory/trace/step.py imports it, and
only inside the functions that trace, so the package's own imports stay light.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_map_only

from ado_actuators.sfttrainer.contract.memory_trace import PARTS, PHASES
from ado_actuators.sfttrainer.plan.memory.trace.objects import Tensor


class LiveBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's mode is untyped
    """Every storage an operator returns is counted until a weak reference sees it freed; each
    carries a part (where it was made, re-tagged by `count(tensor, part)`), and each phase
    keeps its largest total with the parts at that moment (a later step wins a tie)."""

    def __init__(self, record: bool = False, fake: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch's mode is untyped
        self.shadows = Shadows() if fake else None
        self.storages: dict[int, list[Any]] = {}  # id -> [weakref, bytes, part]
        self.parts = dict.fromkeys(PARTS, 0)
        self.phase, self.part = "setup", "weights"
        self.peaks: dict[str, tuple[int, dict[str, int]]] = {}
        self.record = record
        self.events: list[tuple[int, ...]] = []
        self.assumed: list[str] = []
        self.paused = 0
        self.rest: dict[str, int] = {}

    def count(self, tensor: Tensor, part: str | None = None) -> None:
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

    # torch's dispatch protocol: any operator, with any values
    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self.shadows is not None:
            out = self._with_values(func, args, kwargs)
        else:
            out = func(*args, **kwargs)
        if not self.paused:
            tree_map_only(torch.Tensor, self.count, out)
            self.note()
        return out

    def _with_values(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A fake step's op, with the values the model's own code reads (Shadows)."""
        fakes = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, FakeTensor)]
        shadows = self.shadows
        assert shadows is not None  # a fake step's mode keeps them (__torch_dispatch__)
        if func is torch.ops.aten._local_scalar_dense.default and fakes:
            value = shadows.get(args[0])
            if value is not None:
                with unset_fake_temporarily():
                    return value.item()
            if args[0].dtype == torch.bool:
                # the model's own checks of its inputs (`padding_mask.all()`: true for the mask
                # of ones fms-hf-tuning's collator gives full rows). Any other value a fake step
                # asks for fails the trace.
                self.assumed.append("a boolean check of the inputs is true")
                return True
        if func is torch.ops.aten.topk.default and fakes and shadows.get(args[0]) is None:
            out = func(*args, **kwargs)
            shadows.put(
                out[1], balanced(out[1], args[0].shape[kwargs.get("dim", _arg(args, 2, -1))])
            )
            self.assumed.append("routing: every expert an equal share of the tokens")
            return out
        known = [shadows.get(f) for f in fakes]
        if all(v is not None for v in known) and (fakes or _small_factory(func, args, kwargs)):
            real = self._real(func, args, kwargs)
            if real is not None:
                if func in DATA_DEPENDENT:
                    out = tree_map_only(torch.Tensor, fakes[0].fake_mode.from_tensor, real)
                else:
                    out = func(*args, **kwargs)
                for fake, value in zip(_tensors(out), _tensors(real), strict=False):
                    shadows.put(fake, value)
                return out
        for argument, value in zip(func._schema.arguments, args, strict=False):
            if argument.alias_info is not None and argument.alias_info.is_write:
                shadows.forget(value)  # written without values: no longer known
        return func(*args, **kwargs)

    def _real(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
        """`func` on the shadows' values, outside the fake mode (None where it cannot run)."""
        shadows = self.shadows
        assert shadows is not None  # a fake step's mode keeps them (__torch_dispatch__)
        values = tree_map(
            lambda a: shadows.get(a) if isinstance(a, FakeTensor) else a, (args, kwargs)
        )
        try:
            with unset_fake_temporarily():
                return func(*values[0], **values[1])
        except Exception:  # an op that cannot run on these values: it keeps no shadow
            return None


SHADOW_LIMIT = 1 << 24
"""Elements of a factory's output (zeros, arange, ...) worth shadowing: routing's bookkeeping,
not the activations."""
DATA_DEPENDENT = {
    torch.ops.aten.nonzero.default,
    torch.ops.aten.masked_select.default,
    torch.ops.aten.repeat_interleave.Tensor,
    torch.ops.aten._unique2.default,
    torch.ops.aten.unique_consecutive.default,
    torch.ops.aten.unique_dim.default,
    torch.ops.aten.argwhere.default,
}
"""Operators whose output's shape depends on their input's values."""


class Shadows:
    """Real values kept beside the fake tensors that a mixture of experts routes with: a fake
    tensor has sizes but no values, and MoE blocks size their experts' batches from the routing
    (`nonzero`, `.tolist()`). Top-k indices get a balanced assignment (row r's j-th choice is
    expert (r k + j) mod E: every expert an equal share of the tokens), and what is computed
    from values alone (factories, integer bookkeeping) is computed for real beside its fake
    twin. A shadow lives per storage, so views and elements of a shadowed tensor have values."""

    def __init__(self) -> None:
        self.storages: dict[int, tuple[Any, Any]] = {}  # id -> (weakref, flat real tensor)

    def get(self, tensor: Tensor) -> Tensor | None:
        if not isinstance(tensor, FakeTensor):
            return tensor
        storage = tensor.untyped_storage()
        entry = self.storages.get(id(storage))
        if entry is None or entry[0]() is not storage or entry[1].dtype != tensor.dtype:
            return None
        with unset_fake_temporarily():
            return torch.as_strided(
                entry[1], tensor.shape, tensor.stride(), tensor.storage_offset()
            )

    def put(self, fake: Tensor, real: Tensor) -> None:
        if not isinstance(fake, FakeTensor) or not isinstance(real, torch.Tensor):
            return
        if fake.dtype != real.dtype or fake.shape != real.shape:
            return
        storage = fake.untyped_storage()
        key = id(storage)
        entry = self.storages.get(key)
        with unset_fake_temporarily():
            if entry is not None and entry[0]() is storage and entry[1].dtype == fake.dtype:
                flat = entry[1]  # a view of a shadowed tensor: its values are the base's
            else:
                flat = torch.zeros(storage.nbytes() // fake.element_size(), dtype=fake.dtype)
            view = torch.as_strided(flat, fake.shape, fake.stride(), fake.storage_offset())
            view.copy_(real)
        ref = weakref.ref(storage, functools.partial(self._freed, key))
        self.storages[key] = (ref, flat)

    def _freed(self, key: int, _ref: Any) -> None:
        self.storages.pop(key, None)

    def forget(self, tensor: Tensor) -> None:
        if isinstance(tensor, FakeTensor):
            self.storages.pop(id(tensor.untyped_storage()), None)


def balanced(indices: Tensor, experts: int) -> Tensor:
    """Top-k choices spread evenly: row r's j-th choice is expert (r k + j) mod E."""
    k = indices.shape[-1] if indices.dim() else 1
    rows = indices.numel() // max(1, k)
    with unset_fake_temporarily():
        choice = torch.arange(rows)[:, None] * k + torch.arange(k)[None, :]
        return (choice % max(1, experts)).reshape(indices.shape).to(indices.dtype)


def _arg(args: tuple[Any, ...], index: int, default: Any) -> Any:
    return args[index] if len(args) > index else default


def _tensors(value: Any) -> list[torch.Tensor]:
    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


def _small_factory(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """An op of no tensor input making a tensor small enough to keep values for (zeros,
    arange, full): routing's bookkeeping starts from them."""
    if any(isinstance(a, torch.Tensor) for a in tree_flatten((args, kwargs))[0]):
        return False
    returns = func._schema.returns
    if len(returns) != 1 or str(returns[0].type) != "Tensor":
        return False
    sizes = [a for a in args if isinstance(a, (list, tuple))]
    elements = 1
    for size in sizes[:1]:
        for dim in size:
            elements *= int(dim)
    return (
        func._schema.name.split("::")[-1] in ("zeros", "ones", "full", "arange", "scalar_tensor")
        and elements <= SHADOW_LIMIT
    )
