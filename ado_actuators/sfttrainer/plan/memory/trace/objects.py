"""The objects of torch, transformers and peft the trace handles, named for what they hold.

The trace's modules import those libraries inside their functions (or, live_bytes.py, only when
a trace runs), so these names are typed Any, as the objects come from untyped call sites."""

from __future__ import annotations

from typing import Any

Tensor = Any  # a torch.Tensor, fake (FakeTensorMode) or real
Module = Any  # a torch.nn.Module: transformers' model, PEFT's wrapper, one of its layers
