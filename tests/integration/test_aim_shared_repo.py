"""Measurements sharing one aim_db each record their run, even when they start at once.

Before ensure_repo took turns, 5 of 6 processes opening a repository at the same moment
failed on RocksDB's meta/index/LOCK and their runs were silently missing (the trainer only
notes "AIM recording disabled").
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow
WRITERS = 6

_WRITER = """
import sys, time
from pathlib import Path
import aim  # before the gate: the race under test is opening the repository, not importing
from ado_actuators.sfttrainer.contract.trainer_io import TrainerJob
from ado_actuators.sfttrainer.trainer import aim_run
repo, gate, label = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
(gate / f"ready-{label}").touch()  # aim imported
while not (gate / "go").exists():  # every writer opens the repository at the same moment
    time.sleep(0.001)
job = TrainerJob.model_construct(aim_repo=repo, aim_experiment="shared", run_labels={"entity": label})
recorder = aim_run.AimRecorder(job, rank=0)
recorder.record_params(outcome="ok")
recorder.close()
"""


@pytest.mark.parametrize("fresh", [True, False], ids=["new-repository", "existing-repository"])
def test_writers_starting_at_once_all_record_their_run(tmp_path, fresh):
    import aim
    from aim.sdk.index_manager import RepoIndexManager

    repo = tmp_path / "aim"
    if not fresh:
        aim.Repo.from_path(str(repo), init=True)
    gate = tmp_path / "gate"
    gate.mkdir()
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(repo), str(gate), f"run-{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(WRITERS)
    ]
    try:
        # the gate opens once every writer has imported aim, however long that takes here
        deadline = time.monotonic() + 300  # a guard against a hang, not a speed claim
        while len(list(gate.glob("ready-*"))) < WRITERS:
            assert all(w.poll() is None for w in writers) and time.monotonic() < deadline, [
                w.communicate()[0] for w in writers if w.poll() is not None
            ]
            time.sleep(0.05)
        (gate / "go").touch()
        outputs = [w.communicate(timeout=300)[0] for w in writers]
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
                w.wait()
    assert [w.returncode for w in writers] == [0] * WRITERS, "\n".join(outputs)
    writer = aim.Repo.from_path(str(repo))
    hashes = writer.list_all_runs()
    for run_hash in hashes:
        RepoIndexManager.get_index_manager(writer).index(run_hash)
    reader = aim.Repo.from_path(str(repo))
    labels = sorted(reader.get_run(h)["entity"] for h in hashes)
    assert labels == [f"run-{i}" for i in range(WRITERS)]
