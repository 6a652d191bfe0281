"""Two CPU ranks over gloo wrap a saved model in torch's FSDP (FULL_SHARD, use_orig_params, as
accelerate's config asks) and record each rank's gradient bytes after a backward under no_sync
and after the synced backward that follows: what a step of two micro-batches holds under
transformers' Trainer. Run as a script: `python fsdp_no_sync_probe.py MODEL_DIR OUT.json`."""

from __future__ import annotations

import json
import os
import sys
import tempfile


def _grad_bytes(model) -> int:
    return sum(
        h.flat_param.grad.numel() * h.flat_param.grad.element_size()
        for h in model._all_handles
        if h.flat_param.grad is not None
    )


def _rank(rank: int, world: int, store: str, model_dir: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from transformers import AutoModelForCausalLM

    # a file the ranks meet at, not a port: no other test's process can hold it
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    model = FullyShardedDataParallel(
        AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32),
        device_id=torch.device("cpu"),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        use_orig_params=True,
    )
    tokens = torch.randint(0, 100, (2, 16))
    with model.no_sync():
        model(input_ids=tokens, labels=tokens).loss.backward()
    held = _grad_bytes(model)
    model(input_ids=tokens, labels=tokens).loss.backward()
    synced = _grad_bytes(model)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"no_sync": held, "synced": synced, "ranks": world}, f)
    # both ranks done with gloo, then out without its teardown: torch 2.13's gloo threads at
    # times abort a rank's exit ("terminate called without an active exception") after its work
    dist.barrier()
    os._exit(0)


def main() -> None:
    import torch.multiprocessing as mp

    model_dir, out = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as meet:
        mp.spawn(_rank, args=(2, os.path.join(meet, "store"), model_dir, out), nprocs=2)


if __name__ == "__main__":
    main()
