"""A finished launch (exit status + rank reports) -> Outcome. Pure."""

from __future__ import annotations

import re

from ado_actuators.sfttrainer.contract import Outcome as RankOutcome
from ado_actuators.sfttrainer.contract import RankReport
from ado_actuators.sfttrainer.execute.process import ProcessResult
from ado_actuators.sfttrainer.metrics.aggregate import (
    NoTrainingSteps,
    benchmark_properties,
    warmup_end,
)
from ado_actuators.sfttrainer.outcomes import Failed, Invalid, Measured, Outcome

# A rank that died before it could write a report may still have said why in the log.
_GPU_OOM_IN_LOG = re.compile(
    r"torch\.cuda\.OutOfMemoryError|CUDA out of memory|"
    r"CUDA error: an illegal memory access was encountered"
)


def _describe(report: RankReport) -> str:
    failure = report.failure
    if failure is None:
        return f"rank {report.rank} ended with {report.outcome}"
    kind = failure.exception_type.removeprefix("builtins.")
    return f"rank {report.rank}: {kind}: {failure.message}"


def launch_outcome(
    reports: list[RankReport],
    process: ProcessResult,
    *,
    world_size: int,
    number_gpus: int,
    stop_after_seconds: float,
) -> Outcome:
    """GPU OOM in any rank wins (other ranks then fail in collectives); then any failure."""
    oom = [r for r in reports if r.outcome is RankOutcome.GPU_OOM]
    if oom:
        return Invalid(reason=f"GPU out of memory: {_describe(oom[0])}", gpu_oom=True)
    tail = process.log_tail()
    if process.stopped_by_watchdog:
        return Failed(
            f"the training was stopped: {process.stopped_by_watchdog}; a process hung (e.g. "
            f"waiting on a dead peer), or the job is silent longer than that on purpose: then "
            f"raise stall_timeout_seconds.\nLog tail:\n{tail}"
        )
    errors = [r for r in reports if r.outcome is RankOutcome.ERROR]
    missing = sorted(set(range(world_size)) - {r.rank for r in reports})
    if errors or missing or process.returncode != 0:
        if not errors and _GPU_OOM_IN_LOG.search(tail):
            return Invalid(reason="GPU out of memory (from the training log)", gpu_oom=True)
        label = "Log tail"
        if errors:
            why = _describe(errors[0])
            if errors[0].failure and errors[0].failure.traceback_tail:
                # the rank's own traceback says more than a log full of other ranks' noise
                label, tail = f"Traceback of rank {errors[0].rank}", errors[0].failure.traceback_tail
        elif missing:
            died = f" (the launcher exited by {process.signal_name})" if process.signal_name else ""
            why = (
                f"rank(s) {missing} ended without a report{died}: killed from outside, or "
                f"by the kernel's out-of-memory killer (check the node's memory)"
            )
        else:
            why = f"the launcher exited with status {process.returncode}"
        return Failed(f"training failed: {why}\n{label}:\n{tail}")
    try:
        properties = benchmark_properties(
            reports,
            number_gpus=number_gpus,
            stop_after_seconds=stop_after_seconds,
            since=warmup_end(reports),
        )
    except NoTrainingSteps as error:
        return Failed(f"training produced no measurement: {error}. Log tail:\n{tail}")
    rank0 = reports[0]
    metadata = {
        "flash_attention": rank0.flash_attention,
        "distributed_type": rank0.distributed_type,
        "notes": sorted({n for r in reports for n in r.notes}),
        "versions": rank0.versions,
        "steps": max(len(r.steps) for r in reports),
        "stopped_by": rank0.stopped_by,
        "aim_run_hash": rank0.aim_run_hash,
    }
    return Measured(properties=properties, metadata=metadata)
