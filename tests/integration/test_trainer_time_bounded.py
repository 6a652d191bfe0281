"""A time-bounded run on a dataset far larger than it trains: it tokenises only what it
reaches, trains the dataset's leading entries in file order, and counts their tokens exactly."""

from __future__ import annotations

import bisect
import re

import pytest
from tiny_model import write_text_dataset

from ado_actuators.sfttrainer.contract.trainer_io import RankOutcome, TrainerJob
from ado_actuators.sfttrainer.trainer.lazy_dataset import block_bounds

pytestmark = pytest.mark.slow

BATCH, ACCUM, MAX_SEQ = 2, 2, 64
ENTRIES = 6000  # more than the run can train in its seconds on any machine here


@pytest.fixture(scope="module")
def time_bounded_run(tmp_path_factory, tiny_model_dir, trainer_tools):
    workdir = tmp_path_factory.mktemp("time-bounded")
    data = write_text_dataset(workdir / "data.jsonl", ENTRIES, max_words=120)
    job = TrainerJob(report_dir=workdir / "reports", stop_after_seconds=3)
    argv = trainer_tools.spec_fms_args(
        tiny_model_dir,
        data,
        max_steps=-1,
        batch_size=BATCH,
        grad_accum=ACCUM,
        max_seq_length=MAX_SEQ,
    )
    run = trainer_tools.run_trainer(workdir, job, argv)
    run.data = data
    return run


def test_it_stops_on_time_having_tokenised_entries_as_it_reached_them(time_bounded_run):
    assert time_bounded_run.returncode == 0, time_bounded_run.describe()
    report = time_bounded_run.report
    assert report.outcome is RankOutcome.OK and report.stopped_by is not None
    note = next((n for n in report.notes if "as training reached them" in n), None)
    assert note is not None, report.notes
    # tokenised what it trained and the blocks up to the one after the last entry fetched (the
    # loader fetches ahead of the last step: a step's worth covers it), not the dataset; how
    # many steps fit in the seconds depends on the machine, this bound does not
    encoded = int(re.search(r"tokenised (\d+) of (\d+) entries", note).group(1))
    trained = len(report.steps) * BATCH * ACCUM
    bounds = block_bounds(ENTRIES, BATCH * ACCUM)
    last_fetched = trained + BATCH * ACCUM - 1
    ahead = bounds[min(bisect.bisect_right(bounds, last_fetched) + 1, len(bounds) - 1)]
    assert trained <= encoded <= ahead < ENTRIES, (note, ahead)


def test_it_trains_exactly_the_leading_entries_a_step_bounded_run_would(
    time_bounded_run, tiny_model_dir, trainer_tools
):
    """After S steps: the first S x batch x accumulation entries, each once, counted exactly
    (a different draw, or a miscount, would give another total: entry lengths vary)."""
    report = time_bounded_run.report
    per_entry = trainer_tools.spec_dataset_tokens(tiny_model_dir, time_bounded_run.data, MAX_SEQ)
    trained = len(report.steps) * BATCH * ACCUM
    per_step = [sum(per_entry[i : i + BATCH * ACCUM]) for i in range(0, trained, BATCH * ACCUM)]
    assert [s.dataset_tokens for s in report.steps] == per_step


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory, tiny_model_dir, trainer_tools):
    workdir = tmp_path_factory.mktemp("time-bounded-ddp")
    data = write_text_dataset(workdir / "data.jsonl", ENTRIES, max_words=120, seed=5)
    job = TrainerJob(report_dir=workdir / "reports", stop_after_seconds=3)
    argv = trainer_tools.spec_fms_args(
        tiny_model_dir,
        data,
        max_steps=-1,
        batch_size=1,
        grad_accum=ACCUM,
        max_seq_length=MAX_SEQ,
    )
    run = trainer_tools.run_trainer(workdir, job, argv, processes=2)
    run.data = data
    return run


def test_two_ranks_share_the_leading_entries_without_overlap(
    two_rank_run, tiny_model_dir, trainer_tools
):
    """Step k of a 2-rank run trains entries [4k, 4k+4) between the ranks (batch 1 per rank,
    accumulation 2): the per-step sums over both ranks are the spec's counts of those."""
    run = two_rank_run
    assert run.returncode == 0, run.describe()
    assert len(run.reports) == 2 and all(r.outcome is RankOutcome.OK for r in run.reports)
    steps = len(run.reports[0].steps)
    assert steps == len(run.reports[1].steps) and steps * 2 * ACCUM < ENTRIES
    per_entry = trainer_tools.spec_dataset_tokens(tiny_model_dir, run.data, MAX_SEQ)
    group = 2 * ACCUM
    expected = [sum(per_entry[i : i + group]) for i in range(0, steps * group, group)]
    trained = [sum(r.steps[k].dataset_tokens for r in run.reports) for k in range(steps)]
    assert trained == expected
