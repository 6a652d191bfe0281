"""Where a measurement's node tasks run on a Ray cluster, and how they end together.

Each node task runs in a bundle of one placement group (STRICT_SPREAD: one node per bundle),
so the wait for resources is bounded by placement_timeout_seconds on one node too (this
process runs the measurement itself when Ray is not up). Several nodes go stage by stage
(execute/stages.py: every node prepares before any launches); rank 0's address and port come
from a small task in bundle 0, so this works on any Ray cluster (KubeRay or bare metal).
Whatever happens, the placement group is removed.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ado_actuators.sfttrainer.contract.outcomes import LOG, WORKDIR, Failed, MeasurementOutcome
from ado_actuators.sfttrainer.execute import capacity, gpu_exclusive, orphan_groups, placement_queue
from ado_actuators.sfttrainer.execute.capacity import fits, shown
from ado_actuators.sfttrainer.execute.classify import launch_outcome
from ado_actuators.sfttrainer.execute.node import NodeRequest, NodeRun, run_node
from ado_actuators.sfttrainer.execute.reservations import (
    cpus_to_ask,
    describe_holders,
    held_by_callers,
)
from ado_actuators.sfttrainer.execute.stages import node_task_options, run_nodes, task_resources
from ado_actuators.sfttrainer.plan.launch.launch_plan import ResourceRequest
from ado_actuators.sfttrainer.plan.model.geometry import batch_devices, world_size

SPREAD_CPUS = 0.01
"""CPUs of a multi-node bundle on nodes whose CPUs are all reserved by others."""


def placement(
    request: ResourceRequest,
    nodes: list[dict[str, Any]],
    held: dict[str, float] | None = None,
    count: int = 1,
) -> dict[str, float] | str:
    """The bundle each of `count` node tasks asks Ray for, or why no alive node can ever run
    a one-node measurement. Pure.

    CPUs are capped at what the count-th freest fitting node has free of `held` (node id ->
    CPUs our callers keep through our waits, execute/reservations.py): the spec's 2-per-GPU
    is a share of a node, not a reason to wait forever on a smaller or reserved one.
    """
    alive = [n for n in nodes if n.get("Alive")]
    wanted = {"GPU": request.gpus, **request.custom} if request.gpus else dict(request.custom)
    fitting = [n for n in alive if fits(wanted, n["Resources"])]
    if not fitting and count == 1:
        offered = "; ".join(shown(n["Resources"]) for n in alive)
        return (
            f"no Ray node offers {wanted} (nodes offer: {offered or 'nothing'}); add a worker "
            f"with these resources (see the docs, guide/ray-clusters.md) or change "
            f"number_gpus/gpu_model"
        )
    held = held or {}
    free = [n["Resources"].get("CPU", 0.0) - held.get(n.get("NodeID", ""), 0.0) for n in fitting]
    cpus = cpus_to_ask(request.cpus, free, count)
    if count > 1 and not cpus and not wanted:
        cpus = SPREAD_CPUS  # STRICT_SPREAD needs bundles, and a bundle must ask for something
    return {k: v for k, v in {**request.bundle(), "CPU": cpus}.items() if v}


def unplaceable_reason(
    bundle: dict[str, float],
    count: int,
    nodes: list[dict[str, Any]],
    waited: float | None,
    holders: str = "",
    never: str = "",
) -> str:
    """Why `count` bundles, one per node, were not placed in `waited` seconds; or, with
    `never` (capacity.never_placeable's clause, `waited` None), why they never will be and
    were not waited for. Pure."""
    alive = [n["Resources"] for n in nodes if n.get("Alive")]
    fitting = sum(fits(bundle, r) for r in alive)
    absent = sorted(k for k in bundle if bundle[k] and not any(k in r for r in alive))
    offered = "; ".join(f"[{shown(r)}]" for r in alive) or "nothing"
    if absent:
        why = f"no node offers {', '.join(absent)}"
    elif fitting < count:
        why = f"only {fitting} node(s) offer that much"
    else:
        why = f"{fitting} node(s) offer it, but their resources stayed in use"
    what = (
        f"{count} nodes of {shown(bundle)} each (one per node, STRICT_SPREAD)"
        if count > 1
        else f"the measurement's task ({shown(bundle)})"
    )
    if never:  # no timeout to raise, nothing in use to name: the cluster lacks the nodes
        return (
            f"could not place {what}: {why}, {never}; failed at once, without waiting "
            f"placement_timeout_seconds. Alive nodes offer: {offered}. Add workers with these "
            f"resources (see the docs, guide/ray-clusters.md) or lower number_nodes"
        )
    held = f" Holding them: {holders}." if holders else ""
    return (
        f"could not place {what} within {waited:g} s: {why}.{held} Alive nodes offer: "
        f"{offered}. Add workers with these resources (see the docs, guide/ray-clusters.md), "
        f"lower number_nodes or the operation's batchSize, or raise placement_timeout_seconds"
    )


def _outcome(request: NodeRequest, runs: list[NodeRun]) -> MeasurementOutcome:
    values = request.plan_inputs.values
    if len(runs) > 1:
        for run in runs:  # (node, index) names a GPU; two raylets may share a hostname
            for report in run.reports:
                for sample in report.gpu_samples:
                    sample.node = f"{run.hostname}#{run.machine_rank}"
    reports = sorted((r for run in runs for r in run.reports), key=lambda r: r.rank)
    outcome = launch_outcome(
        reports,
        runs,
        world_size=world_size(values),
        number_gpus=values.number_gpus,
        stop_after_seconds=values.stop_after_seconds,
        gpu_model=values.gpu_model,
        devices=batch_devices(values),
    )
    # the first node that launched (a node cancelled early has no directory): without one,
    # nothing was launched at all (outcomes.failed_before_launch)
    if launched := next((r for r in runs if r.workdir), None):
        outcome.metadata.update(
            {
                WORKDIR: launched.workdir,
                LOG: launched.log_path,
                "environment": launched.environment,
            }
        )
    if checks := [r.gpu_exclusivity for r in runs if r.gpu_exclusivity is not None]:
        outcome.metadata.update(gpu_exclusive.metadata(checks, request.allow_shared_gpus))
    if len(runs) > 1:
        outcome.metadata["nodes"] = [
            {
                "machine_rank": r.machine_rank,
                "hostname": r.hostname,
                WORKDIR: r.workdir,
                "cancelled": r.cancelled,
            }
            for r in runs
        ]
    return outcome


def _running_ray() -> Any:  # Ray's module and strategy
    """The ray module when this process is connected to a cluster, else None.

    Ray is not a dependency of the engine: without it installed (benchmarks/gpu on a lent GPU
    machine) a one-node measurement runs in this process, as it does when Ray is not up.
    """
    try:
        import ray
    except ImportError:
        return None
    return ray if ray.is_initialized() else None


def measure_on_cluster(
    request: NodeRequest,
    resources: ResourceRequest,
    *,
    placement_timeout: float,
    runtime_env: dict[str, Any] | None = None,
) -> MeasurementOutcome:
    """Run the measurement's node task(s) and classify what they left. Never raises RayError.

    Every wait is bounded: the node tasks must be placed within `placement_timeout`, and
    they never ask for what the measurement's callers hold (execute/reservations.py); a
    request the cluster can never hold is not waited for at all (execute/capacity.py). A
    measurement queues behind older ones still waiting (execute/placement_queue.py), for
    at most `placement_timeout` too. No group outlives the operation that asked for it
    (execute/orphan_groups.py)."""
    request = request.model_copy(update={"run_name": uuid.uuid4().hex[:8]})
    number_nodes = request.plan_inputs.values.number_nodes
    ray = _running_ray()
    if ray is None:
        if number_nodes > 1:
            return Failed(f"number_nodes {number_nodes} needs a Ray cluster; none is running")
        granted = time.monotonic()  # no group to wait for: the devices are this process's
        return _held(_outcome(request, [run_node(request)]), granted)
    asked = time.time_ns()
    orphan_groups.reap()
    bundle = _bundle(resources, ray.nodes(), number_nodes)
    if isinstance(bundle, Failed):
        return bundle
    if bundle:  # a group that asks for nothing waits for nothing, and no one waits for it
        if problem := placement_queue.wait_for_older(asked, placement_timeout):
            return Failed(problem)
        # what is free (and whose callers hold what) changed while this one waited
        bundle = _bundle(resources, ray.nodes(), number_nodes)
        if isinstance(bundle, Failed):
            return bundle
    group = _Placement.for_caller(bundle, number_nodes, request.run_name, asked)
    if isinstance(group, Failed):
        return group
    try:
        if problem := group.wait(placement_timeout):
            return Failed(problem)
        granted = time.monotonic()
        # the wait for resources (queue and placement) is the schedule's, not the tool's cost:
        # users read it when a space's measurements take longer than their trainings
        waited = {"placement_wait_seconds": round((time.time_ns() - asked) / 1e9, 3)}
        outcome = _run_placed(ray, request, bundle, group, runtime_env)
        outcome.metadata.update(waited)
    finally:
        group.remove()
    return _held(outcome, granted)


def _run_placed(
    ray: Any,  # Ray's module and strategy
    request: NodeRequest,
    bundle: dict[str, float],
    group: _Placement,
    runtime_env: dict[str, Any] | None,
) -> MeasurementOutcome:
    """The node task(s) run in the placed group, one per bundle, and what they left."""
    number_nodes = request.plan_inputs.values.number_nodes

    def options(index: int) -> dict[str, Any]:
        return node_task_options(
            **task_resources(bundle),
            scheduling_strategy=group.strategy(index),
            runtime_env=runtime_env,
        )

    if number_nodes == 1:
        task = ray.remote(run_node).options(**options(0))
        try:
            return _outcome(request, [ray.get(task.remote(request))])
        except ray.exceptions.RayError as error:
            return Failed(f"the measurement task died: {error}")
    runs = run_nodes(request, number_nodes, options, group.strategy(0))
    return runs if isinstance(runs, Failed) else _outcome(request, runs)


def _held(outcome: MeasurementOutcome, granted: float) -> MeasurementOutcome:
    """The outcome with measurement_seconds: how long the measurement reserved its devices, from
    their grant (`granted`, time.monotonic()) to their release, now. What a row cost, whatever
    ran in between (environment, model loading, warm-up, teardown); a Failed row is not
    stored, so it carries none."""
    if not isinstance(outcome, Failed):
        outcome.properties["measurement_seconds"] = time.monotonic() - granted
    return outcome


def _bundle(
    resources: ResourceRequest, nodes: list[dict[str, Any]], count: int
) -> dict[str, float] | Failed:
    """The bundle to ask for, or Failed at once when this cluster can never hold `count` of
    them: no autoscaler, or none whose node types could add what is missing (issue 26: a
    3-node request on 2 nodes waited placement_timeout_seconds for an answer known at once)."""
    bundle = placement(resources, nodes, held_by_callers(), count)
    if isinstance(bundle, str):
        return Failed(bundle)
    # the alive nodes could hold it: Ray is not asked about its autoscaler (which may take
    # up to capacity.REPORT_PATIENCE on a cluster seconds old)
    if not bundle or capacity.never_placeable(bundle, count, nodes, None) is None:
        return bundle
    if never := capacity.never_placeable(bundle, count, nodes, capacity.read_autoscaler(nodes)):
        return Failed(unplaceable_reason(bundle, count, nodes, None, never=never))
    return bundle


class _Placement:
    """One placement group of `count` equal bundles (STRICT_SPREAD: one node each), or none
    when the bundle asks for nothing (a task of 0 CPUs waits for nothing)."""

    def __init__(self, bundle: dict[str, float], count: int, name: str) -> None:
        from ray.util.placement_group import placement_group

        self.bundle, self.count = bundle, count
        self.group = (
            placement_group(
                [dict(bundle) for _ in range(count)], strategy="STRICT_SPREAD", name=name
            )
            if bundle
            else None
        )

    @classmethod
    def for_caller(
        cls, bundle: dict[str, float], count: int, run_name: str, asked_ns: int
    ) -> _Placement | Failed:
        """The group, unless the operation that asked has ended: a group registered after its
        job's end is never removed by Ray (execute/orphan_groups.py)."""
        if not bundle:  # no group, nothing to leave behind
            return cls(bundle, count, "")
        if ended := orphan_groups.caller_ended():
            return Failed(ended)
        name = placement_queue.group_name(run_name, asked_ns, orphan_groups.own_job())
        made = cls(bundle, count, name)
        if ended := orphan_groups.caller_ended():
            made.remove()
            return Failed(ended)
        return made

    def wait(self, timeout: float) -> str | None:
        """None once placed; else why not, naming what holds the nodes' resources.

        ray.wait, not PlacementGroup.wait: only the former lends the calling task's CPUs
        back while it waits (ado's executor task holds one)."""
        import ray

        if self.group is None:
            return None
        ready, _ = ray.wait([self.group.ready()], timeout=timeout)
        if ready:
            return None
        nodes = ray.nodes()
        return unplaceable_reason(self.bundle, self.count, nodes, timeout, describe_holders(nodes))

    def strategy(self, index: int) -> Any:  # Ray's module and strategy
        """Bundle `index`; with no group, DEFAULT (a caller's group must not capture it)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self.group is None:
            return "DEFAULT"
        return PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index)

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        if self.group is not None:
            remove_placement_group(self.group)
