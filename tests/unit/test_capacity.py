"""Issue 26, point 6: a request the cluster can never hold is answered at once, not after
placement_timeout_seconds; where an autoscaler could add what is missing, it waits."""

from ado_actuators.sfttrainer.execute.capacity import (
    UNKNOWN,
    Autoscaler,
    from_type_names,
    never_placeable,
    node_types,
    status_type_names,
)
from ado_actuators.sfttrainer.execute.cluster import unplaceable_reason

A100 = "NVIDIA-A100-SXM4-80GB"
HEAD = {"Alive": True, "NodeID": "aa", "Resources": {"CPU": 4.0, "node:__internal_head__": 1.0}}
WORKER = {
    "Alive": True,
    "NodeID": "bb",
    "Resources": {"CPU": 64.0, "GPU": 8.0, A100: 8.0, "full-worker": 1.0},
}
DEAD = {**WORKER, "Alive": False, "NodeID": "cc"}
NODES = [HEAD, WORKER, {**WORKER, "NodeID": "dd"}, DEAD]
BUNDLE = {"CPU": 16.0, "GPU": 8.0, A100: 8.0, "full-worker": 1.0}
GPU_TYPE = {"CPU": 64, "GPU": 8, A100: 8, "full-worker": 1}


def test_what_the_alive_nodes_hold_is_never_refused_whatever_the_autoscaler():
    for autoscaler in (None, UNKNOWN, Autoscaler(())):
        assert never_placeable(BUNDLE, 2, NODES, autoscaler) is None


def test_without_an_autoscaler_too_many_nodes_an_unknown_gpu_model_or_too_many_gpus_are_answered():
    # more nodes than exist (the dead one does not count)
    assert "no autoscaler" in never_placeable(BUNDLE, 3, NODES, None)
    # a gpu_model no node has
    h100 = {"CPU": 16.0, "GPU": 8.0, "NVIDIA-H100-80GB-HBM3": 8.0}
    assert never_placeable(h100, 1, NODES, None) is not None
    # more GPUs per node than any node has
    assert never_placeable({**BUNDLE, "GPU": 16.0, A100: 16.0}, 2, NODES, None) is not None


def test_an_autoscaler_whose_node_types_ray_does_not_report_keeps_the_wait():
    assert never_placeable(BUNDLE, 5, NODES, UNKNOWN) is None
    assert never_placeable({"GPU": 1.0, "NVIDIA-H100-80GB-HBM3": 1.0}, 1, NODES, UNKNOWN) is None


def test_node_types_that_could_supply_it_keep_the_wait():
    two_more = Autoscaler(node_types([("gpu", GPU_TYPE, 4)]))  # 2 running + 2 to add
    assert never_placeable(BUNDLE, 4, NODES, two_more) is None
    unlimited = Autoscaler(node_types([("gpu", GPU_TYPE, -1)]))
    assert never_placeable(BUNDLE, 40, NODES, unlimited) is None
    # a type with a GPU model no running node has: scale from zero
    h100 = {"CPU": 16.0, "GPU": 8.0, "NVIDIA-H100-80GB-HBM3": 8.0}
    from_zero = Autoscaler(
        node_types(
            [
                ("cpu", {"CPU": 8}, 10),
                ("h100", {"CPU": 64, "GPU": 8, "NVIDIA-H100-80GB-HBM3": 8}, 2),
            ]
        )
    )
    assert never_placeable(h100, 2, NODES, from_zero) is None
    # the head counts beside the node types (a type's maximum counts running workers only)
    cpu_bundle = {"CPU": 2.0}
    assert (
        never_placeable(cpu_bundle, 4, [HEAD], Autoscaler(node_types([("cpu", {"CPU": 8}, 3)])))
        is None
    )


def test_node_types_that_never_could_are_answered_with_what_they_offer():
    at_most_two = Autoscaler(node_types([("gpu", GPU_TYPE, 2), ("cpu", {"CPU": 8}, -1)]))
    why = never_placeable(BUNDLE, 3, NODES, at_most_two)
    assert why is not None and "no node type of the autoscaler adds enough" in why
    types = f"gpu [CPU=64, GPU=8, {A100}=8, full-worker=1] up to 2; cpu [CPU=8] up to any number"
    assert types in why
    # a gpu_model no node type has, and more GPUs per node than any type has
    h100 = {"CPU": 16.0, "GPU": 8.0, "NVIDIA-H100-80GB-HBM3": 8.0}
    assert never_placeable(h100, 1, NODES, at_most_two) is not None
    assert never_placeable({**BUNDLE, "GPU": 16.0, A100: 16.0}, 1, NODES, at_most_two) is not None
    # a type that may start none (max 0) adds nothing
    assert (
        never_placeable(BUNDLE, 3, NODES, Autoscaler(node_types([("gpu", GPU_TYPE, 0)])))
        is not None
    )
    # later Ray's read-only mirror: each type at its running count, so nothing to add
    mirror = Autoscaler(node_types([("node_bb", GPU_TYPE, 1), ("node_dd", GPU_TYPE, 1)]))
    assert never_placeable(BUNDLE, 3, NODES, mirror) is not None


def test_the_monitors_read_only_mirror_means_no_autoscaler_and_named_types_mean_one():
    readonly = {
        "autoscaler_report": {
            "active_nodes": {"node_aa": 1},
            "idle_nodes": {"node_bb": 1},
            "pending_nodes": [],
            "pending_launches": {},
            "failed_nodes": [],
            "node_type_mapping": {"aa": "node_aa", "bb": "node_bb"},
        }
    }
    names = status_type_names(readonly)
    assert sorted(set(names)) == ["node_aa", "node_bb"]
    assert from_type_names(names, ["aa", "bb", "cc"]) is None
    kuberay = {
        "autoscaler_report": {
            "active_nodes": {"headgroup": 1},
            "idle_nodes": None,
            "pending_nodes": [["10.0.0.9", "gpu-group", "setting-up"]],
            "pending_launches": {"gpu-group": 1},
            "failed_nodes": [],
        }
    }
    assert from_type_names(status_type_names(kuberay), ["aa"]) == UNKNOWN
    # a type named node_<id> of no node of this cluster is not the mirror's
    assert from_type_names(["node_aa", "node_zz"], ["aa"]) == UNKNOWN
    assert from_type_names([], ["aa"]) == UNKNOWN
    assert status_type_names({"load_metrics_report": {}}) is None  # no report yet


def test_the_answer_keeps_todays_reason_and_says_it_did_not_wait():
    never = never_placeable(BUNDLE, 3, NODES, None)
    reason = unplaceable_reason(BUNDLE, 3, NODES, None, never=never)
    assert reason.startswith("could not place 3 nodes of ")
    assert "only 2 node(s) offer that much, and Ray reports no autoscaler" in reason
    assert "failed at once, without waiting placement_timeout_seconds" in reason
    assert "within" not in reason and "raise placement_timeout_seconds" not in reason
    roce = unplaceable_reason(
        {**BUNDLE, "RoCE": 1.0},
        2,
        NODES,
        None,
        never=never_placeable({**BUNDLE, "RoCE": 1.0}, 2, NODES, None),
    )
    assert "no node offers RoCE" in roce


def test_what_ray_cannot_tell_reads_as_an_autoscaler_that_may_add_anything(monkeypatch):
    from ado_actuators.sfttrainer.execute import capacity

    def broken():
        raise RuntimeError("another Ray release")

    monkeypatch.setattr(capacity, "_reported_node_types", broken)
    assert capacity.read_autoscaler(NODES) == UNKNOWN
    monkeypatch.setattr(capacity, "_reported_node_types", lambda: None)
    monkeypatch.setattr(capacity, "_is_v2", lambda: True)  # v2 names prove nothing
    assert capacity.read_autoscaler(NODES) == UNKNOWN
    monkeypatch.setattr(capacity, "_is_v2", lambda: False)
    monkeypatch.setattr(capacity, "_monitor_status", lambda: None)  # no monitor reports
    assert capacity.read_autoscaler(NODES, patience=0) == UNKNOWN
    mirror = {"autoscaler_report": {"active_nodes": {"node_aa": 1, "node_bb": 1}}}
    monkeypatch.setattr(capacity, "_monitor_status", lambda: mirror)
    assert capacity.read_autoscaler(NODES, patience=0) is None
    reported = node_types([("gpu", GPU_TYPE, 4)])
    monkeypatch.setattr(capacity, "_reported_node_types", lambda: reported)
    assert capacity.read_autoscaler(NODES) == Autoscaler(reported)


def test_ray_is_asked_about_its_autoscaler_only_for_what_the_alive_nodes_cannot_hold(monkeypatch):
    from ado_actuators.sfttrainer.contract.outcomes import Failed
    from ado_actuators.sfttrainer.execute import capacity, cluster
    from ado_actuators.sfttrainer.plan.launch.launch_plan import ResourceRequest

    asked = []
    monkeypatch.setattr(cluster, "held_by_callers", dict)
    monkeypatch.setattr(capacity, "read_autoscaler", lambda nodes: asked.append(1) or None)
    request = ResourceRequest(cpus=16, gpus=8, custom={A100: 8.0, "full-worker": 1.0})
    assert cluster._bundle(request, NODES, 2) == BUNDLE and not asked
    refused = cluster._bundle(request, NODES, 3)
    assert isinstance(refused, Failed) and asked == [1]
    assert "only 2 node(s) offer that much, and Ray reports no autoscaler" in refused.reason
    monkeypatch.setattr(capacity, "read_autoscaler", lambda nodes: UNKNOWN)
    assert cluster._bundle(request, NODES, 3) == BUNDLE  # waited for, as before
