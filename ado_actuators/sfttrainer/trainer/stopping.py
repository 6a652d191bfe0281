"""The collectives that make ranks stop together, run inside the rank (they need torch).

The policies (stopping/) are pure state machines; each step end goes through two phases because
ranks must agree (stopping/policy.py):

    proposal = policy.propose(start, end)       # this rank's view
    agreed   = agree(proposal)                  # element-wise OR over ranks (a collective)
    policy.commit(end, agreed)                  # every rank applies the same decision

A rank that stopped alone would leave the others blocked in the next gradient all-reduce.
A policy that judges a statistic of the series (STEADY_CI95_1PCT, stopping/steady.py) is first
given the step as all ranks saw it (`shared_step`, one more collective), so every rank proposes
the same decision from the same numbers, and the OR changes nothing.
"""

from __future__ import annotations

from ado_actuators.sfttrainer.stopping.policy import Decision


def agree(decision: Decision, device=None) -> Decision:
    """Element-wise OR of every rank's proposal (all_reduce MAX); identity without a group.

    `device` must suit the process group's backend: the rank's CUDA device for NCCL, CPU for gloo.
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return decision
    flags = torch.tensor(
        [int(decision.end_warmup), int(decision.stop)], dtype=torch.int32, device=device or "cpu"
    )
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    end_warmup, stop = (bool(v) for v in flags.tolist())
    return Decision(end_warmup=end_warmup, stop=stop)


def shared_step(start: float, end: float, tokens: int, device=None) -> tuple[float, float, int]:
    """The step as every rank saw it: the earliest start, the latest end (the step ends when its
    slowest rank does, as metrics/precision.py counts it) and the dataset tokens of all ranks;
    the rank's own figures without a group. Two collectives on float64 (exact for tokens below
    2**53; 0.24 microseconds of resolution at today's epoch seconds)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return start, end, tokens
    times = torch.tensor([-start, end], dtype=torch.float64, device=device or "cpu")
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    count = torch.tensor([float(tokens)], dtype=torch.float64, device=device or "cpu")
    dist.all_reduce(count, op=dist.ReduceOp.SUM)
    earliest, latest = times.tolist()
    return -earliest, latest, round(count.item())
