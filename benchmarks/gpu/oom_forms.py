"""The forms a GPU's out-of-memory takes, made for real: allocate until each fails, keep its text.

    python benchmarks/gpu/oom_forms.py FORM --result FILE      # one form per process

Forms (issue 15, point 2): `torch_oom` (the caching allocator: torch.OutOfMemoryError "CUDA out
of memory"), `context` (a process that starts while the GPU is full: "CUDA error: out of
memory"), `cublas` (cuBLAS's first handle on a full GPU: CUBLAS_STATUS_ALLOC_FAILED, typical
at the first backward), `nccl` (NCCL's first communicator on a full GPU: "unhandled cuda error" /
"Cuda failure 'out of memory'", the first FSDP collective). Each result holds the exception's
type and exact text, the process's stderr tail, and what the engine's two classifiers make of it
(the trainer's, on the exception; the launch's, on the text as a log tail), so the classifiers
can be compared with what GPUs really say.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

CHUNKS_MIB = (1024, 64, 2)
"""Fill the GPU in shrinking chunks: what is left at the end is below the smallest."""
CHILD_SECONDS = 60


def fill_gpu() -> list:
    """Hold every byte the caching allocator can get; returns the tensors (keep them alive)."""
    import torch

    held = []
    for mib in CHUNKS_MIB:
        while True:
            try:
                held.append(torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError:
                break
    return held


def torch_oom() -> None:
    import torch

    held = []
    while True:  # 1 GiB at a time, as a growing batch would, until the allocator refuses
        held.append(torch.empty(2**30, dtype=torch.uint8, device="cuda"))


def context() -> dict:
    """A second process creates its CUDA context while this one holds the whole GPU; the
    second process records its own exception (its exact type too)."""
    held = fill_gpu()
    with tempfile.TemporaryDirectory() as scratch:
        result = Path(scratch) / "child.json"
        done = subprocess.run(
            [sys.executable, __file__, "context_child", "--result", str(result)],
            capture_output=True,
            text=True,
            timeout=CHILD_SECONDS,
        )
        del held
        if not result.is_file():
            raise RuntimeError(f"the second process wrote no result:\n{done.stderr[-2000:]}")
        return {
            **json.loads(result.read_text()),
            "form": "context",
            "made_by": "a second process starting while the first holds the GPU",
        }


def context_child() -> None:
    import torch

    torch.zeros(1, device="cuda")


def cublas() -> None:
    import torch

    a = torch.ones(64, 64, device="cuda")
    held = fill_gpu()
    try:
        (a @ a).sum().item()  # the process's first matrix product creates the cuBLAS handle
    finally:
        del held


def nccl() -> None:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_DEBUG", "WARN")  # NCCL says "Cuda failure ..." on stderr
    store = dist.FileStore(str(Path(os.environ.get("TMPDIR", "/tmp")) / f"nccl-{os.getpid()}"), 1)
    # no device_id: the communicator (and its buffers) is then built at the first collective,
    # after the GPU is full, as a rank's first FSDP all-gather near the limit does
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    torch.cuda.set_device(0)
    x = torch.ones(1024, device="cuda")
    held = fill_gpu()
    try:
        dist.all_reduce(x)  # the first collective builds the communicator and its buffers
        torch.cuda.synchronize()
    finally:
        del held
        dist.destroy_process_group()


FORMS = {"torch_oom": torch_oom, "context": context, "cublas": cublas, "nccl": nccl}
HELPERS = {"context_child": context_child}
"""Run by a form, not asked for."""


def trainer_verdict(exc: BaseException) -> str:
    from ado_actuators.sfttrainer.trainer.failures import classify

    return classify(exc)[0].value


def log_verdict(text: str) -> str:
    """What the launch classifier makes of a rank that died with `text` in its log."""
    from ado_actuators.sfttrainer.execute.classify import launch_outcome
    from ado_actuators.sfttrainer.execute.node import NodeRun

    run = NodeRun(returncode=1, log_tail=text)
    outcome = launch_outcome([], [run], world_size=1, number_gpus=1, stop_after_seconds=-1)
    return "gpu_oom" if getattr(outcome, "gpu_oom", False) else type(outcome).__name__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("form", choices=sorted(FORMS.keys() | HELPERS.keys()))
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    result: dict = {"form": args.form}
    try:
        made = {**FORMS, **HELPERS}[args.form]()
        result = made if isinstance(made, dict) else {**result, "raised": False}
    except BaseException as exc:
        text = str(exc)
        result |= {
            "raised": True,
            "exception_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": text[:4000],
            "traceback_tail": "".join(traceback.format_exception(exc)[-3:])[-2000:],
            "trainer_classifier": trainer_verdict(exc),
            "log_classifier": log_verdict(f"{type(exc).__name__}: {text}"),
        }
    args.result.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
