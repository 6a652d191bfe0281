"""Which Ray node can run a measurement, and what a user is told when none can."""

from ado_actuators.sfttrainer.execute.cluster import (
    node_task_options,
    placement,
    task_resources,
    unplaceable_reason,
)
from ado_actuators.sfttrainer.plan.launch.launch_plan import ResourceRequest

CPU_NODE = {"Alive": True, "Resources": {"CPU": 2.0, "memory": 1e9, "node:10.0.0.1": 1.0}}
GPU_NODE = {"Alive": True, "Resources": {"CPU": 64.0, "GPU": 8.0, "NVIDIA-A100-SXM4-80GB": 8.0}}
DEAD_GPU_NODE = {**GPU_NODE, "Alive": False}


def test_cpu_request_is_capped_at_the_largest_fitting_node():
    assert placement(ResourceRequest(cpus=4, gpus=0), [CPU_NODE]) == {"CPU": 2}


def test_gpu_request_asks_for_gpus_and_the_gpu_model_resource():
    request = ResourceRequest(cpus=8, gpus=4, custom={"NVIDIA-A100-SXM4-80GB": 4.0})
    bundle = placement(request, [CPU_NODE, GPU_NODE])
    assert bundle == {"CPU": 8, "GPU": 4, "NVIDIA-A100-SXM4-80GB": 4.0}
    assert task_resources(bundle) == {
        "num_cpus": 8,
        "num_gpus": 4,
        "resources": {"NVIDIA-A100-SXM4-80GB": 4.0},
    }


def test_infeasible_request_says_what_the_cluster_offers():
    request = ResourceRequest(cpus=4, gpus=2, custom={"NVIDIA-H100-PCIe": 2.0})
    reason = placement(request, [CPU_NODE, GPU_NODE, DEAD_GPU_NODE])
    assert isinstance(reason, str)
    assert "NVIDIA-H100-PCIe" in reason and "NVIDIA-A100-SXM4-80GB=8" in reason
    assert "node:" not in reason
    assert isinstance(placement(ResourceRequest(cpus=2, gpus=1), [DEAD_GPU_NODE, CPU_NODE]), str)


WORKER = {
    "Alive": True,
    "Resources": {
        "CPU": 64.0,
        "GPU": 8.0,
        "NVIDIA-A100-SXM4-80GB": 8.0,
        "full-worker": 1.0,
        "node:10.0.0.2": 1.0,
    },
}
BUNDLE = {"CPU": 16.0, "GPU": 8.0, "NVIDIA-A100-SXM4-80GB": 8.0, "full-worker": 1.0}


def test_unplaced_nodes_say_what_the_cluster_lacks():
    too_few = unplaceable_reason(BUNDLE, 3, [WORKER, WORKER, CPU_NODE], waited=30)
    assert "could not place 3 nodes" in too_few and "within 30 s" in too_few
    assert "only 2 node(s) offer that much" in too_few
    assert "full-worker=1" in too_few and "placement_timeout_seconds" in too_few
    no_roce = unplaceable_reason({**BUNDLE, "RoCE": 1.0}, 2, [WORKER, WORKER], waited=30)
    assert "no node offers RoCE" in no_roce
    busy = unplaceable_reason(
        BUNDLE,
        2,
        [WORKER, WORKER],
        waited=30,
        holders="node 10.0.0.2/ab: placement group trial reserves CPU=1",
    )
    assert "stayed in use" in busy and "Holding them: node 10.0.0.2/ab: placement group" in busy
    one = unplaceable_reason({"CPU": 2.0}, 1, [CPU_NODE], waited=5)
    assert one.startswith("could not place the measurement's task (CPU=2) within 5 s")


def test_node_task_options_carry_an_optional_runtime_env():
    plain = node_task_options(num_cpus=2, num_gpus=0, resources={})
    assert plain == {"max_retries": 0, "num_cpus": 2, "num_gpus": 0, "resources": {}}
    env = {"pip": ["fms-hf-tuning==3.2.2"]}
    assert (
        node_task_options(num_cpus=2, num_gpus=0, resources={}, runtime_env=env)["runtime_env"]
        == env
    )
