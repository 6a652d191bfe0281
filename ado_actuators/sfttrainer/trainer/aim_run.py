"""The AIM Run owned by local rank 0: run labels as params, system samples as metrics.

Only one process per measurement opens the repo; measurements sharing one aim_db (several at
once on a node, or on a shared filesystem) take turns creating it (ensure_repo).
AIM's own system tracker and parameter logging stay off (see monitor.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ado_actuators.sfttrainer.contract.trainer_io import GpuSample, ProcessSample, TrainerJob

log = logging.getLogger(__name__)
# fms's `--log_level debug` turns on AIM's per-sample debug chatter from the sampling thread:
# it would bury the training log and look like progress to the stall watchdog.
logging.getLogger("aim").setLevel(logging.WARNING)

# Metric names, with contexts {"rank": r} for process samples and {"gpu": i} for GPU ones.
PROCESS_METRICS = {"cpu_percent": "cpu_percent", "memory_percent": "memory_percent"}
GPU_METRICS = {
    "gpu_compute_percent": "compute_percent",
    "gpu_memory_percent": "memory_percent",
    "gpu_power_watts": "power_watts",
    "gpu_power_percent": "power_percent",
}


def ensure_repo(path: Path) -> None:
    """Create the repository at `path` unless it exists.

    Creating (`Repo.from_path(init=True)`) opens the repository's index for writing: a
    measurement doing so while another one sharing the aim_db does fails on RocksDB's
    `meta/index/LOCK`. Measurements take turns on a file lock, and only the first creates.
    Runs themselves write to their own chunk databases and need no turn.
    """
    import aim
    from aim.sdk.utils import get_aim_repo_name
    from filelock import FileLock

    path.mkdir(parents=True, exist_ok=True)
    with FileLock(path / ".sfttrainer-create.lock"):
        if not (path / get_aim_repo_name() / "meta" / "index").is_dir():
            aim.Repo.from_path(str(path), init=True)


class AimRecorder:
    def __init__(self, job: TrainerJob, rank: int) -> None:
        import aim

        repo = job.aim_repo
        if repo and "://" not in repo:
            ensure_repo(Path(repo))
        self.rank = rank
        self.run = aim.Run(
            repo=repo,
            experiment=job.aim_experiment,
            system_tracking_interval=None,
            log_system_params=False,
            capture_terminal_logs=False,
        )
        for key, value in job.run_labels.items():
            self.run[key] = value
        self.hash: str = self.run.hash

    def record_process(self, sample: ProcessSample) -> None:
        context = {"rank": self.rank}
        for name, field in PROCESS_METRICS.items():
            self.run.track(getattr(sample, field), name=name, context=context)

    def record_gpus(self, samples: list[GpuSample]) -> None:
        for sample in samples:
            context = {"gpu": sample.index}
            for name, field in GPU_METRICS.items():
                if (value := getattr(sample, field)) is not None:  # None: not supported (MIG)
                    self.run.track(value, name=name, context=context)

    def record_params(self, **params) -> None:
        for key, value in params.items():
            self.run[key] = value

    def close(self) -> None:
        try:
            self.run.close()
        except Exception as e:  # the report matters more than a clean AIM shutdown
            log.warning("closing AIM run %s failed: %s", self.hash, e)
