"""How many CPUs a measurement may ask Ray for without waiting on its own callers, and who
holds a node's resources when a measurement could not be placed.

Measured on Ray 2.60 and 2.58: a *task* blocked in ray.get / ray.wait lends its CPUs back,
so ado's executor task (`_enqueue_completed`, 1 CPU), which runs our measurement, costs it
nothing as long as every wait in execute/cluster.py goes through ray.get / ray.wait
(`PlacementGroup.wait` keeps them: that was the 2-node deadlock on 2-CPU nodes). Never lent:
CPUs reserved by a placement group (ado's ray_tune runs each trial in one reserving 1 CPU
and polls, sleeping, while our measurement runs) and an actor's CPUs. So each node is asked
for at most its CPUs minus those; placement groups of other measurements of this actuator
are not subtracted, because they end and waiting for them is the point of queueing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

OWN_GROUP_PREFIX = "sfttrainer-"
"""Name prefix of this actuator's placement groups (one per measurement)."""
_PLACED = ("CREATED", "RESCHEDULING")


def reserved_cpus(groups: Iterable[dict[str, Any]]) -> dict[str, float]:
    """node id -> CPUs reserved there by placed groups that are not a measurement's own.

    `groups`: the values of ray.util.placement_group_table(). Pure."""
    held: dict[str, float] = defaultdict(float)
    for group in groups:
        if group.get("state") not in _PLACED or (group.get("name") or "").startswith(
            OWN_GROUP_PREFIX
        ):
            continue
        for index, node in (group.get("bundles_to_node_id") or {}).items():
            held[node] += float(group["bundles"][index].get("CPU", 0.0))
    return dict(held)


def caller_cpus(assigned: dict[str, float], *, in_actor: bool, in_group: bool) -> float:
    """CPUs the code running the measurement keeps while it waits: an actor's (a task's are
    lent back; a placement group's are counted by reserved_cpus). Pure."""
    return float(assigned.get("CPU", 0.0)) if in_actor and not in_group else 0.0


def cpus_to_ask(wanted: float, free: list[float], count: int) -> float:
    """What each of `count` node tasks asks for: `wanted`, capped at the free CPUs of the
    count-th freest node (bundles of one group are equal). With fewer nodes than `count`
    nothing caps it: placement then waits for a node to be added, and says so. Pure."""
    if len(free) < count:
        return float(wanted)
    cap = sorted(free, reverse=True)[count - 1]
    return float(max(0.0, min(float(wanted), cap)))


def held_by_callers() -> dict[str, float]:
    """node id -> CPUs our callers hold there through our waits (Ray must be initialised)."""
    import ray
    from ray.util import placement_group_table

    held = reserved_cpus(placement_group_table().values())
    context = ray.get_runtime_context()
    try:
        assigned = context.get_assigned_resources()
    except Exception:
        assigned = {}
    own = caller_cpus(
        assigned,
        in_actor=context.get_actor_id() is not None,
        in_group=context.get_placement_group_id() is not None,
    )
    if own:
        node = context.get_node_id()
        held[node] = held.get(node, 0.0) + own
    return held


# ---- what holds a node's resources -----------------------------------------------------


def _positive(resources: dict[str, float] | None) -> dict[str, float]:
    return {
        k: v
        for k, v in (resources or {}).items()
        if v and not k.startswith(("node:", "bundle_group"))
    }


def holders_text(
    node_names: dict[str, str],
    tasks: Iterable[dict[str, Any]],
    actors: Iterable[dict[str, Any]],
    groups: Iterable[dict[str, Any]],
) -> str:
    """One clause per node in `node_names` (id -> shown name): the running tasks, alive
    actors and placed groups that hold resources there. Pure."""
    lines: dict[str, list[str]] = {node: [] for node in node_names}

    def show(resources: dict[str, float]) -> str:
        return ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items()))

    for group in groups:
        if group.get("state") not in _PLACED:
            continue
        per_node: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for index, node in (group.get("bundles_to_node_id") or {}).items():
            for k, v in _positive(group["bundles"][index]).items():
                per_node[node][k] += v
        name = group.get("name") or group["placement_group_id"][:8]
        for node, resources in per_node.items():
            if node in lines:
                lines[node].append(f"placement group {name} reserves {show(resources)}")
    for kind, items in (("task", tasks), ("actor", actors)):
        for item in items:
            resources = _positive(item.get("required_resources"))
            if resources and item.get("node_id") in lines:
                in_group = " (in a placement group)" if item.get("placement_group_id") else ""
                lines[item["node_id"]].append(
                    f"{kind} {item.get('name')}{in_group} asked for {show(resources)}"
                )
    return "; ".join(
        f"node {node_names[node]}: {', '.join(found) if found else 'nothing visible'}"
        for node, found in lines.items()
    )


def describe_holders(nodes: list[dict[str, Any]]) -> str:
    """What holds the resources of the alive `nodes` (ray.nodes() entries), read from Ray's
    state API (it needs the dashboard; without it, placement groups only)."""
    from ray.util import placement_group_table

    names = {
        n["NodeID"]: f"{n.get('NodeManagerAddress', '?')}/{n['NodeID'][:8]}"
        for n in nodes
        if n.get("Alive")
    }
    groups = list(placement_group_table().values())
    tasks, actors, note = _running_tasks_and_actors()
    return holders_text(names, tasks, actors, groups) + note


STATE_API_TRIES = 3
"""A loaded head's dashboard may not answer at once; it is asked again after a pause (2, 4 s)."""


def _running_tasks_and_actors() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """(running tasks, alive actors, a note when Ray's state API could not tell)."""
    import ray
    from ray.util.state import list_actors, list_tasks

    # The cluster this process belongs to, by its GCS address. Without one, Ray looks for a
    # cluster on this host (pgrep gcs_server) and raises ConnectionError where it finds two (a
    # second cluster on the host: make test's parallel workers) or none (a worker node).
    address = ray.get_runtime_context().gcs_address

    def rows(found: list[Any]) -> list[dict[str, Any]]:  # Ray's state API
        return [
            {
                k: getattr(x, k, None)
                for k in ("name", "node_id", "required_resources", "placement_group_id")
            }
            for x in found
        ]

    error: Exception | None = None
    for attempt in range(STATE_API_TRIES):
        try:
            tasks = rows(
                list_tasks(address, filters=[("state", "=", "RUNNING")], detail=True, limit=1000)
            )
            actors = rows(
                list_actors(address, filters=[("state", "=", "ALIVE")], detail=True, limit=1000)
            )
            return tasks, actors, ""
        except Exception as failure:
            error = failure
            if attempt + 1 < STATE_API_TRIES:
                time.sleep(2.0 * (attempt + 1))
    said = str(error).split(". ")[0][:200]
    return (
        [],
        [],
        f" (tasks and actors unknown: Ray's state API answered {type(error).__name__}: {said})",
    )
