"""No placement group outlives the operation that asked for it (execute/orphan_groups.py):
which groups are a dead job's. The race itself (measurements woken by their driver's death)
runs on a real cluster in tests/integration/test_small_nodes.py."""

from __future__ import annotations

from ado_actuators.sfttrainer.execute.orphan_groups import orphans
from ado_actuators.sfttrainer.execute.placement_queue import group_name


def group(name: str, state: str) -> dict:
    return {"name": name, "state": state, "placement_group_id": "ab" * 14}


def test_only_our_groups_of_ended_jobs_not_yet_removed_are_orphans():
    dead, alive = "01000000", "02000000"
    table = [
        group(group_name("placed", 1, dead), "CREATED"),
        group(group_name("waiting", 2, dead), "PENDING"),
        group(group_name("gone", 3, dead), "REMOVED"),
        group(group_name("running", 4, alive), "CREATED"),
        group(f"trial-{dead}", "CREATED"),  # someone else's, whatever its name holds
        group("", "CREATED"),
    ]
    names = [g["name"] for g in orphans(table, {dead, "03000000"})]
    assert names == [group_name("placed", 1, dead), group_name("waiting", 2, dead)]


def test_nothing_is_an_orphan_while_every_job_runs():
    table = [group(group_name("running", 4, "02000000"), "CREATED")]
    assert orphans(table, set()) == []
    assert orphans(table, {"0200000"}) == []  # a prefix of the job is another job
