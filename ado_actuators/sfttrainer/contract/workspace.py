"""A measurement's working directory, declared once: where it lies and every file and
directory in it. The actuator's side (plan/, execute/) writes it and the trainer, which knows
only its job's report directory, writes into it: both ask this module for every name."""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class ReportDirectory:
    """Where the ranks write (TrainerJob.report_dir): the actuator reads it after the launch
    and watches it for activity while the ranks run."""

    path: Path

    RANK_REPORTS = "rank-*.json"
    """The ranks' reports, as a glob: nothing else in the directory matches it."""

    def rank_report(self, rank: int) -> Path:
        """Rank `rank`'s report (contract/trainer_io.RankReport)."""
        return self.path / f"rank-{rank}.json"

    def heartbeat(self, rank: int) -> Path:
        """Touched by rank `rank` at every step, so a watchdog sees a run that is alive."""
        return self.path / f"heartbeat-{rank}"

    @property
    def termination_log(self) -> Path:
        """Where fms-hf-tuning writes why it ended (TERMINATION_LOG_FILE)."""
        return self.path / "termination.log"


@dataclasses.dataclass(frozen=True)
class Workspace:
    """One node's working directory of one measurement."""

    root: Path

    @classmethod
    def for_node(
        cls, output_root: Path, label: str, run_name: str, machine_rank: int, number_nodes: int
    ) -> Workspace:
        """Each node its own directory, also where nodes share a filesystem."""
        base = output_root / f"{label}-{run_name}"
        return cls(base / f"node-{machine_rank}" if number_nodes > 1 else base)

    @property
    def job(self) -> Path:
        """The trainer's job (contract/trainer_io.TrainerJob), named on its command line."""
        return self.root / "job.json"

    @property
    def accelerate_config(self) -> Path:
        """accelerate's configuration of a launch of several ranks."""
        return self.root / "accelerate_config.yaml"

    @property
    def train_log(self) -> Path:
        """What the launcher and every rank of this node printed."""
        return self.root / "train.log"

    @property
    def output(self) -> Path:
        """fms-hf-tuning's --output_dir (checkpoints, the trained model): removed after the
        run, since a benchmark keeps none of it."""
        return self.root / "output"

    @property
    def reports(self) -> ReportDirectory:
        return ReportDirectory(self.root / "reports")

    def training_data(self, entries: int, suffix: str) -> Path:
        """The dataset's first `entries` entries, all a run bounded by max_steps consumes."""
        return self.root / f"dataset-first-{entries}{suffix}"

    def dataset_head(self, rank: int, suffix: str) -> Path:
        """The first block of entries rank `rank` tokenises before training (one file per
        rank: no two ranks write the same file)."""
        return self.root / f"dataset-head-rank{rank}{suffix}"
