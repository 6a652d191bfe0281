"""The stop policies, fed with injected step timings, and the cross-rank agreement (real gloo)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from stop_drive import drive

from ado_actuators.sfttrainer.stopping.any_of import AnyOf
from ado_actuators.sfttrainer.stopping.methods import make_policy
from ado_actuators.sfttrainer.stopping.policy import Decision
from ado_actuators.sfttrainer.stopping.seconds import NeverStop, StopAfterSeconds
from ado_actuators.sfttrainer.stopping.warmup_stable import WarmupThenStable
from ado_actuators.sfttrainer.trainer.stopping import agree


def test_never_stop_needs_no_agreement():
    policy = make_policy(-1.0, None)
    assert isinstance(policy, NeverStop) and not policy.synchronised
    assert drive(policy, [10.0] * 50) == 50
    assert policy.reason is None


def test_stop_after_seconds_stops_at_the_first_step_end_past_the_limit():
    policy = make_policy(5.0, None)
    assert isinstance(policy, StopAfterSeconds)
    # ends at 2, 4, 6: the step ending at 6 is the first past 5 s
    assert drive(policy, [2.0] * 10) == 3
    assert policy.reason == "stop_after_seconds=5"


def test_stop_after_seconds_measures_from_the_first_step_start_including_gaps():
    # steps of 1 s separated by 1.5 s of logging: ends at 1, 3.5, 6 → stop at step 3
    assert drive(StopAfterSeconds(5.0), [1.0] * 10, gap=1.5) == 3


def test_limit_reached_exactly_stops():
    assert drive(StopAfterSeconds(4.0), [2.0] * 10) == 2


def test_warmup_then_stable_waits_for_both_120_s_and_10_steps():
    # 20 s steps: warm-up ends at the step ending at 60 s (3 steps), then 120 s = 6 steps,
    # but 10 steps are needed → stops after 3 + 10 = 13 steps
    policy = make_policy(-1, "WARMUP_60S_STABLE_120S_OR_10_STEPS")
    assert isinstance(policy, WarmupThenStable)
    assert drive(policy, [20.0] * 100) == 13
    assert policy.warmup_steps == 3
    assert policy.reason == "auto_stop_method=WARMUP_60S_STABLE_120S_OR_10_STEPS"


def test_warmup_then_stable_with_fast_steps_is_limited_by_time():
    # 1 s steps: warm-up 60 steps, then 120 s (120 steps > 10)
    policy = WarmupThenStable()
    assert drive(policy, [1.0] * 1000) == 180
    assert policy.warmup_steps == 60


def test_warmup_needs_whole_steps_at_least_60_s_long():
    # 25 s steps: 25, 50, 75 → warm-up ends with step 3 at 75 s
    policy = WarmupThenStable()
    drive(policy, [25.0] * 3)
    assert policy.warmup_steps == 3 and policy.warmup_end == 1075.0


def test_auto_stop_method_is_case_insensitive_and_validated():
    assert isinstance(make_policy(-1, "warmup_60s_stable_120s_or_10_steps"), WarmupThenStable)
    assert isinstance(make_policy(-1, "None"), NeverStop)
    with pytest.raises(ValueError, match="WARMUP_60S_STABLE_120S_OR_10_STEPS"):
        make_policy(-1, "STOP_WHENEVER")


def test_both_limits_stop_at_whichever_comes_first():
    policy = make_policy(30.0, "WARMUP_60S_STABLE_120S_OR_10_STEPS")
    assert isinstance(policy, AnyOf)
    assert drive(policy, [10.0] * 100) == 3
    assert policy.reason == "stop_after_seconds=30"


def test_a_peer_decision_is_applied_even_when_this_rank_would_go_on():
    policy = StopAfterSeconds(100.0)
    policy.begin(0.0)
    mine = policy.propose(0.0, 1.0)
    assert not mine.stop
    policy.commit(1.0, mine | Decision(stop=True))  # what agree() returns when a peer stops
    assert policy.reason == "stop_after_seconds=100"


def test_a_peer_ending_warmup_ends_it_here_too():
    policy = WarmupThenStable()
    policy.begin(0.0)
    policy.commit(30.0, policy.propose(0.0, 30.0) | Decision(end_warmup=True))
    assert policy.warmup_steps == 1 and policy.warmup_end == 30.0


def test_agree_without_a_process_group_is_the_identity():
    for d in (Decision(), Decision(stop=True), Decision(end_warmup=True, stop=True)):
        assert agree(d) == d


_AGREE_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch.distributed as dist
    from ado_actuators.sfttrainer.stopping.policy import Decision
    from ado_actuators.sfttrainer.trainer.stopping import agree, shared_step
    # a file rendezvous: no port to choose, so none another process can take meanwhile
    dist.init_process_group("gloo", init_method=os.environ["INIT_METHOD"],
                            rank=int(os.environ["RANK"]), world_size=2)
    rank = dist.get_rank()
    rounds = [Decision(), Decision(stop=rank == 0), Decision(end_warmup=rank == 1)]
    agreed = [[d.end_warmup, d.stop] for d in map(agree, rounds)]
    # rank 1 started later and ended later; epoch-sized clocks, as time.time() gives
    start, end, tokens = (1.7e9 + 0.25, 1.7e9 + 2.5, 100) if rank == 0 else (1.7e9 + 0.75, 1.7e9 + 3.125, 60)
    print(json.dumps({"agreed": agreed, "step": list(shared_step(start, end, tokens))}))
    dist.barrier()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow  # two processes importing torch
def test_agree_is_an_or_over_real_gloo_ranks(tmp_path):
    """Rank 0 alone wants to stop, rank 1 alone ends warm-up: both ranks must see both; and
    both see the same step (shared_step) whatever each rank timed."""
    init_method = f"file://{tmp_path / 'rendezvous'}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _AGREE_SCRIPT],
            env={
                **os.environ,
                "RANK": str(r),
                "INIT_METHOD": init_method,
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:  # a rank left waiting for its failed peer must not outlive the test
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    expected = [[False, False], [False, True], [True, False]]
    assert [r["agreed"] for r in results] == [expected, expected]
    # the step as both saw it: the earliest start, the latest end, the tokens of both
    step = [1.7e9 + 0.25, 1.7e9 + 3.125, 160]
    assert [r["step"] for r in results] == [step, step]
