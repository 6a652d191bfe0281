"""Exception → RankOutcome (the spec's GPU-memory rules), and the FAULT_ENV hook's parsing/raising."""

from __future__ import annotations

import pytest
import torch
import torch.distributed
from gpu_failure_texts import (
    CUBLAS_ALLOC_FAILED,
    CUDA_ERROR_OUT_OF_MEMORY,
    NCCL_UNHANDLED_CUDA_ERROR_BARE,
    NCCL_UNHANDLED_CUDA_ERROR_OOM,
    NCCL_UNHANDLED_CUDA_ERROR_OTHER,
)

from ado_actuators.sfttrainer.contract.trainer_io import FAULT_ENV, FaultKind, RankOutcome
from ado_actuators.sfttrainer.trainer.failures import classify
from ado_actuators.sfttrainer.trainer.faults import Fault, fire


def raised(exc: BaseException) -> BaseException:
    """The exception as training would deliver it: raised, with a traceback."""
    try:
        raise exc
    except BaseException as e:
        return e


def test_torch_cuda_oom_is_gpu_oom():
    outcome, failure = classify(raised(torch.cuda.OutOfMemoryError("Tried to allocate 20 GiB")))
    assert outcome is RankOutcome.GPU_OOM
    assert failure.exception_type.endswith("OutOfMemoryError")
    assert "Tried to allocate" in failure.message


def test_illegal_memory_access_is_gpu_oom():
    exc = RuntimeError("CUDA error: an illegal memory access was encountered\nCompile with ...")
    assert classify(raised(exc))[0] is RankOutcome.GPU_OOM


def test_cuda_out_of_memory_message_is_gpu_oom():
    assert (
        classify(raised(RuntimeError("CUDA out of memory. Tried to allocate")))[0]
        is RankOutcome.GPU_OOM
    )


@pytest.mark.parametrize(
    "exc",
    [
        torch.AcceleratorError(CUDA_ERROR_OUT_OF_MEMORY),  # torch >= 2.8
        RuntimeError(CUDA_ERROR_OUT_OF_MEMORY),  # torch < 2.8
        RuntimeError(CUBLAS_ALLOC_FAILED),
        torch.distributed.DistBackendError(NCCL_UNHANDLED_CUDA_ERROR_OOM),
    ],
    ids=["accelerator-error", "runtime-error", "cublas", "nccl"],
)
def test_the_other_forms_of_gpu_memory_exhaustion_are_gpu_oom(exc):
    assert classify(raised(exc))[0] is RankOutcome.GPU_OOM


@pytest.mark.parametrize(
    "text", [NCCL_UNHANDLED_CUDA_ERROR_OTHER, NCCL_UNHANDLED_CUDA_ERROR_BARE], ids=["other", "bare"]
)
def test_nccl_unhandled_cuda_error_without_out_of_memory_is_an_error(text):
    """NCCL says "unhandled cuda error" for any failed CUDA call: only its "Cuda failure ...
    'out of memory'" line makes it an OOM."""
    assert classify(raised(torch.distributed.DistBackendError(text)))[0] is RankOutcome.ERROR


def test_oom_wrapped_by_another_exception_is_still_gpu_oom():
    def wrapped():
        try:
            raise torch.cuda.OutOfMemoryError("inner")
        except RuntimeError as e:
            raise RuntimeError("accelerate re-raised") from e

    with pytest.raises(RuntimeError) as info:
        wrapped()
    assert classify(info.value)[0] is RankOutcome.GPU_OOM


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("NCCL Error 2: unhandled system error"),
        ValueError("bad argument"),
        MemoryError(),  # host memory: not the GPU the spec talks about
        SystemExit(2),
        KeyboardInterrupt(),
    ],
)
def test_everything_else_is_an_error_with_a_traceback(exc):
    outcome, failure = classify(raised(exc))
    assert outcome is RankOutcome.ERROR
    assert failure.exception_type.endswith(type(exc).__name__)
    assert failure.message
    assert "raise exc" in failure.traceback_tail


def test_long_tracebacks_keep_their_tail():
    def deep(n):
        if n == 0:
            raise RuntimeError("bottom")
        deep(n - 1)

    with pytest.raises(RuntimeError) as info:
        deep(100)
    _, failure = classify(info.value)
    assert len(failure.traceback_tail.splitlines()) <= 40
    assert failure.traceback_tail.rstrip().endswith("RuntimeError: bottom")


@pytest.mark.parametrize(
    ("value", "kind", "step"),
    [
        ("exception@2", FaultKind.EXCEPTION, 2),
        (" OOM@1 ", FaultKind.OOM, 1),
        ("illegal_memory@3", FaultKind.ILLEGAL_MEMORY, 3),
        ("kill@1", FaultKind.KILL, 1),
        ("hang@5", FaultKind.HANG, 5),
    ],
)
def test_fault_parsing(value, kind, step):
    assert Fault.parse(value) == Fault(kind, step)


def test_fault_for_one_rank_only():
    fault = Fault.parse("exception@2@1")
    assert fault == Fault(FaultKind.EXCEPTION, 2, rank=1)
    fault.maybe_fire(2, rank=0)  # another rank: nothing happens
    with pytest.raises(RuntimeError):
        fault.maybe_fire(2, rank=1)


@pytest.mark.parametrize(
    "value",
    ["exception", "exception@", "explode@1", "oom@0", "oom@x", "oom@1@", "oom@1@-1", "oom@1@2@3"],
)
def test_malformed_fault_is_an_error_not_silence(value):
    with pytest.raises(ValueError, match=FAULT_ENV):
        Fault.parse(value)


def test_fault_from_env():
    assert Fault.from_env({}) is None
    assert Fault.from_env({FAULT_ENV: ""}) is None
    assert Fault.from_env({FAULT_ENV: "oom@4"}) == Fault(FaultKind.OOM, 4)


def test_fault_fires_only_at_its_step():
    fault = Fault(FaultKind.EXCEPTION, 2)
    fault.maybe_fire(1)
    with pytest.raises(RuntimeError, match="step 2"):
        fault.maybe_fire(2)


@pytest.mark.parametrize(
    ("kind", "outcome"),
    [
        (FaultKind.EXCEPTION, RankOutcome.ERROR),
        (FaultKind.OOM, RankOutcome.GPU_OOM),
        (FaultKind.ILLEGAL_MEMORY, RankOutcome.GPU_OOM),
    ],
)
def test_injected_faults_classify_as_the_real_thing(kind, outcome):
    with pytest.raises(BaseException) as info:
        fire(kind, 1)
    assert classify(info.value)[0] is outcome
