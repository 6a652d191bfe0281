"""The node tasks of a measurement, and the stages a measurement of several nodes goes through.

The ranks of several nodes meet in torch's static rendezvous, which waits a fixed time
(600 s) for all of them. A node that launched while its peer was still building its
environment (a fms-hf-tuning version other than the worker's is installed on first use, which
takes minutes) would wait that out and fail a measurement that nothing was wrong with. So the
nodes go stage by stage:

1. every node prepares (node.prepare_node: its inputs checked, its environment chosen or
   built), and every preparation is waited for;
2. only when all of them succeeded, a small task in bundle 0 finds rank 0's address and a
   free port there;
3. every node launches its ranks (node.launch_node). The first node that fails cancels the
   others; a cancelled node stops its ranks and still returns what they reported, and every
   node's run is waited for before the outcome is classified: an OOM on the node that was
   cancelled is the cause of the other's failure, not news to drop.

One node has no peer to keep waiting and does it all in one task (execute/cluster.py). Ray is
imported where it is used: the engine runs without it (benchmarks/gpu).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ado_actuators.sfttrainer.contract.outcomes import Failed
from ado_actuators.sfttrainer.execute import node
from ado_actuators.sfttrainer.execute.node import NodeRequest, NodeRun, Prepared, Rendezvous
from ado_actuators.sfttrainer.execute.workspace import free_port

RENDEZVOUS_PROBE_SECONDS = 120.0
CANCEL_GRACE_SECONDS = 60.0
"""How long cancelled node tasks get to stop their ranks before their workers are killed."""
PREPARE_MARGIN_SECONDS = 300.0
"""What a node's preparation may take besides building its environment: its checks (a hub
probe among them) and waiting for the environment lock (environment_build_timeout_seconds
bounds the build itself)."""


def node_task_options(
    *,
    num_cpus: float,
    num_gpus: float,
    resources: dict[str, float],
    scheduling_strategy: Any = None,  # Ray's strategy and refs
    runtime_env: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Ray options of every node task: the one place a runtime_env is attached."""
    options: dict[str, Any] = {
        "max_retries": 0,  # a measurement that died is reported, never silently rerun
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "resources": resources,
    }
    if scheduling_strategy is not None:
        options["scheduling_strategy"] = scheduling_strategy
    if runtime_env:
        options["runtime_env"] = runtime_env
    return options


def task_resources(bundle: dict[str, float]) -> dict[str, Any]:
    """node_task_options' resource arguments for a task that uses all of `bundle`."""
    custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU")}
    return {
        "num_cpus": bundle.get("CPU", 0.0),
        "num_gpus": bundle.get("GPU", 0.0),
        "resources": custom,
    }


def rendezvous_here() -> Rendezvous:
    """Runs in bundle 0: the address the other nodes reach this node at, and a free port."""
    import ray

    return Rendezvous(ip=ray.util.get_node_ip_address(), port=free_port())


def run_nodes(
    request: NodeRequest,
    count: int,
    options: Callable[[int], dict[str, Any]],
    probe_strategy: Any,  # Ray's strategy and refs
) -> list[NodeRun] | Failed:
    """Every node's run of a measurement of `count` nodes, stage by stage (module docstring).
    `options(k)`: the Ray options of a task using all of bundle k; `probe_strategy`: bundle
    0's scheduling strategy."""
    import ray

    prepared = _prepare_all(request, count, options)
    if any(isinstance(p, NodeRun) for p in prepared):
        # launch nothing: the nodes that did prepare are stopped by the one that could not
        return [
            p
            if isinstance(p, NodeRun)
            else NodeRun(machine_rank=p.machine_rank, hostname=p.hostname, cancelled=True)
            for p in prepared
        ]
    probe = ray.remote(rendezvous_here).options(
        num_cpus=0, max_retries=0, scheduling_strategy=probe_strategy
    )
    try:
        rendezvous = ray.get(probe.remote(), timeout=RENDEZVOUS_PROBE_SECONDS)
    except (ray.exceptions.RayError, TimeoutError) as error:
        return Failed(f"could not find rank 0's address on the first node: {error}")
    launch = ray.remote(node.launch_node)
    refs = {
        # ray's stubs type a remote function by its parameters without defaults
        launch.options(**options(p.machine_rank)).remote(  # type: ignore[call-arg]
            request, p, rendezvous
        ): p.machine_rank
        for p in prepared
        if isinstance(p, Prepared)  # every one: a NodeRun returned above
    }
    return _collect(refs)


def _prepare_all(
    request: NodeRequest, count: int, options: Callable[[int], dict[str, Any]]
) -> list[Prepared | NodeRun]:
    """Every node's preparation, in machine-rank order. All are waited for, also after one
    failed: a preparation launches nothing that waits on a peer, and an environment built now
    is reused by the re-run instead of being cut short."""
    import ray

    prepare = ray.remote(node.prepare_node)
    refs = {
        # ray's stubs type a remote function by its parameters without defaults
        prepare.options(**options(rank)).remote(request, rank): rank  # type: ignore[call-arg]
        for rank in range(count)
    }
    bound = request.environment.build_timeout_seconds + PREPARE_MARGIN_SECONDS
    done, late = ray.wait(list(refs), num_returns=len(refs), timeout=bound)
    results: dict[int, Prepared | NodeRun] = {}
    for ref in done:
        rank = refs[ref]
        try:
            results[rank] = ray.get(ref)
        except ray.exceptions.RayError as error:
            results[rank] = NodeRun(
                machine_rank=rank, problem=f"the node task died while preparing: {error}"
            )
    for ref in late:
        ray.cancel(ref, force=True)
        results[refs[ref]] = NodeRun(
            machine_rank=refs[ref],
            problem=(
                f"the node was not prepared within {bound:g} s (environment_build_timeout_seconds "
                f"+ {PREPARE_MARGIN_SECONDS:g} s for its checks); a hung filesystem or hub? raise "
                f"environment_build_timeout_seconds if its environment takes that long to build"
            ),
        )
    return [results[rank] for rank in range(count)]


def _collect(refs: dict[Any, int]) -> list[NodeRun]:  # Ray's strategy and refs
    """Every node's run. The first failure cancels the others (Ray's cooperative cancel: each
    stops its ranks and returns what they reported); their runs are waited for, up to
    CANCEL_GRACE_SECONDS, after which their workers are killed and what they held is lost."""
    import ray

    runs: dict[int, NodeRun] = {}
    pending = list(refs)
    cancelled_at: float | None = None
    while pending:
        done, pending = ray.wait(pending, num_returns=1, timeout=5.0)
        for ref in done:
            rank = refs[ref]
            try:
                run = ray.get(ref)
            except ray.exceptions.TaskCancelledError:  # cancelled before it launched, or killed
                run = NodeRun(machine_rank=rank, cancelled=True)
            except ray.exceptions.RayError as error:
                run = NodeRun(machine_rank=rank, problem=f"the node task died: {error}")
            runs[rank] = run
            if not run.succeeded and cancelled_at is None and pending:
                for other in pending:
                    ray.cancel(other, force=False)
                cancelled_at = time.monotonic()
        if pending and cancelled_at and time.monotonic() - cancelled_at > CANCEL_GRACE_SECONDS:
            # A task that did not stop in time: kill its worker; the launcher and its ranks
            # follow by their parent-death signal.
            for other in pending:
                ray.cancel(other, force=True)
            cancelled_at = float("inf")
    return [runs[rank] for rank in sorted(runs)]
