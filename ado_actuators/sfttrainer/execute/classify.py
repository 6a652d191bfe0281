"""A finished launch (each node's exit status + every rank's report) -> Outcome. Pure."""

from __future__ import annotations

import re

from ado_actuators.sfttrainer.contract import Outcome as RankOutcome
from ado_actuators.sfttrainer.contract import RankReport
from ado_actuators.sfttrainer.execute.node import NodeRun
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
    return f"rank {report.rank}: {failure.exception_type}: {failure.message}"


def _where(run: NodeRun, runs: list[NodeRun]) -> str:
    return f" on node {run.machine_rank} ({run.hostname})" if len(runs) > 1 else ""


def _tails(runs: list[NodeRun], multi_node: bool) -> str:
    if not multi_node:
        return runs[0].log_tail
    return "\n".join(
        f"--- node {r.machine_rank} ({r.hostname}):\n{r.log_tail}" for r in runs if r.log_tail
    )


def launch_outcome(
    reports: list[RankReport],
    runs: list[NodeRun],
    *,
    world_size: int,
    devices: int,
    stop_after_seconds: float,
) -> Outcome:
    """Every node's reports and exit -> one outcome.

    GPU OOM in any rank wins (other ranks then fail in collectives); then a node the
    watchdog stopped or that could not launch; then any rank's failure.
    """
    oom = [r for r in reports if r.outcome is RankOutcome.GPU_OOM]
    if oom:
        return Invalid(reason=f"GPU out of memory: {_describe(oom[0])}", gpu_oom=True)
    ran = [r for r in runs if not r.cancelled] or runs
    tail = _tails(ran, multi_node=len(runs) > 1)
    if stalled := next((r for r in runs if r.stopped_by_watchdog), None):
        return Failed(
            f"the training was stopped{_where(stalled, runs)}: {stalled.stopped_by_watchdog}. "
            f"Log tail:\n{tail}"
        )
    if unlaunched := next((r for r in ran if r.problem), None):
        return Failed(f"{unlaunched.problem}{_where(unlaunched, runs)}")
    errors = [r for r in reports if r.outcome is RankOutcome.ERROR]
    # a cancelled node's ranks are not news: the node that failed first is
    per_node = world_size // max(1, len(runs))
    expected = {n.machine_rank * per_node + i for n in ran for i in range(per_node)}
    missing = sorted(expected - {r.rank for r in reports})
    exited = [r for r in ran if r.returncode != 0]
    if errors or missing or exited:
        if not errors and _GPU_OOM_IN_LOG.search(tail):
            return Invalid(reason="GPU out of memory (from the training log)", gpu_oom=True)
        if errors:
            why = _describe(errors[0])
        elif missing:
            first = next(n for n in ran if n.machine_rank == missing[0] // per_node)
            signals = [f"{r.signal_name}{_where(r, runs)}" for r in runs if r.signal_name]
            died = f" (the launcher exited by {', '.join(signals)})" if signals else ""
            why = f"rank(s) {missing} ended without a report{_where(first, runs)}{died}, e.g. killed"
        else:
            why = f"the launcher exited with status {exited[0].returncode}{_where(exited[0], runs)}"
        return Failed(f"training failed: {why}. Log tail:\n{tail}")
    try:
        properties = benchmark_properties(
            reports,
            devices=devices,
            stop_after_seconds=stop_after_seconds,
            since=warmup_end(reports),
        )
    except NoTrainingSteps as error:
        return Failed(f"training produced no measurement: {error}. Log tail:\n{tail}")
    rank0 = reports[0]
    metadata = {
        "flash_attention": rank0.flash_attention,
        "notes": sorted({n for r in reports for n in r.notes}),
        "versions": rank0.versions,
        "steps": max(len(r.steps) for r in reports),
        "stopped_by": rank0.stopped_by,
        "aim_run_hash": rank0.aim_run_hash,
    }
    return Measured(properties=properties, metadata=metadata)
