"""Can this Ray cluster ever hold a measurement's bundles: the nodes it has, and the nodes its
autoscaler could add?

Ray waits for a placement group it cannot place now, because an autoscaler might add a node;
without one, or when no node type of the autoscaler could hold a bundle, that wait lasted
placement_timeout_seconds for an answer known from the start (issue 26: a 3-node request on
2 nodes waited 600 s). The decision is `never_placeable`, pure, over plain data: the nodes
as ray.nodes() gives them and an `Autoscaler` (or None when Ray reports none). What Ray says
about its autoscaler is read by `read_autoscaler`; whatever it cannot tell (an error, an
autoscaler whose node types the GCS does not hold, a cluster whose monitor has not reported
yet) reads as "an autoscaler could add it", which keeps the wait: answering at once a
request a node about to be added would have held is the one mistake this must not make.

What Ray 2.60 offers (read from its source):
- The GCS holds the autoscaler's node types (name, resources, min/max count) when an
  autoscaler reports them (`ReportClusterConfig`), read by `ray._private.state.state.
  get_cluster_config()`: Ray Data's own autoscaler reads it so. Ray 2.60's open-source
  autoscalers do not report it (Ray's development branch after 2.60 has its v2 autoscaler
  report it; for a cluster without an autoscaler it then mirrors the running nodes, each
  type at its running count, which `never_placeable` counts right).
- Ray's monitor (autoscaler v1, on every head started by `ray start --head` or `ray.init()`)
  writes its status to the GCS KV (`__autoscaling_status`, what `ray status` prints). With no
  autoscaling config it mirrors the nodes read-only and names each node's type `node_<id>`
  (ray.autoscaler._private.util.format_readonly_node_type); a real autoscaler (KubeRay's,
  `ray up`'s) names its types (`headgroup`, `ray.head.default`, ...). Autoscaler v2's
  status (ray.autoscaler.v2.sdk.get_cluster_status) names `node_<id>` every node started
  without RAY_NODE_TYPE_NAME, which a real autoscaler's nodes may be: under v2 names prove
  nothing, and only a reported config decides.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ado_actuators.sfttrainer.contract.units import GIB

LOG = logging.getLogger(__name__)
HEAD = "node:__internal_head__"
"""The resource Ray gives the head node only."""
REPORT_PATIENCE = 15.0
"""How long a measurement waits for the monitor's first status (it writes one every 5 s,
AUTOSCALER_UPDATE_INTERVAL_S) on a cluster seconds old, before it stops asking."""


def fits(wanted: Mapping[str, float], offered: Mapping[str, float]) -> bool:
    """A node (or node type) offering `offered` in all could hold `wanted`. Pure."""
    return all(offered.get(k, 0) >= v for k, v in wanted.items() if v)


@dataclasses.dataclass(frozen=True)
class NodeType:
    """A kind of node the autoscaler can start: its resources, and how many of it may run
    (None: no limit)."""

    name: str
    resources: Mapping[str, float]
    max_count: int | None


@dataclasses.dataclass(frozen=True)
class Autoscaler:
    """An autoscaler runs; `node_types` is what it can start, None where Ray does not say."""

    node_types: tuple[NodeType, ...] | None = None


UNKNOWN = Autoscaler()
"""An autoscaler that may add anything: the answer whenever Ray's report cannot be read."""


_BYTES = ("memory", "object_store_memory")


def shown(resources: Mapping[str, float]) -> str:
    """Resources as a user reads them (bytes in GiB, no node:<ip> markers). Pure."""
    return ", ".join(
        f"{k}={v / GIB:.1f}GiB" if k in _BYTES else f"{k}={v:g}"
        for k, v in sorted(resources.items())
        if not k.startswith("node:")
    )


def never_placeable(
    bundle: Mapping[str, float],
    count: int,
    nodes: list[dict[str, Any]],
    autoscaler: Autoscaler | None,
) -> str | None:
    """Why `count` bundles, one per node, can never be placed on this cluster, or None when
    they might be (now or once the autoscaler adds nodes). Pure.

    Counted generously, so that doubt keeps the wait: the alive nodes that could hold a bundle
    whatever else they run, or the head plus every node each fitting node type may have,
    whichever is more (running workers are of a type, and count towards its maximum)."""
    alive = [n["Resources"] for n in nodes if n.get("Alive")]
    here = sum(fits(bundle, r) for r in alive)
    if here >= count:
        return None
    if autoscaler is None:
        return "and Ray reports no autoscaler that could add nodes"
    if autoscaler.node_types is None:
        return None
    fitting = [t for t in autoscaler.node_types if t.max_count != 0 and fits(bundle, t.resources)]
    added = sum(math.inf if t.max_count is None else t.max_count for t in fitting)
    head = sum(fits(bundle, r) for r in alive if HEAD in r)
    if max(here, head + added) >= count:
        return None
    kinds = (
        "; ".join(
            f"{t.name} [{shown(t.resources)}] up to {'any number' if t.max_count is None else t.max_count}"
            for t in autoscaler.node_types
        )
        or "none"
    )
    return f"and no node type of the autoscaler adds enough (its node types: {kinds})"


# ---- what Ray reports, as plain data ----------------------------------------------------


def node_types(groups: Iterable[tuple[str, Mapping[str, float], int]]) -> tuple[NodeType, ...]:
    """(name, resources, max_count) of each node group the GCS holds (ClusterConfig's
    NodeGroupConfig) as node types; max_count -1 means no limit. Pure."""
    return tuple(
        NodeType(name, dict(resources), None if most < 0 else most)
        for name, resources, most in groups
    )


def status_type_names(status: Mapping[str, Any]) -> list[str] | None:
    """Every node type the monitor's status (the `__autoscaling_status` JSON) names, or None
    when it holds no autoscaler report yet. Pure."""
    report = status.get("autoscaler_report")
    if not isinstance(report, dict):
        return None
    names = [
        *(report.get("active_nodes") or {}),
        *(report.get("idle_nodes") or {}),
        *(report.get("pending_launches") or {}),
        *(report.get("node_type_mapping") or {}).values(),
    ]
    names += [
        entry[1]
        for key in ("pending_nodes", "failed_nodes")
        for entry in report.get(key) or ()
        if isinstance(entry, (list, tuple)) and len(entry) > 1
    ]
    return [str(name) for name in names]


def from_type_names(names: list[str], node_ids: Iterable[str]) -> Autoscaler | None:
    """None (no autoscaler) when the monitor's node types are all its read-only mirror's,
    `node_<id>` of a node of this cluster; else an autoscaler whose node types Ray does not
    say. Pure."""
    mirrored = {f"node_{node_id}" for node_id in node_ids}
    return None if names and all(name in mirrored for name in names) else UNKNOWN


# ---- reading it from Ray -----------------------------------------------------------------


def _reported_node_types() -> tuple[NodeType, ...] | None:
    from ray._private.state import state

    config = state.get_cluster_config()
    groups = [
        (g.name, dict(g.resources), g.max_count)
        for g in (config.node_group_configs if config is not None else ())
        if g.resources
    ]
    return node_types(groups) if groups else None


def _monitor_status() -> dict[str, Any] | None:
    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get

    raw = _internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)
    return json.loads(raw) if raw else None


def _is_v2() -> bool:
    from ray.autoscaler.v2.utils import is_autoscaler_v2

    return is_autoscaler_v2(fetch_from_server=True)


def read_autoscaler(
    nodes: list[dict[str, Any]], patience: float = REPORT_PATIENCE
) -> Autoscaler | None:
    """What Ray says about the cluster's autoscaler (Ray must be initialised; `nodes`: every
    ray.nodes() entry). Never raises: what cannot be read is UNKNOWN."""
    try:
        if types := _reported_node_types():
            return Autoscaler(types)
        if _is_v2():
            return UNKNOWN
        deadline = time.monotonic() + patience
        while True:
            status = _monitor_status()
            names = status_type_names(status) if status else None
            if names is not None:
                return from_type_names(names, [n.get("NodeID", "") for n in nodes])
            if time.monotonic() >= deadline:
                return UNKNOWN  # no monitor on this head, or one not reporting
            time.sleep(1.0)
    except Exception as error:
        LOG.info(
            "could not read what Ray says of its autoscaler (%r); waiting as if one ran", error
        )
        return UNKNOWN
