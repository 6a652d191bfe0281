"""Faults while trainings run, through `ado create operation` with two measurements at once.

One operation (batchSize 2, on a local Ray that offers 4 CPUs so two measurements fit) over
four tiny trainings sharing one aim_db repository and one hf_home:
- batch_size 1 and 2: measured side by side, both valid, both runs in the shared repository;
- batch_size 3: its trainer hangs and the test SIGKILLs the Ray worker running its
  measurement task (measure_here): Failed, and the trainer processes die with the worker;
- batch_size 4: its trainer hangs: the stall timeout stops it, Failed saying so.
Every request is answered exactly once, nothing Failed is stored, nothing is left running,
and the re-run measures exactly the two failed entities again.

The watchdog sees silence only where the test means it to: the test keeps every measurement's
report directory fresh (tests/keep_active.py) but the hung one's once its trainer hangs. So
a slow start-up, or a slow search for the worker to kill, is never taken for a stall.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import yaml
from ado_cli import AdoCLI
from ado_operations import leftover_processes, run_operation, trace
from keep_active import KeepActive
from test_operation_faults import (  # pytest puts tests/e2e on sys.path
    DATASET,
    INJECT,
    REPO,
    write_yaml,
)
from tiny_model import build_tiny_model

pytestmark = pytest.mark.slow
EXPERIMENT = "finetune_full_benchmark-v1.0.0"
STALL_SECONDS = 10  # the hung trainer's silence, after it hangs (nothing else is ever silent)
HANGING = "sfttrainer: hanging"  # what a trainer prints when FAULT_ENV hangs it
# the sequential sampler takes batch sizes in order: the two clean ones form the first batch
CLEAN, KILLED, HUNG = ("batch_size.1", "batch_size.2"), "batch_size.3", "batch_size.4"


def batch_size_of(entity_ids: str) -> str:
    return "batch_size." + entity_ids.split("batch_size.")[1].split("-")[0].split()[0].strip("]'\"")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime-faults")
    model = build_tiny_model(root / "tiny-llama")
    data = root / "data"
    subprocess.run(
        [
            str(Path(sys.executable).with_name("sfttrainer_generate_dataset_text")),
            "--dataset-id",
            DATASET,
            "--entries",
            "16",
            "--output-dir",
            str(data),
        ],
        check=True,
        capture_output=True,
    )
    python_path = os.pathsep.join(p for p in (str(INJECT), os.environ.get("PYTHONPATH")) if p)
    ado = AdoCLI(
        home=root / "ado",
        extra_env={
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": str(root / "hf"),
            "PYTHONPATH": python_path,
            # two 2-CPU measurements at once need a node of 4 CPUs (this machine may have 2)
            "RAY_OVERRIDE_RESOURCES": json.dumps({"CPU": 4}),
        },
    )
    config_id = ado.create(
        "actuatorconfiguration",
        write_yaml(
            root / "ac.yaml",
            {
                "actuatorIdentifier": "SFTTrainer",
                "parameters": {
                    "data_directory": str(data),
                    "hf_home": str(root / "hf"),
                    "output_dir": str(root / "out"),
                    "aim_db": str(root / "aim"),
                    "stall_timeout_seconds": STALL_SECONDS,
                    "model_map": {"tiny-llama": {"Vanilla": str(model)}},
                },
            },
        ),
    )
    parameterization = [
        {"property": {"identifier": "fms_hf_tuning_version"}, "value": "3.2.2"},
        {"property": {"identifier": "dataset_id"}, "value": DATASET},
        {"property": {"identifier": "max_steps"}, "value": 2},
        {"property": {"identifier": "torch_dtype"}, "value": "float32"},
        {"property": {"identifier": "gradient_accumulation_steps"}, "value": 1},
    ]
    space_id = ado.create(
        "space",
        write_yaml(
            root / "space.yaml",
            {
                "experiments": [
                    {
                        "experimentIdentifier": EXPERIMENT,
                        "actuatorIdentifier": "SFTTrainer",
                        "parameterization": parameterization,
                    }
                ],
                "entitySpace": [
                    {"identifier": "model_name", "propertyDomain": {"values": ["tiny-llama"]}},
                    {"identifier": "number_gpus", "propertyDomain": {"values": [0]}},
                    {"identifier": "model_max_length", "propertyDomain": {"values": [64]}},
                    {"identifier": "batch_size", "propertyDomain": {"values": [1, 2, 3, 4]}},
                ],
            },
        ),
        "--new-sample-store",
    )
    operation = yaml.safe_load((REPO / "examples" / "local-cpu" / "operation.yaml").read_text())
    operation |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    operation["operation"]["parameters"]["batchSize"] = 2
    return ado, space_id, write_yaml(root / "op.yaml", operation), root


class WorkerKiller(threading.Thread):
    """Waits until the trainer of the entity labelled `needle` hangs, then SIGKILLs the Ray
    worker that started it, remembering the trainer's processes."""

    def __init__(self, out: Path, needle: str) -> None:
        super().__init__(daemon=True)
        self.out, self.needle = out, needle
        self.worker: str | None = None
        self.trainer_pids: list[int] = []
        self.done = threading.Event()

    def _hanging_workdir(self) -> Path | None:
        for log in self.out.glob(f"*/*{self.needle}*/train.log"):
            if HANGING in log.read_text(errors="replace"):
                return log.parent
        return None

    def run(self) -> None:
        while not self.done.is_set():
            workdir = self._hanging_workdir()
            if workdir is None:
                time.sleep(0.5)
                continue
            trainers = [p for p in psutil.process_iter(["cwd"]) if p.info["cwd"] == str(workdir)]
            tops = [p for p in trainers if p.ppid() not in {t.pid for t in trainers}]
            if len(tops) != 1:  # not started yet, or already gone: the test then fails on .worker
                time.sleep(0.5)
                continue
            worker = tops[0].parent()
            self.trainer_pids = [p.pid for p in trainers]
            self.worker = " ".join(worker.cmdline())
            worker.send_signal(signal.SIGKILL)
            return


def watched_silence(out: Path) -> list[Path]:
    """The report directories (the watchdog's activity paths) to keep fresh now: every
    measurement's but the hung entity's once its trainer hangs."""
    kept = []
    for workdir in out.glob("*/*/"):
        log = workdir / "train.log"
        if HUNG in workdir.name and log.exists() and HANGING in log.read_text(errors="replace"):
            continue
        kept.append(workdir / "reports")
    return kept


def alive(pids: list[int], timeout: float = 30) -> list[int]:
    """Those of `pids` still running after `timeout` s: their SIGKILL (the parent-death signal)
    was sent when the worker died; the wait only lets the kernel finish it."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    found.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def aim_runs(repo: Path) -> list[tuple[str, str | None, int]]:
    """(entity label, outcome, metric series) of every run in the repository, each read back
    (a run the repository cannot give back fails here)."""
    import aim
    from aim.sdk.index_manager import RepoIndexManager

    writer = aim.Repo.from_path(str(repo))
    hashes = writer.list_all_runs()
    manager = RepoIndexManager.get_index_manager(writer)
    for run_hash in hashes:
        manager.index(run_hash)
    opened = aim.Repo.from_path(str(repo))  # a Repo reads the index as it was when first read
    runs = []
    for run_hash in hashes:
        run = opened.get_run(run_hash)
        assert run is not None, f"run {run_hash} of {repo} cannot be read back"
        runs.append((run["entity"], run.get("outcome"), len(list(run.metrics()))))
    return runs


def measurement_span(out: Path, needle: str) -> tuple[float, float]:
    """From the measurement directory's job file (written before launch) to the last write of
    its log."""
    (workdir,) = out.glob(f"*/*{needle}-*")
    return (workdir / "job.json").stat().st_mtime, (workdir / "train.log").stat().st_mtime


def test_killed_worker_hung_rank_and_two_at_once(setup):
    ado, space_id, operation, root = setup
    killer = WorkerKiller(root / "out", KILLED)
    killer.start()
    started = time.monotonic()
    faults = f"{KILLED}=hang@1;{HUNG}=hang@1"
    (root / "meet").mkdir()
    meet = (
        f"{root / 'meet'}={','.join(f'{key}-' for key in CLEAN)}"  # the clean two launch together
    )
    with KeepActive(lambda: watched_silence(root / "out")):
        first_id, output = run_operation(
            ado, operation, SFTTRAINER_TEST_FAULTS=faults, SFTTRAINER_TEST_MEET=meet
        )
    print(f"first operation: {time.monotonic() - started:.1f} s")
    killer.done.set()
    assert killer.worker is not None, "the killed entity's trainer never hung"
    assert killer.worker.startswith("ray::"), killer.worker  # it was a Ray worker we killed
    assert killer.trainer_pids and not alive(killer.trainer_pids), killer.trainer_pids

    requests = trace(ado, first_id)
    counts = Counter(batch_size_of(r["Entity IDs"]) for r in requests)
    assert counts == Counter([KILLED, HUNG, *CLEAN]), requests  # none lost, none twice
    status = {batch_size_of(r["Entity IDs"]): r["Status"] for r in requests}
    assert status == {KILLED: "Failed", HUNG: "Failed", CLEAN[0]: "Success", CLEAN[1]: "Success"}, (
        status
    )
    lines = [line for line in output.splitlines() if f"SFTTrainer {EXPERIMENT}" in line]
    assert len(lines) == 2, "\n".join(lines)
    by_entity = {key: next(line for line in lines if key in line) for key in (KILLED, HUNG)}
    assert "the measurement task died" in by_entity[KILLED], by_entity[KILLED]
    assert f"(stall timeout {STALL_SECONDS} s)" in by_entity[HUNG], by_entity[HUNG]
    (hung_dir,) = (root / "out").glob(f"*/*{HUNG}-*")
    assert HANGING in (hung_dir / "train.log").read_text(errors="replace")  # stopped as it hung

    rows = ado.measurements(space_id)
    assert sorted(f"batch_size.{r['batch_size']}" for r in rows) == sorted(CLEAN), rows
    assert all(float(r["is_valid"]) == 1 for r in rows), rows
    assert all(float(r["dataset_tokens_per_second"]) > 0 for r in rows), rows
    for key in (*CLEAN, KILLED, HUNG):  # for the record only
        start, end = measurement_span(root / "out", key)
        print(f"{key}: {status[key]}, launch to last log write {end - start:.1f} s")
    # the two clean measurements ran at once (the case this checks): each launched only once
    # both had their resources (SFTTRAINER_TEST_MEET), so their spans overlap by design
    (start_a, end_a), (start_b, end_b) = (measurement_span(root / "out", key) for key in CLEAN)
    assert start_a < end_b and start_b < end_a, "the two clean measurements ran one after the other"
    # the shared repository gives back every run; each measured one once, complete (the
    # failed entities' runs, cut short, are there too)
    runs = aim_runs(root / "aim")
    complete = Counter(
        batch_size_of(label) for label, outcome, series in runs if outcome == "ok" and series
    )
    assert complete == Counter(CLEAN), runs
    assert not leftover_processes(root)

    # the re-run, without faults: the two failed entities are measured again, nothing twice
    started = time.monotonic()
    with KeepActive(lambda: watched_silence(root / "out")):
        second_id, _ = run_operation(ado, operation)
    print(f"re-run: {time.monotonic() - started:.1f} s")
    again = trace(ado, second_id)
    kinds = Counter((r["Request type"], batch_size_of(r["Entity IDs"])) for r in again)
    # what was measured is replayed from the store, what failed is measured again
    assert kinds == Counter(
        [("measured", KILLED), ("measured", HUNG), ("replayed", CLEAN[0]), ("replayed", CLEAN[1])]
    ), again
    assert all(r["Status"] == "Success" for r in again), again
    rows = ado.measurements(space_id)
    assert Counter(f"batch_size.{r['batch_size']}" for r in rows) == Counter(
        [KILLED, HUNG, *CLEAN]
    ), rows
    assert all(float(r["is_valid"]) == 1 for r in rows), rows
    runs = aim_runs(root / "aim")
    complete = Counter(
        batch_size_of(label) for label, outcome, series in runs if outcome == "ok" and series
    )
    assert complete == Counter([KILLED, HUNG, *CLEAN]), runs
    assert not leftover_processes(root)
