"""An exception from training → the RankOutcome the spec gives it.

The spec: `torch.cuda.OutOfMemoryError` and `RuntimeError: CUDA error: an illegal memory access
was encountered` make a run invalid (GPU memory exhausted), and so do the other forms GPU memory
exhaustion takes (contract/oom_texts.py); anything else is a failure.
"""

from __future__ import annotations

import itertools
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

from ado_actuators.sfttrainer.contract.oom_texts import says_gpu_memory_exhausted
from ado_actuators.sfttrainer.contract.trainer_io import Failure, RankOutcome
from ado_actuators.sfttrainer.trainer import input_files

TRACEBACK_TAIL_LINES = 40
MESSAGE_LIMIT = 4000


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and those it wraps: accelerate and DDP re-raise the original as a cause."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _is_torch_oom(exc: BaseException) -> bool:
    try:
        import torch
    except ImportError:  # classification must work wherever the trainer might crash early
        return type(exc).__name__ == "OutOfMemoryError"
    return isinstance(exc, torch.cuda.OutOfMemoryError)


def is_gpu_memory_exhaustion(exc: BaseException) -> bool:
    for e in _chain(exc):
        if _is_torch_oom(e):
            return True
        # torch.AcceleratorError and torch.distributed.DistBackendError are RuntimeErrors
        if isinstance(e, RuntimeError) and says_gpu_memory_exhausted(str(e)):
            return True
    return False


def _training_data_paths(argv: list[str]) -> list[Path]:
    """The dataset named on this process's own sft_trainer command line."""
    return [Path(v) for k, v in itertools.pairwise(argv) if k == "--training_data_path"]


def describe(exc: BaseException) -> Failure:
    lines = "".join(traceback.format_exception(exc)).splitlines()
    message = str(exc) or repr(exc)
    # e.g. "Failed to generate the dataset ..." says neither which file nor which line
    cause = input_files.explain(exc, _training_data_paths(sys.argv)) or ""
    return Failure(
        exception_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
        message=message[:MESSAGE_LIMIT],
        traceback_tail="\n".join(lines[-TRACEBACK_TAIL_LINES:]),
        cause=cause[:MESSAGE_LIMIT],
    )


def classify(exc: BaseException) -> tuple[RankOutcome, Failure]:
    outcome = RankOutcome.GPU_OOM if is_gpu_memory_exhaustion(exc) else RankOutcome.ERROR
    return outcome, describe(exc)
