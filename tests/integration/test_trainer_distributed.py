"""Two ranks on CPU under a real `accelerate launch` with the spec's DDP config (gloo)."""

from __future__ import annotations

import pytest
from tiny_model import write_text_dataset

from ado_actuators.sfttrainer.contract.trainer_io import FAULT_ENV, RankOutcome, TrainerJob

pytestmark = pytest.mark.slow

RANKS, BATCH, ACCUM, STEPS, MAX_SEQ = 2, 2, 2, 2, 64
ENTRIES = RANKS * BATCH * ACCUM * STEPS  # the ranks together train every entry exactly once
STOP_AFTER = 2.0
CRASH_STEP = 2  # rank 1 fails as this step begins (max_steps STEPS lets it begin)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir, trainer_tools):
    """Both launches at once (different ports): they are independent and mostly wait on imports."""
    data_dir = tmp_path_factory.mktemp("ddp-data")
    exact_data = write_text_dataset(data_dir / "exact.jsonl", ENTRIES, max_words=100, seed=3)
    started = {}

    workdir = tmp_path_factory.mktemp("ddp-tokens")
    job = TrainerJob(report_dir=workdir / "reports", aim_repo=str(workdir / "aim"))
    argv = trainer_tools.spec_fms_args(
        tiny_model_dir,
        exact_data,
        max_steps=STEPS,
        batch_size=BATCH,
        grad_accum=ACCUM,
        max_seq_length=MAX_SEQ,
    )
    started["tokens"] = (
        trainer_tools.start_trainer(workdir, job, argv, processes=RANKS),
        workdir,
        job,
    )

    workdir = tmp_path_factory.mktemp("ddp-stop")
    job = TrainerJob(report_dir=workdir / "reports", stop_after_seconds=STOP_AFTER)
    argv = trainer_tools.spec_fms_args(
        tiny_model_dir, exact_data, max_steps=100_000, batch_size=1, grad_accum=1, max_seq_length=32
    )
    started["stop"] = (
        trainer_tools.start_trainer(workdir, job, argv, processes=RANKS),
        workdir,
        job,
    )

    workdir = tmp_path_factory.mktemp("ddp-crash")
    job = TrainerJob(report_dir=workdir / "reports")
    argv = trainer_tools.spec_fms_args(tiny_model_dir, exact_data, max_steps=STEPS, grad_accum=1)
    env = {FAULT_ENV: f"oom@{CRASH_STEP}@1"}  # rank 1 alone runs out of GPU memory
    started["crash"] = (
        trainer_tools.start_trainer(workdir, job, argv, processes=RANKS, env=env),
        workdir,
        job,
    )

    runs = {name: trainer_tools.finish_trainer(*args) for name, args in started.items()}
    runs["tokens"].data = exact_data
    return runs


def test_two_ranks_each_write_one_ok_report(runs):
    run = runs["tokens"]
    assert run.returncode == 0, run.describe()
    assert [(r.rank, r.local_rank, r.world_size) for r in run.reports] == [(0, 0, 2), (1, 1, 2)]
    assert all(r.outcome is RankOutcome.OK for r in run.reports)
    assert all(len(r.steps) == STEPS for r in run.reports)
    # the DDP config on CPU: accelerate's own state says gloo DDP ran, not one process
    assert [r.distributed_type for r in run.reports] == ["MULTI_CPU", "MULTI_CPU"]
    # only local rank 0 opens the AIM repo (a second writer would fail on its lock)
    assert run.reports[0].aim_run_hash and run.reports[1].aim_run_hash is None
    assert all(r.process_samples for r in run.reports)
    assert "terminate called without an active exception" not in run.output


def test_rank_token_sums_add_up_to_the_whole_dataset(runs, tiny_model_dir, trainer_tools):
    run = runs["tokens"]
    expected = trainer_tools.spec_dataset_tokens(tiny_model_dir, run.data, MAX_SEQ)
    per_rank = [sum(s.dataset_tokens for s in r.steps) for r in run.reports]
    assert all(n > 0 for n in per_rank)
    # a rank training another rank's entries (overlapping shuffles) would break the equality
    assert sum(per_rank) == sum(expected), (per_rank, sum(expected))


def test_stop_after_seconds_stops_every_rank_at_the_same_step(runs):
    run = runs["stop"]
    assert run.returncode == 0, run.describe()
    reports = run.reports
    assert len(reports) == RANKS and all(r.outcome is RankOutcome.OK for r in reports)
    steps = [len(r.steps) for r in reports]
    assert steps[0] == steps[1] and steps[0] < 100_000
    for r in reports:
        assert r.stopped_by == f"stop_after_seconds={STOP_AFTER:g}"
    # How many steps fit in the limit depends on the machine; which step ends training does
    # not (stopping.StopAfterSeconds, agreed over ranks): the first whose end is STOP_AFTER or
    # more past its rank's first step start, on any rank. A stop a step early or late fails.
    elapsed = [[s.end - r.steps[0].start for s in r.steps] for r in reports]
    past = [next((i for i, e in enumerate(rank) if e >= STOP_AFTER), None) for rank in elapsed]
    assert any(i is not None for i in past), elapsed
    assert steps[0] == min(i for i in past if i is not None) + 1, elapsed


def test_when_one_rank_fails_both_report_and_the_launch_fails(runs):
    run = runs["crash"]
    assert run.returncode not in (0, None), run.describe()
    assert [r.rank for r in run.reports] == [0, 1], run.describe()
    survivor, crashed = run.reports
    assert crashed.outcome is RankOutcome.GPU_OOM
    # rank 0 learns of it (its collective with the dead peer fails, or the launcher stops it)
    assert survivor.outcome is RankOutcome.ERROR and survivor.failure.message
    # The crashed rank ended every step before CRASH_STEP. Its peer cannot end CRASH_STEP (its
    # gradients' all-reduce waits for the dead rank) but may not have ended the step before
    # either: when the launcher's SIGTERM (the peer died) reaches it first, it is one short.
    assert len(crashed.steps) == CRASH_STEP - 1
    assert len(survivor.steps) in (CRASH_STEP - 2, CRASH_STEP - 1)
    assert [s.step for s in survivor.steps] == [s.step for s in crashed.steps][
        : len(survivor.steps)
    ]
