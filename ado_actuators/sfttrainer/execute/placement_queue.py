"""First asked, first placed: a measurement creates its placement group only once no older
group of this actuator is still waiting to be placed.

Ray places a group only when all of its bundles fit at the same moment, and keeps nothing
aside for a group that waits. A 2-node measurement among single-node ones (batchSize > 1)
needs both nodes free at once, which a steady stream of smaller measurements can prevent
until its placement timeout (seen in benchmarks/overnight.py). Queued behind it, the
smaller ones stop taking what the running ones free, and the wide one is placed as they
end. The queue is Ray's own placement group table, so it holds across ado operations and
processes: a group's name carries when its measurement asked (the clock of the node that
runs the measurement; skew between nodes only reorders near-ties) and the Ray job that asked
(execute/orphan_groups.py removes a dead job's groups).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from ado_actuators.sfttrainer.execute.reservations import OWN_GROUP_PREFIX

LOG = logging.getLogger(__name__)
WAITING_STATES = ("PENDING", "PREPARED")
POLL_SECONDS = 5.0
"""How often the table is read again while an older group waits (its removal ends no wait)."""


def group_name(run_name: str, asked_ns: int, job_id: str) -> str:
    """The placement group name of a measurement that asked at `asked_ns` (ns since epoch),
    from a task of Ray job `job_id` (hex)."""
    return f"{OWN_GROUP_PREFIX}{asked_ns:020d}-{job_id}-{run_name}"


def _fields(name: str) -> list[str] | None:
    if not name.startswith(OWN_GROUP_PREFIX):
        return None
    fields = name[len(OWN_GROUP_PREFIX) :].split("-", 2)
    return fields if len(fields) == 3 and fields[0].isdigit() else None


def asked_at(name: str) -> int | None:
    """When the measurement owning group `name` asked, or None for another's group. Pure."""
    fields = _fields(name)
    return int(fields[0]) if fields else None


def creator_job(name: str) -> str | None:
    """The Ray job (hex) whose measurement owns group `name`, or None for another's. Pure."""
    fields = _fields(name)
    return fields[1] if fields else None


def older_waiting(groups: Iterable[dict[str, Any]], asked_ns: int) -> list[dict[str, Any]]:
    """This actuator's groups, still waiting, of measurements that asked before `asked_ns`;
    oldest first. `groups`: the values of ray.util.placement_group_table(). Pure."""
    older = [
        (stamp, group)
        for group in groups
        if group.get("state") in WAITING_STATES
        and (stamp := asked_at(group.get("name") or "")) is not None
        and stamp < asked_ns
    ]
    return [group for _, group in sorted(older, key=lambda pair: pair[0])]


def handle(group_id: str) -> Any:  # Ray's handle
    """The PlacementGroup whose id is `group_id` (hex, as placement_group_table() gives it)."""
    import ray
    from ray.util.placement_group import PlacementGroup

    return PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group_id)))


def _describe(groups: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"{g.get('name')} ({len(g.get('bundles') or {})} bundle(s) of "
        f"{next(iter((g.get('bundles') or {}).values()), {})})"
        for g in groups[:3]
    ) + (f" and {len(groups) - 3} more" if len(groups) > 3 else "")


def wait_for_older(asked_ns: int, timeout: float) -> str | None:
    """Wait until no older group of this actuator waits; None then, else (after `timeout`
    seconds) why not. Waits in ray.wait, which lends the calling task's CPUs back (ado's
    executor task holds one: the older group may need it)."""
    import ray
    from ray.util import placement_group_table

    deadline = time.monotonic() + timeout
    ready: dict[str, Any] = {}  # one reservation check per older group, not one per poll
    while older := older_waiting(placement_group_table().values(), asked_ns):
        left = deadline - time.monotonic()
        if left <= 0:
            return (
                f"waited {timeout:g} s behind older measurements whose placement groups are "
                f"still not placed: {_describe(older)}. They wait for resources in use; "
                f"lower the operation's batchSize or raise placement_timeout_seconds"
            )
        first = older[0]["placement_group_id"]
        if first not in ready:
            LOG.info(
                "queued behind %d older measurement(s) not yet placed: %s",
                len(older),
                _describe(older),
            )
            ready[first] = handle(first).ready()
        ray.wait([ready[first]], timeout=min(POLL_SECONDS, left))
    return None
