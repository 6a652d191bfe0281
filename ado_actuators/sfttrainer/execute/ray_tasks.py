"""Place a measurement on a Ray node that has the resources it asks for."""

from __future__ import annotations

from typing import Any

from ado_actuators.sfttrainer.execute.node import NodeRequest, measure_here
from ado_actuators.sfttrainer.outcomes import Failed, Outcome
from ado_actuators.sfttrainer.plan.launch import ResourceRequest


def _fits(request: ResourceRequest, node_resources: dict[str, float]) -> bool:
    if request.gpus and node_resources.get("GPU", 0) < request.gpus:
        return False
    return all(node_resources.get(k, 0) >= v for k, v in request.custom.items())


def placement(request: ResourceRequest, nodes: list[dict[str, Any]]) -> dict[str, Any] | str:
    """Ray task options for `request`, or why no alive node can ever run it.

    CPUs are capped at the largest fitting node's: the spec's 2-per-GPU is a share of a node,
    not a reason to wait forever on a smaller one.
    """
    alive = [n["Resources"] for n in nodes if n.get("Alive")]
    fitting = [r for r in alive if _fits(request, r)]
    if not fitting:
        offered = "; ".join(
            ", ".join(f"{k}={v:g}" for k, v in sorted(r.items()) if not k.startswith("node:"))
            for r in alive
        )
        wanted = {"GPU": request.gpus, **request.custom} if request.gpus else request.custom
        return (
            f"no Ray node offers {wanted} (nodes offer: {offered or 'nothing'}); add a worker "
            f"with these resources (see README, 'Ray cluster resources') or change "
            f"number_gpus/gpu_model"
        )
    cpus = min(request.cpus, max(int(r.get("CPU", 0)) for r in fitting))
    return {"num_cpus": cpus, "num_gpus": request.gpus, "resources": dict(request.custom)}


def measure_on_cluster(request: NodeRequest, resources: ResourceRequest) -> Outcome:
    """Run on a suitable node when Ray is up (ado's operations), else in this process."""
    import ray

    if not ray.is_initialized():
        return measure_here(request)
    options = placement(resources, ray.nodes())
    if isinstance(options, str):
        return Failed(options)
    task = ray.remote(measure_here).options(max_retries=0, **options)
    try:
        return ray.get(task.remote(request))
    except ray.exceptions.RayError as error:
        return Failed(f"the measurement task died: {error}")
