"""First asked, first placed (execute/placement_queue.py): the order of the queue, read from
Ray's placement group table. The wait itself runs on a real cluster in
tests/integration/test_small_nodes.py."""

from __future__ import annotations

from ado_actuators.sfttrainer.execute.placement_queue import (
    asked_at,
    creator_job,
    group_name,
    older_waiting,
)
from ado_actuators.sfttrainer.execute.reservations import OWN_GROUP_PREFIX

JOB = "0a000000"


def group(name: str, state: str) -> dict:
    return {"name": name, "state": state, "placement_group_id": name, "bundles": {0: {"CPU": 2.0}}}


def test_a_group_name_says_when_its_measurement_asked_and_sorts_by_it():
    early, late = (
        group_name("abcd1234", 9_000_000_000, JOB),
        group_name("0000ffff", 10_000_000_000, JOB),
    )
    assert early.startswith(OWN_GROUP_PREFIX)
    assert asked_at(early) == 9_000_000_000 and asked_at(late) == 10_000_000_000
    assert sorted([late, early]) == [early, late]  # digits padded: text order is time order
    assert (
        creator_job(early) == JOB and creator_job(group_name("a-b-c", 1, "02000000")) == "02000000"
    )


def test_other_groups_have_no_place_in_the_queue():
    assert asked_at("trial-reservations") is None  # ado's ray_tune, or anyone else's
    assert asked_at(f"{OWN_GROUP_PREFIX}deadbeef") is None  # a name without a stamp
    assert creator_job("trial-reservations") is None
    # an earlier release's name (no job): neither queued behind nor taken for an orphan
    assert asked_at(f"{OWN_GROUP_PREFIX}00000000000000000009-abcd1234") is None
    assert creator_job(f"{OWN_GROUP_PREFIX}00000000000000000009-abcd1234") is None


def test_only_older_groups_still_waiting_come_first_oldest_first():
    table = [
        group(group_name("placed", 1, JOB), "CREATED"),
        group(group_name("second", 3, JOB), "PENDING"),
        group(group_name("first", 2, JOB), "PREPARED"),
        group(group_name("gone", 1, JOB), "REMOVED"),
        group(group_name("younger", 9, JOB), "PENDING"),
        group("trial-reservations", "PENDING"),
        group(group_name("me", 5, JOB), "PENDING"),  # a measurement is never behind itself
    ]
    names = [g["name"] for g in older_waiting(table, 5)]
    assert names == [group_name("first", 2, JOB), group_name("second", 3, JOB)]


def test_nobody_waits_when_nothing_older_waits():
    table = [
        group(group_name("running", 1, JOB), "CREATED"),
        group(group_name("later", 8, JOB), "PENDING"),
    ]
    assert older_waiting(table, 5) == []
