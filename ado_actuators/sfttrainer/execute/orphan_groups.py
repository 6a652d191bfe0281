"""No placement group outlives the ado operation that asked for it.

Ray removes a job's placement groups when the job ends (its driver, `ado create operation`,
exits or is killed), but only those registered by then: the GCS does not check the creator
job when it registers a group, so one registered a moment later stays for ever, holding its
nodes' CPUs and GPUs. ado runs each measurement in a task owned by its actuator actor, and
such a task runs on for a moment after the driver is gone. That moment is exactly when the
measurements queued behind an older group (execute/placement_queue.py) wake: the job's end
removes the group they wait for, and each went on to create its own. Reproduced on a local
cluster: 5 and 6 of 6 queued tasks left a group CREATED for good after their driver was
SIGKILLed; with the check below, none (the overnight rehearsal lost one in about four runs).

Ray writes the job's death to its job table before it removes the job's groups, so a
measurement that reads the table after its wait and before it creates its group never
creates one for a dead job (`caller_ended`). It reads it again once the group is registered
(creation is synchronous) and removes it if the job died in between. What neither check can
see (a worker killed between registering a group and the second read) is removed by the next
measurement on the cluster (`reap`): our group names carry the job that asked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ado_actuators.sfttrainer.execute.placement_queue import creator_job, handle

LOG = logging.getLogger(__name__)


def orphans(groups: Iterable[dict[str, Any]], dead_jobs: set[str]) -> list[dict[str, Any]]:
    """This actuator's groups not yet removed whose job has ended. `groups`: the values of
    ray.util.placement_group_table(); `dead_jobs`: hex ids. Pure."""
    return [
        group
        for group in groups
        if group.get("state") != "REMOVED" and creator_job(group.get("name") or "") in dead_jobs
    ]


def _dead_jobs() -> set[str]:
    # the job table (GCS); ray.util.state.list_jobs needs the dashboard, which clusters may lack
    from ray._private import state

    return {job["JobID"] for job in state.jobs() if job.get("IsDead")}


def own_job() -> str:
    """The Ray job (hex) this process works for."""
    import ray

    return ray.get_runtime_context().get_job_id()


def caller_ended() -> str | None:
    """Why this measurement's caller is gone (its Ray job has ended), or None while it runs."""
    job = own_job()
    if job in _dead_jobs():
        return (
            f"the operation that asked for this measurement has ended (Ray job {job}); "
            f"nothing was launched"
        )
    return None


def reap() -> list[str]:
    """Remove this actuator's groups whose job has ended; the names removed."""
    from ray.util import placement_group_table
    from ray.util.placement_group import remove_placement_group

    found = orphans(placement_group_table().values(), _dead_jobs())
    for group in found:
        remove_placement_group(handle(group["placement_group_id"]))
    if found:
        LOG.warning(
            "removed %d placement group(s) left by ended operations: %s",
            len(found),
            ", ".join(g["name"] for g in found),
        )
    return [group["name"] for group in found]
