"""Issue 19, point 1: on nodes of 2 CPUs a measurement must not wait on what its callers
hold — ado's executor task (1 CPU, on one node) and, under ado's ray_tune, a trial's
placement group (1 CPU) — and a wait that cannot end says what holds the resources.

A real cluster of two raylets with 2 CPUs each (`ray start --num-cpus 2`), driven through
`ado create operation` as a user would; every node trains one CPU rank."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ado_cli import AdoCLI
from ado_operations import run_operation, trace
from ray_cluster import RayCluster, live_placement_groups, start_cluster, two_raylets
from test_multinode import (
    ENTITY,
    actuator_parameters,
    ensure_dataset,
    operation_document,
    space_document,
    write_yaml,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def cluster(isolated_env) -> Iterator[RayCluster]:
    yield from two_raylets(cpus=2)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("small-nodes")
    inputs = {
        "root": root,
        "model": tiny_model_dir,
        "data": root / "data",
        "hf": root / "hf",
        "out": root / "out",
    }
    ensure_dataset(inputs)
    return inputs


def on_cluster(cluster: RayCluster, code: str) -> str:
    """Run `code` in a driver of its own attached to the cluster (a test process must not join)."""
    prelude = "import ray; ray.init(logging_level='ERROR', namespace='small-nodes')\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + code],
        env=cluster.client_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def measure(
    cluster, inputs, tmp_path, entity_space: dict, **params
) -> tuple[list[dict], str, list]:
    """(stored rows, console output, trace) of one operation over `entity_space`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    ado = AdoCLI(
        home=tmp_path / "ado",
        extra_env={"RAY_ADDRESS": cluster.address, **cluster.auth_env, "PYTHONPATH": str(REPO)},
    )
    config_id = ado.create(
        "actuatorconfiguration",
        write_yaml(
            tmp_path / "ac.yaml",
            {
                "actuatorIdentifier": "SFTTrainer",
                "parameters": actuator_parameters(inputs, **params),
            },
        ),
    )
    space_id = ado.create(
        "space",
        write_yaml(tmp_path / "space.yaml", space_document(entity_space)),
        "--new-sample-store",
    )
    operation = write_yaml(tmp_path / "op.yaml", operation_document(space_id, config_id))
    identifier, output = run_operation(ado, operation)
    return ado.measurements(space_id), output, trace(ado, identifier)


def test_two_cpu_nodes_measure_one_and_two_node_entities(cluster, inputs, tmp_path):
    """ado's executor task holds 1 CPU of a node while the measurement asks for 2 per node."""
    rows, output, _ = measure(cluster, inputs, tmp_path, {"number_nodes": [1, 2]})
    valid = sorted((r["number_nodes"], float(r["is_valid"])) for r in rows)
    assert valid == [("1", 1.0), ("2", 1.0)], output[-4000:]
    assert all(float(r["dataset_tokens_per_second"]) > 0 for r in rows)
    assert not live_placement_groups(cluster)


TRIALS = """
from ray.util.placement_group import placement_group
# what ado's ray_tune holds while a trial waits for its measurement: 1 CPU in a group, here
# on each node, kept after this driver exits
group = placement_group([{"CPU": 1.0}, {"CPU": 1.0}], strategy="STRICT_SPREAD",
                        name="trial-reservations", lifetime="detached")
assert group.wait(60)
"""

STATE_API_ANSWERS = """
import time
from ray.util.state import list_actors
for attempt in range(30):
    try:
        assert any(a.name == "hog" for a in list_actors(filters=[("state", "=", "ALIVE")]))
        break
    except Exception as error:
        if attempt == 29:
            raise SystemExit(f"Ray's state API (the dashboard) never named the hog: {error!r}")
        time.sleep(2)
"""

HOG = """
import ray
@ray.remote(num_cpus=1)
class Hog:
    def node(self):
        return ray.get_runtime_context().get_node_id()
hog = Hog.options(name="hog", lifetime="detached").remote()
print("HOG", ray.get(hog.node.remote()))
"""


def test_reserved_cpus_are_left_alone_and_a_wait_that_cannot_end_names_the_holders(
    cluster, inputs, tmp_path
):
    on_cluster(cluster, TRIALS)
    try:
        # 1 CPU of each node reserved for good: each node task asks for the CPU left
        rows, output, _ = measure(cluster, inputs, tmp_path / "reserved", {"number_nodes": [1, 2]})
        valid = sorted((r["number_nodes"], float(r["is_valid"])) for r in rows)
        assert valid == [("1", 1.0), ("2", 1.0)], output[-4000:]
        # now a busy actor takes a node's last CPU: the 2-node measurement cannot be placed,
        # and after placement_timeout_seconds it fails saying who holds what
        on_cluster(cluster, HOG)
        on_cluster(cluster, STATE_API_ANSWERS)  # naming the actor needs it (the dashboard)
        # a second cluster on the host, as beside other tests or on a shared machine: the worker
        # must ask its own cluster's state API (Ray's address discovery gives up on two)
        bystander = start_cluster([{}], cpus=1)
        try:
            rows, output, requests = measure(
                cluster,
                inputs,
                tmp_path / "busy",
                {"number_nodes": [2]},
                placement_timeout_seconds=15,
            )
        finally:
            bystander.stop()
        assert not rows and [r["Status"] for r in requests] == ["Failed"], output[-4000:]
        (line,) = [x for x in output.splitlines() if "Failed: could not place" in x]
        assert "stayed in use" in line and "Holding them: node " in line, line
        assert "placement group trial-reservations reserves CPU=1" in line, line
        assert "actor hog asked for CPU=1" in line, line
    finally:
        on_cluster(
            cluster,
            "from ray.util.placement_group import get_placement_group, "
            "remove_placement_group\nremove_placement_group(get_placement_group("
            "'trial-reservations'))\n"
            "try:\n    ray.kill(ray.get_actor('hog'))\nexcept ValueError:\n    pass\n",
        )
    assert not live_placement_groups(cluster)


QUEUE = """
import json, logging, sys, threading, time
from ray.util import placement_group_table
from ray.util.placement_group import placement_group, remove_placement_group
from ado_actuators.sfttrainer.execute import placement_queue
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

entity, settings = json.loads(sys.argv[1]), MeasurementSettings(**json.loads(sys.argv[2]))
job = ray.get_runtime_context().get_job_id()
name = lambda run, asked: placement_queue.group_name(run, asked, job)
# a measurement running on one node (all its CPUs), and an older 2-node one that waits for it
running = placement_group([{"CPU": 2.0}], name=name("running", time.time_ns()))
assert running.wait(60)
wide = placement_group([{"CPU": 2.0}] * 2, strategy="STRICT_SPREAD",
                       name=name("wide", time.time_ns()))
queued = threading.Event()
class Queued(logging.Handler):
    def emit(self, record):
        queued.set()
logging.getLogger(placement_queue.__name__).addHandler(Queued())
logging.getLogger(placement_queue.__name__).setLevel(logging.INFO)
# a younger 1-node measurement: the other node is free, yet it must wait behind `wide`
result = {}
young = threading.Thread(target=lambda: result.update(
    outcome=measure(entity, "finetune_full_benchmark-v1.0.0", settings, label="young")))
young.start()
while young.is_alive() and not queued.wait(1):
    pass  # it queues, or (wrongly) measures on the free node and ends
assert queued.is_set(), f"the younger measurement never queued: {result}"
def ours():
    return {g["name"]: g["state"] for g in placement_group_table().values()
            if g["state"] != "REMOVED"}
snapshot = ours()
remove_placement_group(running)   # the running one ends: the wide one is placed first
assert wide.wait(120)
placed = ours()
remove_placement_group(wide)      # ... and ends too: the younger one follows
young.join(600)
print("RESULT", json.dumps({"snapshot": snapshot, "placed": placed,
                            "outcome": type(result["outcome"]).__name__,
                            "valid": result["outcome"].properties.get("is_valid")
                            if hasattr(result["outcome"], "properties") else None}))
"""


def test_a_younger_measurement_queues_behind_an_older_one_that_waits_for_two_nodes(cluster, inputs):
    """Without the queue the younger one takes the free node at once, and the 2-node one
    waits until both nodes are free at the same moment (overnight: Failed after 120 s)."""
    entity = {**ENTITY, "number_nodes": 1}
    settings = actuator_parameters(inputs)
    prelude = "import ray; ray.init(logging_level='ERROR', namespace='small-nodes')\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + QUEUE, json.dumps(entity), json.dumps(settings)],
        env=cluster.client_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    # while the 2-node group waited, the younger measurement had created no group of its own
    assert sorted(result["snapshot"].values()) == ["CREATED", "PENDING"], result
    assert set(result["placed"]) <= set(result["snapshot"]), result
    assert result["outcome"] == "Measured" and result["valid"] in (1, 1.0, True), result
    assert not live_placement_groups(cluster)


KILLED = """
import json, logging, pathlib, sys, time
import ray
from ray.util.placement_group import placement_group
from ado_actuators.sfttrainer.execute import placement_queue
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

ray.init(logging_level="ERROR", namespace="small-nodes")
entity, settings, marks = json.loads(sys.argv[1]), json.loads(sys.argv[2]), pathlib.Path(sys.argv[3])
count = int(sys.argv[4])
# an older measurement that no node can place: the others queue behind it until the job ends
job = ray.get_runtime_context().get_job_id()
(marks / "job").write_text(job)
never = placement_group([{"CPU": 64.0}], name=placement_queue.group_name("never", time.time_ns(), job))

@ray.remote(num_cpus=0)
def queued(k):
    class Mark(logging.Handler):
        def emit(self, record):
            (marks / f"queued-{k}").touch()
    logging.getLogger(placement_queue.__name__).addHandler(Mark())
    logging.getLogger(placement_queue.__name__).setLevel(logging.INFO)
    return measure(entity, "finetune_full_benchmark-v1.0.0", MeasurementSettings(**settings),
                   label=f"queued{k}")

@ray.remote(num_cpus=0)
class Actuator:  # as under ado: the measurements' tasks are an actor's, which outlive the driver
    def submit(self):
        self.refs = [queued.remote(k) for k in range(count)]

actuator = Actuator.remote()
ray.get(actuator.submit.remote())
while len(list(marks.glob("queued-*"))) < count:
    time.sleep(0.2)
(marks / "all-queued").touch()
time.sleep(600)
"""


def test_measurements_queued_when_their_operation_is_killed_leave_no_placement_group(
    cluster, inputs, tmp_path
):
    """The driver's death removes the group they wait for, which wakes them while their
    tasks still run: a group each created then was registered after the job's end, and Ray
    kept it for ever (the overnight rehearsal's leak)."""
    count, marks = 4, tmp_path / "marks"
    marks.mkdir()
    driver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            KILLED,
            json.dumps({**ENTITY, "number_nodes": 1}),
            json.dumps(actuator_parameters(inputs)),
            str(marks),
            str(count),
        ],
        env=cluster.client_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not (marks / "all-queued").exists():
            assert driver.poll() is None, driver.stderr.read()[-3000:]
            assert time.monotonic() < deadline, f"queued: {sorted(p.name for p in marks.iterdir())}"
            time.sleep(0.2)
    finally:
        driver.kill()  # as the overnight rehearsal kills `ado create operation`
        driver.wait()
    deadline, left = time.monotonic() + 60, live_placement_groups(cluster)
    while left and time.monotonic() < deadline:
        time.sleep(2)
        left = live_placement_groups(cluster)
    assert not left, f"placement groups left after the driver's death: {left}"
    assert not list(inputs["out"].glob("queued*")), "a measurement of a dead operation launched"
    # what no check in the task can prevent (its worker killed right after registering a
    # group) the next measurement on the cluster removes: a group named for the dead job
    reaped = on_cluster(cluster, REAP.format(dead=(marks / "job").read_text()))
    assert json.loads(reaped.split("REAPED ", 1)[1]) == {"removed": ["orphan"], "kept": ["mine"]}
    assert not live_placement_groups(cluster)


REAP = """
import json, time
from ray.util import placement_group_table
from ray.util.placement_group import placement_group, remove_placement_group
from ado_actuators.sfttrainer.execute import orphan_groups, placement_queue
name = placement_queue.group_name
orphan = placement_group([{{"CPU": 0.1}}], name=name("orphan", time.time_ns(), "{dead}"))
mine = placement_group([{{"CPU": 0.1}}], name=name("mine", time.time_ns(), orphan_groups.own_job()))
assert orphan.wait(60) and mine.wait(60)
removed = orphan_groups.reap()
live = [g["name"] for g in placement_group_table().values() if g["state"] != "REMOVED"]
remove_placement_group(mine)
print("REAPED", json.dumps({{"removed": [n.rsplit("-", 1)[1] for n in removed],
                             "kept": [n.rsplit("-", 1)[1] for n in live]}}))
"""
