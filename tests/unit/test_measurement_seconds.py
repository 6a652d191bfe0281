"""measurement_seconds: how long a measurement reserved its devices, from the grant to the release
(execute/cluster.py), on a clock the test moves: Ray, its placement group and the node tasks are
stand-ins that say when they take time."""

from types import SimpleNamespace

import pytest

from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.execute import cluster
from ado_actuators.sfttrainer.execute.node import NodeRun

PLACEMENT_WAIT, TRAINING, RELEASE = 30.0, 5.0, 2.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time_ns(self) -> int:
        return int(self.now * 1e9)


class Group:
    def __init__(self, clock: Clock, problem: str | None = None) -> None:
        self.clock, self.problem, self.removed = clock, problem, False

    def wait(self, timeout: float) -> str | None:
        self.clock.now += PLACEMENT_WAIT  # the schedule's wait: not the measurement's cost
        return self.problem

    def strategy(self, index: int) -> str:
        return f"bundle {index}"

    def remove(self) -> None:
        self.clock.now += RELEASE  # the devices are the measurement's until they are released
        self.removed = True


class Ray:
    """What measure_on_cluster asks of the ray module for one node."""

    exceptions = SimpleNamespace(RayError=RuntimeError)

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def nodes(self) -> list:
        return []

    def remote(self, function):
        task = SimpleNamespace(remote=lambda request: function(request))
        return SimpleNamespace(options=lambda **options: task)

    def get(self, run):
        return run


class Request:
    run_name = "r"

    def __init__(self, nodes: int) -> None:
        self.plan_inputs = SimpleNamespace(values=SimpleNamespace(number_nodes=nodes))

    def model_copy(self, update: dict) -> "Request":
        return self


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(cluster, "time", clock)
    monkeypatch.setattr(cluster.orphan_groups, "reap", list)
    monkeypatch.setattr(cluster.placement_queue, "wait_for_older", lambda asked, timeout: None)
    monkeypatch.setattr(cluster, "_bundle", lambda resources, nodes, count: {"CPU": 1.0})
    return clock


def trains(clock: Clock, monkeypatch, outcome) -> None:
    """Every node task takes TRAINING seconds and its runs classify as `outcome`."""

    def run_node(request, *args):
        clock.now += TRAINING
        return NodeRun()

    def run_nodes(request, count, options, probe):
        clock.now += TRAINING
        return [NodeRun(machine_rank=k) for k in range(count)]

    monkeypatch.setattr(cluster, "run_node", run_node)
    monkeypatch.setattr(cluster, "run_nodes", run_nodes)
    monkeypatch.setattr(cluster, "_outcome", lambda request, runs: outcome)


def measure(clock, monkeypatch, nodes=1, ray=True, group=None):
    group = group or Group(clock)
    monkeypatch.setattr(cluster, "_running_ray", lambda: Ray(clock) if ray else None)
    monkeypatch.setattr(cluster._Placement, "for_caller", lambda *args: group)
    return cluster.measure_on_cluster(Request(nodes), None, placement_timeout=60), group


@pytest.mark.parametrize("nodes", [1, 2])
def test_from_the_group_placed_to_the_group_removed(clock, monkeypatch, nodes):
    trains(clock, monkeypatch, Measured(properties={"is_valid": 1}))
    found, group = measure(clock, monkeypatch, nodes)
    assert group.removed
    assert found.properties == {"is_valid": 1, "measurement_seconds": TRAINING + RELEASE}
    assert found.metadata["placement_wait_seconds"] == PLACEMENT_WAIT


def test_without_ray_the_node_run_in_this_process_is_the_span(clock, monkeypatch):
    trains(clock, monkeypatch, Measured(properties={"is_valid": 1}))
    found, _ = measure(clock, monkeypatch, ray=False)
    assert found.properties["measurement_seconds"] == TRAINING


def test_a_row_that_ran_out_of_memory_cost_its_time_too_a_failed_one_is_not_stored(
    clock, monkeypatch
):
    trains(clock, monkeypatch, Invalid(reason="GPU out of memory", gpu_oom=True))
    oom, _ = measure(clock, monkeypatch)
    assert oom.properties == {"measurement_seconds": TRAINING + RELEASE}
    trains(clock, monkeypatch, Failed("the measurement task died"))
    assert measure(clock, monkeypatch)[0] == Failed(
        "the measurement task died", {"placement_wait_seconds": PLACEMENT_WAIT}
    )


def test_a_group_never_placed_held_nothing_and_is_removed(clock, monkeypatch):
    trains(clock, monkeypatch, Measured(properties={"is_valid": 1}))
    found, group = measure(clock, monkeypatch, group=Group(clock, problem="could not place"))
    assert found == Failed("could not place") and group.removed
