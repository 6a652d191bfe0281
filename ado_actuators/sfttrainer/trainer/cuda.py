"""What the trainer asks of CUDA; every answer is safe where CUDA is absent or unused.

`torch` is looked up, never imported: a process that never imported torch never used CUDA.
Unit tests hand in a stand-in module.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger(__name__)


def _cuda_in_use(torch) -> bool:
    return torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()


def synchronize(devices: int = 1, torch=None) -> None:
    """Wait until the GPU has run everything queued so far (kernels run asynchronously: a step
    end stamped before this lets the step's optimizer and clipping kernels spill into the next).

    `devices`: the GPUs this one process drives (Hugging Face's `args.n_gpu`: several under
    DataParallel, else 1 — the current device; syncing others would create contexts there).
    """
    torch = torch if torch is not None else sys.modules.get("torch")
    if not _cuda_in_use(torch):
        return
    if devices > 1:
        for index in range(devices):
            torch.cuda.synchronize(index)
    else:
        torch.cuda.synchronize()


def max_memory_allocated(torch=None) -> int:
    """The peak of torch's CUDA allocator in this process, over every device it drove (under
    DataParallel one process drives several GPUs: cuda:0's peak alone is not the run's); 0
    where CUDA was never used. Devices this process never touched report 0."""
    torch = torch if torch is not None else sys.modules.get("torch")
    try:
        if not _cuda_in_use(torch):
            return 0
        return max(
            (int(torch.cuda.max_memory_allocated(i)) for i in range(torch.cuda.device_count())),
            default=0,
        )
    except Exception as e:  # a broken CUDA context after a failure must not lose the report
        log.warning("torch.cuda.max_memory_allocated failed: %s", e)
        return 0
