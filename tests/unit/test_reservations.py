"""What a measurement asks Ray for, so that it never waits on resources its callers hold
(issue 19: ado's executor task holds 1 CPU, a ray_tune trial reserves 1 CPU in a placement
group; on 2-CPU nodes a request for 2 never started)."""

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.execute.cluster import placement
from ado_actuators.sfttrainer.execute.reservations import (
    OWN_GROUP_PREFIX,
    caller_cpus,
    cpus_to_ask,
    holders_text,
    reserved_cpus,
)
from ado_actuators.sfttrainer.plan.launch.launch_plan import ResourceRequest, plan_resources


def node(node_id: str, cpus: float, **custom: float) -> dict:
    return {
        "NodeID": node_id,
        "Alive": True,
        "NodeManagerAddress": "10.0.0.1",
        "Resources": {"CPU": cpus, **custom},
    }


def group(name: str, state: str, *bundles: tuple[str, dict]) -> dict:
    return {
        "placement_group_id": "f" * 36,
        "name": name,
        "state": state,
        "bundles": {i: b for i, (_, b) in enumerate(bundles)},
        "bundles_to_node_id": {i: n for i, (n, _) in enumerate(bundles) if n},
    }


TRIAL = group("", "CREATED", ("a", {"CPU": 1.0}))  # Ray Tune names none
OURS = group(f"{OWN_GROUP_PREFIX}1234", "CREATED", ("a", {"CPU": 2.0}), ("b", {"CPU": 2.0}))
PENDING = group("", "PENDING", ("", {"CPU": 8.0}))
REMOVED = group("", "REMOVED", ("a", {"CPU": 8.0}))


def test_groups_of_others_reserve_cpus_and_ours_do_not():
    # ours end on their own (waiting for them is queueing); a pending group holds nothing yet
    assert reserved_cpus([TRIAL, OURS, PENDING, REMOVED]) == {"a": 1.0}


def test_a_task_lends_its_cpus_while_it_waits_and_an_actor_keeps_them():
    assert caller_cpus({"CPU": 1.0}, in_actor=False, in_group=False) == 0  # ado's executor task
    assert caller_cpus({"CPU": 1.0}, in_actor=True, in_group=False) == 1
    # an actor inside a group: the group's reservation already counts it
    assert caller_cpus({"CPU": 1.0}, in_actor=True, in_group=True) == 0


def test_the_request_is_capped_at_the_count_th_freest_node():
    assert cpus_to_ask(2, [2.0], 1) == 2
    assert cpus_to_ask(2, [1.0], 1) == 1  # a trial's group reserves 1 of 2
    assert cpus_to_ask(2, [1.0, 2.0], 2) == 1  # bundles of one group are equal
    assert cpus_to_ask(16, [64.0, 64.0, 8.0], 2) == 16
    assert cpus_to_ask(2, [0.0], 1) == 0
    assert cpus_to_ask(2, [2.0], 2) == 2  # too few nodes: not capped, placement says why


def test_two_cpu_nodes_measure_one_and_two_node_entities_beside_their_callers():
    """The issue's clusters: the request fits what the callers leave free on every node."""
    for nodes, held, number_nodes in (
        ([node("a", 2)], reserved_cpus([TRIAL]), 1),  # ray_tune on a 2-CPU machine
        ([node("a", 2), node("b", 2)], {}, 2),  # ado's executor task: lent while waiting
        ([node("a", 2), node("b", 2)], reserved_cpus([TRIAL]), 2),
    ):
        values = entity_values(
            {
                "model_name": "tiny",
                "model_max_length": 64,
                "batch_size": 2,
                "number_gpus": 0,
                "number_nodes": number_nodes,
            }
        )
        bundle = placement(plan_resources(values), nodes, held, number_nodes)
        free = sorted(n["Resources"]["CPU"] - held.get(n["NodeID"], 0) for n in nodes)
        assert 0 < bundle["CPU"] <= free[0], (nodes, held, bundle)


def test_gpu_nodes_keep_the_spec_share_when_it_is_free():
    request = ResourceRequest(cpus=16, gpus=8, custom={"full-worker": 1.0})
    nodes = [node(x, 64, GPU=8, **{"full-worker": 1.0}) for x in "ab"]
    assert placement(request, nodes, {"a": 1.0}, 2) == {"CPU": 16, "GPU": 8, "full-worker": 1.0}
    assert (
        placement(request, [node("a", 8, GPU=8, **{"full-worker": 1.0}), nodes[1]], {}, 2)["CPU"]
        == 8
    )


def test_a_multi_node_bundle_asks_for_something_when_every_cpu_is_reserved():
    bundle = placement(
        ResourceRequest(cpus=2, gpus=0), [node("a", 1), node("b", 1)], {"a": 1.0, "b": 1.0}, 2
    )
    assert 0 < bundle["CPU"] < 1


def test_holders_name_groups_tasks_and_actors_per_node():
    text = holders_text(
        {"a": "10.0.0.1/aaaa", "b": "10.0.0.2/bbbb"},
        tasks=[
            {"name": "_enqueue_completed", "node_id": "a", "required_resources": {"CPU": 1.0}},
            {"name": "idle", "node_id": "a", "required_resources": {}},
        ],
        actors=[
            {
                "name": "Trainable",
                "node_id": "a",
                "required_resources": {"CPU": 1.0},
                "placement_group_id": "x",
            }
        ],
        groups=[TRIAL, PENDING],
    )
    a, b = text.split("; node ")
    assert "placement group ffffffff reserves CPU=1" in a
    assert "task _enqueue_completed asked for CPU=1" in a and "idle" not in a
    assert "actor Trainable (in a placement group) asked for CPU=1" in a
    assert b == "10.0.0.2/bbbb: nothing visible"
