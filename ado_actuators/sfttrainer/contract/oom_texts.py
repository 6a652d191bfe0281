"""The texts by which a GPU running out of memory shows itself. Pure, imports nothing.

Read twice: by the trainer, in the exception that ended training (trainer/failures.py), and by
the executor, in the log of a rank that died before it could report (execute/classify.py). The
spec names two; near the limit a GPU fails in other words too, and each of them means the
configuration does not fit (is_valid = 0), not that the measurement broke:

- torch's allocator: `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`;
- the spec's `CUDA error: an illegal memory access was encountered`;
- a CUDA runtime call refused memory outside torch's allocator (a kernel's workspace, a new
  stream): `RuntimeError: CUDA error: out of memory` (`torch.AcceleratorError` from torch 2.8);
- cuBLAS could not allocate its handle or workspace, typically at the first backward:
  `RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)``;
- NCCL's own buffers (allocated outside torch's pool) at the first collective: NCCL logs
  `NCCL WARN Cuda failure 2 'out of memory'` (older NCCL: `Cuda failure 'out of memory'`), and
  torch's exception carries the same line after "Last error:"::

      torch.distributed.DistBackendError: NCCL error in: .../NCCLUtils.cpp:77, unhandled cuda
      error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2
      ncclUnhandledCudaError: Call to CUDA function failed.
      Last error:
      Cuda failure 2 'out of memory'

NCCL's bare "unhandled cuda error" is deliberately *not* read as out of memory: NCCL reports
every failed CUDA call that way (an invalid argument, a device-side assert, a driver too old,
a lost peer), and only the "Cuda failure ... 'out of memory'" line that comes with it (in the
exception since NCCL 2.13, in the log with NCCL_DEBUG=WARN or INFO) says it was memory. A bare
one stays an error: rerun with NCCL_DEBUG=WARN to see the cause.
"""

from __future__ import annotations

import re

GPU_MEMORY_EXHAUSTED = re.compile(
    r"torch\.(?:cuda\.)?OutOfMemoryError|CUDA out of memory"
    r"|CUDA error: an illegal memory access was encountered"
    r"|CUDA error: out of memory"
    r"|CUBLAS_STATUS_ALLOC_FAILED"
    r"|Cuda failure (?:\d+ )?'out of memory'"
)


def says_gpu_memory_exhausted(text: str) -> bool:
    """Whether an exception's message or a log names GPU memory exhaustion in any of its forms."""
    return GPU_MEMORY_EXHAUSTED.search(text) is not None
