"""Two CPU ranks over gloo wrap a stack of layers in torch's FSDP as accelerate does for
fms-hf-tuning (FULL_SHARD, a unit per layer, use_orig_params, BACKWARD_PRE prefetch), checkpoint
each layer as transformers does, and record the order in which the backward issues each unit's
all-gather and reduce-scatter: what plan/speed/step_time's `FsdpTraffic.waited` prices. Two ways to
checkpoint: "model", the model's forward checkpoints each unit's call (transformers before
4.52, `self._gradient_checkpointing_func(decoder_layer.__call__, ...)`), and "layer", the layer
checkpoints itself inside its unit (GradientCheckpointingLayer, 4.52 on); each reentrant or not.
Run as a script: `python fsdp_prefetch_probe.py OUT.json`."""

from __future__ import annotations

import json
import os
import sys
import tempfile

LAYERS, WIDTH = 6, 32
EVENTS: list[tuple[str, int]] = []
CURRENT: list = []  # the layers of the model being run


def _record() -> None:
    """Log each real all-gather (a handle that needs one) and each reduce-scatter, by layer
    (-1: the root unit, the head's)."""
    from torch.distributed.fsdp import _flat_param, _runtime_utils

    def index(handle) -> int:
        module = handle._fully_sharded_module
        return next((i for i, layer in enumerate(CURRENT) if layer is module), -1)

    unshard, reduce = _flat_param.FlatParamHandle.unshard, _runtime_utils._reduce_grad

    def logged_unshard(handle):
        if handle.needs_unshard():
            EVENTS.append(("gather", index(handle)))
        return unshard(handle)

    def logged_reduce(state, handle):
        EVENTS.append(("reduce", index(handle)))
        return reduce(state, handle)

    _flat_param.FlatParamHandle.unshard = logged_unshard
    _runtime_utils._reduce_grad = logged_reduce


def _stack(site: str, reentrant: bool):
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(WIDTH, WIDTH)

        def compute(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.tanh(self.linear(x))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if site == "layer":  # the checkpoint inside the unit
                return checkpoint(self.compute, x, use_reentrant=reentrant)
            return self.compute(x)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
            self.head = nn.Linear(WIDTH, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                if site == "model":  # the unit inside the checkpoint
                    x = checkpoint(layer.__call__, x, use_reentrant=reentrant)
                else:
                    x = layer(x)
            return self.head(x).sum()

    return Layer, Model()


def _backward_order(site: str, reentrant: bool) -> list[tuple[str, int]]:
    import torch
    from torch.distributed.fsdp import BackwardPrefetch, FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.manual_seed(0)
    layer_type, model = _stack(site, reentrant)
    inner = list(model.layers)
    wrapped = FullyShardedDataParallel(
        model,
        device_id=torch.device("cpu"),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        auto_wrap_policy=ModuleWrapPolicy({layer_type}),
        backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
        use_orig_params=True,
    )
    CURRENT[:] = inner
    x = torch.randn(4, WIDTH, requires_grad=True)  # the embedding's output needs a gradient
    for _ in range(2):  # FSDP records its execution order in the first step
        EVENTS.clear()
        loss = wrapped(x)
        start = len(EVENTS)
        loss.backward()
    return EVENTS[start:]


def _rank(rank: int, world: int, store: str, out: str) -> None:
    import torch.distributed as dist

    # a file the ranks meet at, not a port: no other test's process can hold it
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    _record()
    orders = {
        f"{site} {'reentrant' if reentrant else 'non_reentrant'}": _backward_order(site, reentrant)
        for site in ("model", "layer")
        for reentrant in (True, False)
    }
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"layers": LAYERS, "orders": orders}, f)
    # both ranks done with gloo, then out without its teardown (as fsdp_no_sync_probe.py)
    dist.barrier()
    os._exit(0)


def main() -> None:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as meet:
        mp.spawn(_rank, args=(2, os.path.join(meet, "store"), sys.argv[1]), nprocs=2)


if __name__ == "__main__":
    main()
