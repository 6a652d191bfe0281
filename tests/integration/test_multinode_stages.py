"""A multi-node measurement's stages and its ending, on a real 2-node Ray cluster on this
machine (two raylets), with real training of one CPU rank per node:

- no node launches a rank before every node has prepared (checked its inputs and chosen or
  built its environment), and a node that cannot prepare fails the measurement, named, with
  nothing launched anywhere (docs/guide/ray-clusters.md, "Several nodes");
- a GPU OOM on the node that did not fail first is still `is_valid = 0`: the node cancelled
  because its peer failed returns what its ranks reported.

Faults and stage markers come from the test hooks (tests/e2e/inject/sitecustomize.py), put on
the cluster's PYTHONPATH. The OOM is the trainer's own fault hook on global rank 1 (the
second node), for measurements whose output directory is named OOM_DIR. To make the OOM node
the one that ends last, as NCCL makes it on GPUs (the OOM node's launcher waits 30 s before
it kills its ranks, the healthy node's ranks abort at once), the test stops that node's
launcher (SIGSTOP) while its rank trains: the node can then only end by being cancelled. The
rank fires its OOM only once the test says its launcher is stopped (the hooks'
SFTTRAINER_TEST_HOLD_FAULT), so the order holds however the processes are scheduled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from ado_cli import AdoCLI
from ado_operations import leftover_processes, run_operation, trace
from ray_cluster import RayCluster, live_placement_groups, two_raylets

from ado_actuators.sfttrainer.catalog import datasets

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
INJECT = REPO / "tests" / "e2e" / "inject"
BIN = Path(sys.executable).parent
DATASET = "news-chars-512-entries-4096"
EXPERIMENT = "finetune_full_benchmark-v1.0.0"
OOM_DIR = "oom-on-node-1"
ENTITY = {
    "model_name": "tiny",
    "model_max_length": 64,
    "batch_size": 2,
    "number_gpus": 0,
    "number_nodes": 2,
    "distributed_backend": "DDP",
    "dataset_id": DATASET,
    "max_steps": 4,
    "gradient_accumulation_steps": 1,
    "torch_dtype": "float32",
    "fms_hf_tuning_version": "3.2.2",
}
GUARD_SECONDS = 600  # only a hang reaches it


@pytest.fixture(scope="module")
def gates(tmp_path_factory) -> Path:
    """Where LauncherStopper lets each held rank fire its OOM."""
    return tmp_path_factory.mktemp("gates")


@pytest.fixture(scope="module")
def cluster(isolated_env, gates) -> Iterator[RayCluster]:
    yield from two_raylets(
        hooks=True,
        env={
            "SFTTRAINER_TEST_FAULTS": f"/{OOM_DIR}/=oom@2@1",
            "SFTTRAINER_TEST_HOLD_FAULT": str(gates),
        },
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stages")
    data = root / "data"
    subprocess.run(
        [
            str(BIN / "sfttrainer_generate_dataset_text"),
            "--dataset-id",
            DATASET,
            "--entries",
            "64",
            "-o",
            str(data / datasets.dataset_filename(DATASET)),
        ],
        check=True,
        capture_output=True,
    )
    return {"root": root, "model": tiny_model_dir, "data": data, "hf": root / "hf"}


def parameters(inputs, out: Path) -> dict:
    # the same OOM is measured again and again on purpose (each time a launched run), which
    # the record of measured OOMs would answer without launching
    return {
        "data_directory": str(inputs["data"]),
        "hf_home": str(inputs["hf"]),
        "output_dir": str(out),
        "model_map": {"tiny": {"Vanilla": str(inputs["model"])}},
        "stall_timeout_seconds": GUARD_SECONDS,
        "oom_dominance": False,
    }


DRIVER = """
import json, sys
import ray
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters

args = json.loads(sys.argv[1])
ray.init(logging_level="ERROR", runtime_env={"env_vars": args["hooks"]} if args["hooks"] else None)
outcome = measure(args["entity"], args["experiment"], SFTTrainerParameters(**args["params"]), label="stages")
print("OUTCOME " + json.dumps({"kind": type(outcome).__name__, "reason": getattr(outcome, "reason", ""),
                               "gpu_oom": getattr(outcome, "gpu_oom", False),
                               "metadata": outcome.metadata}, default=str))
"""


def measure_on(cluster: RayCluster, inputs, out: Path, hooks: dict[str, str] | None = None) -> dict:
    """One 2-node measurement below ado, from a driver process of its own attached to the
    cluster (this process must not join one), with `hooks` in its workers' environment."""
    args = {
        "entity": ENTITY,
        "experiment": EXPERIMENT,
        "params": parameters(inputs, out),
        "hooks": hooks or {},
    }
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(args)],
        env=cluster.client_env,
        capture_output=True,
        text=True,
        timeout=GUARD_SECONDS,
    )
    line = next((x for x in result.stdout.splitlines() if x.startswith("OUTCOME ")), None)
    assert line, result.stdout[-3000:] + result.stderr[-5000:]
    return json.loads(line.removeprefix("OUTCOME "))


def markers(stages: Path) -> dict[str, list[str]]:
    return {
        p.name: json.loads(p.read_text()) for p in stages.iterdir() if not p.name.startswith(".")
    }


def test_no_node_launches_before_every_node_has_prepared(cluster, inputs, tmp_path):
    stages = tmp_path / "stages"
    stages.mkdir()
    # node 1 prepares only once node 0 has, and 5 s later: under a design where each node
    # launched after its own preparation, node 0 would launch first and wait for its peer
    outcome = measure_on(
        cluster,
        inputs,
        tmp_path / "out",
        {"SFTTRAINER_TEST_STAGES": str(stages), "SFTTRAINER_TEST_SLOW_PREPARE": "1@5"},
    )
    assert outcome["kind"] == "Measured", outcome["reason"]
    seen = markers(stages)
    assert sorted(seen) == [
        "launch-0",
        "launch-1",
        "prepare-start-0",
        "prepare-start-1",
        "prepared-0",
        "prepared-1",
    ], seen  # each stage once per node
    assert seen["prepared-1"] == ["prepared-0"]  # the slow node did prepare after the other
    # every launch came after every node's preparation had ended
    assert seen["launch-0"] == seen["launch-1"] == ["prepared-0", "prepared-1"], seen
    assert [n["cancelled"] for n in outcome["metadata"]["nodes"]] == [False, False]


def test_a_node_that_cannot_prepare_fails_naming_it_and_nothing_launches(cluster, inputs, tmp_path):
    stages, out = tmp_path / "stages", tmp_path / "out"
    stages.mkdir()
    outcome = measure_on(
        cluster,
        inputs,
        out,
        {"SFTTRAINER_TEST_STAGES": str(stages), "SFTTRAINER_TEST_UNMOUNTED_DATASET": "1"},
    )
    assert outcome["kind"] == "Failed", outcome
    missing = inputs["data"] / "not-mounted-here" / datasets.dataset_filename(DATASET)
    reason = outcome["reason"]
    assert reason.startswith(f"dataset file {missing} does not exist on "), reason
    assert reason.endswith(f" on node 1 ({os.uname().nodename})"), reason
    seen = markers(stages)
    # node 0 prepared (it was not merely never asked), and no node launched anything
    assert sorted(seen) == ["prepare-start-0", "prepare-start-1", "prepared-0", "prepared-1"], seen
    assert "workdir" not in outcome["metadata"]  # the measurement says nothing was launched
    assert not list(out.glob("*/*/node-*"))


class LauncherStopper(threading.Thread):
    """SIGSTOPs the launcher of node 1 of every measurement under `out` once its rank runs,
    then lets the rank fire its OOM (a gate file in `gates`), so that node ends only when it
    is cancelled. Counts the launchers it stopped while they ran (psutil reports them
    stopped, not gone)."""

    def __init__(self, out: Path, gates: Path) -> None:
        super().__init__(daemon=True)
        self.out, self.gates = out, gates
        self.stopped: dict[int, psutil.Process] = {}
        self.in_time = 0
        self.done = threading.Event()

    def _node_1(self) -> tuple[list[psutil.Process], list[psutil.Process]]:
        launchers, ranks = [], []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            line = " ".join(proc.info["cmdline"] or ())
            if (
                str(self.out) in line
                and "/node-1" in line
                and "ado_actuators.sfttrainer.trainer" in line
            ):
                (launchers if "accelerate.commands.launch" in line else ranks).append(proc)
        return launchers, ranks

    def run(self) -> None:
        while not self.done.is_set():
            launchers, ranks = self._node_1()
            fresh = [p for p in launchers if p.pid not in self.stopped]
            if not fresh or not ranks:
                time.sleep(0.2)
                continue
            for launcher in fresh:
                with contextlib.suppress(psutil.Error):
                    launcher.send_signal(signal.SIGSTOP)
                    self.stopped[launcher.pid] = launcher
                    self.in_time += self._stops(launcher)
                # opened either way: a launcher that could not be stopped fails the test on
                # in_time, not by a rank held until the guard deadline
                (self.gates / f"stopped-{launcher.pid}").touch()

    @staticmethod
    def _stops(proc: psutil.Process) -> bool:
        """Whether the signalled process stops rather than having ended (the kernel stops it
        shortly after the signal, not at once)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status = proc.status()
            if status in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE):
                return status == psutil.STATUS_STOPPED
            time.sleep(0.05)
        return False

    def held(self) -> int:
        """How many of the stopped launchers' ranks fired their fault only once let."""
        return sum((self.gates / f"fired-{pid}").exists() for pid in self.stopped)

    def release(self) -> None:
        """Kills what the measurement did not (a test failing early must leave nothing)."""
        self.done.set()
        for proc in self.stopped.values():
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.fixture
def launcher_stopper(tmp_path, gates):
    stopper = LauncherStopper(tmp_path / OOM_DIR, gates)
    yield stopper
    stopper.release()


def test_a_cancelled_node_returns_what_its_ranks_reported(
    cluster, inputs, tmp_path, launcher_stopper
):
    out = tmp_path / OOM_DIR
    launcher_stopper.start()
    outcome = measure_on(cluster, inputs, out)
    launcher_stopper.done.set()
    assert launcher_stopper.in_time == 1, (
        f"node 1's launcher was not stopped while its rank ran: {outcome}"
    )
    assert launcher_stopper.held() == 1  # its rank fired the OOM only after that
    # node 0 failed first (its rank lost its peer); node 1 was cancelled and returned the OOM
    assert [(n["machine_rank"], n["cancelled"]) for n in outcome["metadata"]["nodes"]] == [
        (0, False),
        (1, True),
    ], outcome
    assert outcome["kind"] == "Invalid" and outcome["gpu_oom"], outcome["reason"]
    assert outcome["reason"].startswith("GPU out of memory: rank 1 on node 1 "), outcome["reason"]
    assert not leftover_processes(out), "a launcher or rank outlived its measurement"
    assert not live_placement_groups(cluster)


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


REPEATS = (48, 56, 64)  # three entities (model_max_length), each a measurement of its own


def test_an_oom_on_the_second_node_is_invalid_every_time_through_ado(
    cluster, inputs, tmp_path, launcher_stopper
):
    out = tmp_path / OOM_DIR
    ado = AdoCLI(
        home=tmp_path / "ado", extra_env={"RAY_ADDRESS": cluster.address, **cluster.auth_env}
    )
    config_id = ado.create(
        "actuatorconfiguration",
        write_yaml(
            tmp_path / "ac.yaml",
            {"actuatorIdentifier": "SFTTrainer", "parameters": parameters(inputs, out)},
        ),
    )
    fixed = {
        k: v
        for k, v in ENTITY.items()
        if k not in ("model_name", "number_gpus", "model_max_length", "batch_size")
    }
    space_id = ado.create(
        "space",
        write_yaml(
            tmp_path / "space.yaml",
            {
                "experiments": [
                    {
                        "experimentIdentifier": EXPERIMENT,
                        "actuatorIdentifier": "SFTTrainer",
                        "parameterization": [
                            {"property": {"identifier": k}, "value": v} for k, v in fixed.items()
                        ],
                    }
                ],
                "entitySpace": [
                    {"identifier": name, "propertyDomain": {"values": values}}
                    for name, values in {
                        "model_name": ["tiny"],
                        "number_gpus": [0],
                        "model_max_length": list(REPEATS),
                        "batch_size": [ENTITY["batch_size"]],
                    }.items()
                ],
            },
        ),
        "--new-sample-store",
    )
    operation = yaml.safe_load((REPO / "examples/remote-raycluster/operation.yaml").read_text())
    operation |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    launcher_stopper.start()
    operation_id, output = run_operation(ado, write_yaml(tmp_path / "op.yaml", operation))
    launcher_stopper.done.set()
    assert launcher_stopper.in_time == launcher_stopper.held() == len(REPEATS), output[-3000:]
    assert len(trace(ado, operation_id)) == len(REPEATS)  # each answered once
    rows = ado.measurements(space_id)
    assert sorted(int(r["model_max_length"]) for r in rows) == sorted(REPEATS), output[-3000:]
    assert all(float(r["is_valid"]) == 0 for r in rows), rows
    lines = [x for x in output.splitlines() if f"SFTTrainer {EXPERIMENT}" in x]
    assert len(lines) == len(REPEATS), "\n".join(lines)
    assert all("is_valid=0: GPU out of memory: rank 1 on node 1 " in x for x in lines), "\n".join(
        lines
    )
    assert not leftover_processes(out) and not live_placement_groups(cluster)
