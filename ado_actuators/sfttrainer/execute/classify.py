"""A finished launch (each node's exit status + every rank's report) -> MeasurementOutcome. Pure."""

from __future__ import annotations

import re

from ado_actuators.sfttrainer.contract.oom_texts import says_gpu_memory_exhausted
from ado_actuators.sfttrainer.contract.outcomes import (
    MACHINE,
    TRAINING_COMPLETED,
    VERSIONS,
    Failed,
    Invalid,
    Measured,
    MeasurementOutcome,
)
from ado_actuators.sfttrainer.contract.trainer_io import (
    AutoStopOutcome,
    RaceOutcome,
    RankOutcome,
    RankReport,
)
from ado_actuators.sfttrainer.execute.node import NodeRun
from ado_actuators.sfttrainer.metrics import flops
from ado_actuators.sfttrainer.metrics.aggregate import (
    NoTrainingSteps,
    benchmark_properties,
    energy_note,
    gpu_sampling_problem,
    model_flops_per_token,
    throughput_interval,
    warmup_end,
    window_image_tiles,
    window_image_tokens,
    window_steps,
)
from ado_actuators.sfttrainer.metrics.loss import report_loss
from ado_actuators.sfttrainer.metrics.machine import machine_metadata, machine_note

# How a launcher (accelerate launch, or `python -m` of the lone trainer) says why it stopped
# before starting any rank: a Python exception line ("ConnectionError: Tried to launch
# distributed communication on port ...", "torch.distributed.DistNetworkError: The server socket
# has failed to listen ... EADDRINUSE"), or python's own "-m" error for a missing package.
_LAUNCHER_ERROR = re.compile(
    r"^(?:[\w.]+\.)?\w+(?:Error|Exception)\b:|Error while finding module specification"
)
_RANK_DIED = "ChildFailedError"
"""torch's elastic agent reporting that a rank it had started died: not the launcher's failure."""


def launcher_said(log_tail: str) -> str | None:
    """The line in which a launcher that started no rank says why, or None."""
    if _RANK_DIED in log_tail:
        return None
    lines = (line.strip() for line in reversed(log_tail.splitlines()))
    return next((line[:1000] for line in lines if _LAUNCHER_ERROR.search(line)), None)


SETTING_UNAVAILABLE = "SettingUnavailable"
"""trainer/adapt.py's exception: a requested setting the training environment cannot honour."""


def _describe(report: RankReport, where: str) -> str:
    failure = report.failure
    if failure is None:
        return f"rank {report.rank}{where} ended with {report.outcome}"
    kind = failure.exception_type.removeprefix("builtins.")
    return f"rank {report.rank}{where}: {kind}: {failure.message}"


def _failed_rank(report: RankReport, where: str) -> str:
    """The reason's first line(s): what failed in the user's terms where the rank knew them
    (a damaged input file and its fix), then what it raised."""
    raised = _describe(report, where)
    if report.failure and report.failure.cause:
        return f"{report.failure.cause}\n(raised on {raised.splitlines()[0][:500]})"
    return f"training failed: {raised}"


def _where(run: NodeRun, runs: list[NodeRun]) -> str:
    return f" on node {run.machine_rank} ({run.hostname})" if len(runs) > 1 else ""


def _where_rank(rank: int, runs: list[NodeRun], per_node: int) -> str:
    """Where `rank` ran, as _where says it; nothing when no node of `runs` had it (the
    reason is still given, without a place)."""
    node = next((n for n in runs if n.machine_rank == rank // per_node), None)
    return _where(node, runs) if node else ""


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
    number_gpus: int,
    stop_after_seconds: float,
    gpu_model: str | None = None,
    devices: int | None = None,
) -> MeasurementOutcome:
    """Every node's reports and exit -> one outcome.

    GPU OOM in any rank of any node wins (other ranks then fail in collectives, and their
    node may well be the first to fail): reported by a rank, or, when the launch failed, said
    in any node's log (a rank that died before it could report). Then a node the watchdog
    stopped or that could not launch; then any rank's failure. A node cancelled because
    another failed is not the news, and neither are its ranks' reports of being stopped: the
    node that failed first is.
    """
    per_node = max(1, world_size // max(1, len(runs)))
    oom = [r for r in reports if r.outcome is RankOutcome.GPU_OOM]
    if oom:
        where = _where_rank(oom[0].rank, runs, per_node)
        return Invalid(reason=f"GPU out of memory: {_describe(oom[0], where)}", gpu_oom=True)
    ran = [r for r in runs if not r.cancelled] or runs
    reports = [r for r in reports if r.rank // per_node in {n.machine_rank for n in ran}]
    tail = _tails(ran, multi_node=len(runs) > 1)
    if failed := _launch_failure(reports, runs, ran, per_node, tail):
        return failed
    return _training_outcome(
        reports,
        tail,
        number_gpus=number_gpus,
        stop_after_seconds=stop_after_seconds,
        gpu_model=gpu_model,
        devices=devices,
    )


def _launch_failure(
    reports: list[RankReport], runs: list[NodeRun], ran: list[NodeRun], per_node: int, tail: str
) -> MeasurementOutcome | None:
    """The triage of a launch that did not train to its end, or None when it did: a node the
    watchdog stopped or that could not launch, an OOM only the log tells, a setting the
    environment refused, a rank's error, a rank without a report, a launcher's exit status."""
    if stalled := next((r for r in ran if r.stopped_by_watchdog), None):
        return Failed(
            f"the training was stopped{_where(stalled, runs)}: {stalled.stopped_by_watchdog}; "
            f"a process hung (e.g. waiting on a dead peer), or the job is silent longer than "
            f"that on purpose: then raise stall_timeout_seconds.\nLog tail:\n{tail}"
        )
    if unlaunched := next((r for r in ran if r.problem), None):
        return Failed(f"{unlaunched.problem}{_where(unlaunched, runs)}")
    errors = [r for r in reports if r.outcome is RankOutcome.ERROR]
    expected = {n.machine_rank * per_node + i for n in ran for i in range(per_node)}
    missing = sorted(expected - {r.rank for r in reports})
    exited = [r for r in ran if r.returncode != 0]
    if not (errors or missing or exited):
        return None
    # a rank that died before it could write a report may still have said why in the log,
    # on a node cancelled because its peers failed first too
    if said := next((r for r in runs if says_gpu_memory_exhausted(r.log_tail)), None):
        return Invalid(
            reason=f"GPU out of memory (from the training log{_where(said, runs)})",
            gpu_oom=True,
        )
    refused = [
        r.failure
        for r in errors
        if r.failure and r.failure.exception_type.endswith(SETTING_UNAVAILABLE)
    ]
    if refused:
        message = refused[0].message
        return Failed(f"the configuration cannot run as requested: {message}")
    label = "Log tail"
    if errors:
        why = _failed_rank(errors[0], _where_rank(errors[0].rank, runs, per_node))
        if errors[0].failure and errors[0].failure.traceback_tail:
            # the rank's own traceback says more than a log full of other ranks' noise
            label, tail = f"Traceback of rank {errors[0].rank}", errors[0].failure.traceback_tail
    elif missing:
        why = _missing_reports(missing, reports, runs, ran, per_node)
    else:
        status, where = exited[0].returncode, _where(exited[0], runs)
        why = f"training failed: the launcher exited with status {status}{where}"
    return Failed(f"{why}\n{label}:\n{tail}")


def _missing_reports(
    missing: list[int],
    reports: list[RankReport],
    runs: list[NodeRun],
    ran: list[NodeRun],
    per_node: int,
) -> str:
    """Why ranks ended without a report: their launcher's own failure, where it said one
    before any rank of its node started, else a kill from outside."""
    first = next(n for n in ran if n.machine_rank == missing[0] // per_node)
    signals = [f"{r.signal_name}{_where(r, runs)}" for r in ran if r.signal_name]
    died = f" (the launcher exited by {', '.join(signals)})" if signals else ""
    started = any(r.rank // per_node == first.machine_rank for r in reports)
    own_failure = not (started or signals) and first.returncode
    said = launcher_said(first.log_tail) if own_failure else None
    if said:  # no rank of the node started: a busy port, a missing package, ...
        return (
            f"training failed: the launcher exited with status {first.returncode}"
            f"{_where(first, runs)} before any rank started, saying: {said}"
        )
    return (
        f"training failed: rank(s) {missing} ended without a report"
        f"{_where(first, runs)}{died}: killed from outside, or by the kernel's "
        f"out-of-memory killer (check the node's memory)"
    )


def _training_outcome(
    reports: list[RankReport],
    tail: str,
    *,
    number_gpus: int,
    stop_after_seconds: float,
    gpu_model: str | None,
    devices: int | None,
) -> MeasurementOutcome:
    """A training that ran to its end: its properties, notes and metadata, or Failed (marked
    TRAINING_COMPLETED) where its figures cannot be had."""
    since = warmup_end(reports)
    completed = {TRAINING_COMPLETED: True}
    try:
        properties = benchmark_properties(
            reports,
            number_gpus=number_gpus,
            stop_after_seconds=stop_after_seconds,
            since=since,
            gpu_model=gpu_model,
            devices=devices,
        )
    except NoTrainingSteps as error:
        return Failed(f"training produced no measurement: {error}. Log tail:\n{tail}", completed)
    if problem := gpu_sampling_problem(reports, since):
        return Failed(problem, completed)
    rank0 = reports[0]  # the executor sorts the reports by rank
    interval = throughput_interval(reports, since)
    per_token = model_flops_per_token(reports, since)
    loss = report_loss(reports, window_steps(reports, rank0, since))
    images = window_image_tokens(reports, since)
    notes = _notes(reports, since, interval.why, per_token, images) | {
        note for note in (loss.note(), loss.why_not_judged(), machine_note(reports)) if note
    }
    if per_token is not None and "model_flops_utilization" not in properties:
        notes.add(
            f"model_flops_utilization omitted: no dense peak known for gpu_model "
            f"{gpu_model if number_gpus else 'None (CPU)'}"
        )
    metadata = {
        "flash_attention": rank0.flash_attention,
        "mamba_scan_path": rank0.mamba_scan_path,
        "image_tokens": images[0] if images else None,
        "image_tiles": window_image_tiles(reports, since),
        "distributed_type": rank0.distributed_type,
        "notes": sorted(notes),
        VERSIONS: rank0.versions,
        "steps": max(len(r.steps) for r in reports),
        "warmup_steps": rank0.warmup_steps,
        "measured_steps": len(rank0.steps) - (rank0.warmup_steps if since is not None else 0),
        "model_flops_per_token": per_token,
        "dataset_tokens_per_second_ci95": interval.metadata(),
        "model_parameters": rank0.model_parameters.model_dump() if rank0.model_parameters else None,
        "stopped_by": rank0.stopped_by,
        "auto_stop": rank0.auto_stop.model_dump() if rank0.auto_stop else None,
        "aim_run_hash": rank0.aim_run_hash,
        "train_loss": loss.metadata(),
        MACHINE: machine_metadata(reports),
    }
    return Measured(properties=properties, metadata=metadata)


def _notes(
    reports: list[RankReport],
    since: float | None,
    no_interval: str | None,
    per_token: float | None,
    images: tuple[int, int] | None,
) -> set[str]:
    """What a row must say about the figures it has and those it omits, and why; `images`:
    window_image_tokens."""
    rank0 = reports[0]
    notes = {n for r in reports for n in r.notes}
    if since is None and rank0.warmup_steps:
        # warm-up ended on the last step trained: no step is left to measure without it
        notes.add(
            "warm-up not excluded: training ended on the last warm-up step, so the "
            "figures cover every step"
        )
    if note := race_note(rank0.race) or auto_stop_note(rank0.auto_stop):
        notes.add(note)
    if no_interval:
        notes.add(f"dataset_tokens_per_second_ci95_percent omitted: {no_interval}")
    if note := energy_note(reports):
        notes.add(f"gpu_energy_joules_per_token omitted: {note}")
    if note := image_note(images):
        notes.add(note)
    if per_token is None:
        notes.add(f"model_tflops_per_device omitted: {flops.why_no_flops(rank0.model_parameters)}")
    return notes


def image_note(images: tuple[int, int] | None) -> str | None:
    """How a vision-language model's row counts its tokens (None: a text model's)."""
    if images is None:
        return None
    image, tokens = images
    return (
        f"dataset tokens count text and image tokens together: {image:,} of the {tokens:,} "
        f"in the measured window ({image / max(tokens, 1):.0%}) are image tokens, one per "
        f"image feature the model's processor expanded each image into; they carry no loss"
    )


def race_note(outcome: RaceOutcome | None) -> str | None:
    """What a row stopped once it could not win must say: against what, by how much."""
    if outcome is None:
        return None
    return (
        f"stopped once it could not win its answer group ({outcome.reason}): its figure is "
        f"measured, its interval wider than a whole measurement's; about "
        f"{outcome.saved_seconds:,.0f} s of training saved"
    )


def auto_stop_note(outcome: AutoStopOutcome | None) -> str | None:
    """What a row must say when an adaptive method did not end at its target."""
    if outcome is None or outcome.target_reached:
        return None
    where = {
        "cap": f"auto_stop_max_seconds ({outcome.max_seconds:g} s) passed",
        "other limit": "stop_after_seconds stopped training",
        "training end": "training ended (max_steps or num_train_epochs)",
    }[outcome.ended_by]
    if not outcome.steady_state_found:
        return (
            f"{outcome.method}: no steady state found before {where}: the step times still "
            f"showed a trend, so no step was left out as warm-up and the figures cover every "
            f"step"
        )
    judged = "" if outcome.ci95_percent is None else f" (it was {outcome.ci95_percent:.2f} %)"
    return (
        f"{outcome.method}: target not reached: {where} before the 95 % interval was within "
        f"{outcome.target_percent:g} %{judged}"
    )
