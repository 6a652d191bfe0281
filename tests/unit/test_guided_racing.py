"""benchmarks/guided_racing.py: racing simulated as guided_search.py prints it, on a made-up
space whose runs and step times are known, through stopping/racing.race itself."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from benchmark_modules import benchmark

from ado_actuators.sfttrainer.space.calibration import prior_for
from ado_actuators.sfttrainer.stats.batch_means import throughput_interval
from ado_actuators.sfttrainer.stopping import steady

L40 = "NVIDIA-L40"


@pytest.fixture(scope="module")
def sim():
    return SimpleNamespace(racing=benchmark("guided_racing"), search=benchmark("guided_search"))


def config(sim, key: str, group: str, tokens_per_second: float, oom: bool = False):
    """One GPU, 1,000 tokens a step: its step is 1,000 / tokens_per_second seconds."""
    configuration = SimpleNamespace(
        parallelism=SimpleNamespace(gpus=1),
        batch=SimpleNamespace(per_device_batch=1, sample_tokens=1000),
        tuning=SimpleNamespace(method="full"),
    )
    observed = SimpleNamespace(
        configuration=configuration,
        tokens_per_second=tokens_per_second,
        shape=SimpleNamespace(total_params=1e9, quantized_params=0, quantization=None),
    )
    return sim.search.Config(key, group, observed, oom, tokens_per_second, 0.1)


def test_the_expected_half_width_is_the_batch_means_interval_of_steps_that_vary_so(sim):
    """Steps alternating 1 +/- cv: the interval the rank computes over them is the model's."""
    assert sim.racing.half_width(5) is None
    for n in (6, 20, 36):
        seconds = [1 + 0.02 * (-1) ** i for i in range(n)]
        found = throughput_interval(seconds, [1000] * n).percent
        assert found is not None and found <= sim.racing.half_width(n)


def test_steady_reaches_one_percent_at_two_percent_cv_or_stops_at_its_cap(sim):
    n = sim.racing.STEADY_WINDOW.measured(0.1)
    assert n >= steady.MIN_STEADY_STEPS and sim.racing.half_width(n) <= steady.TARGET_PERCENT
    assert sim.racing.half_width(n - 1) > steady.TARGET_PERCENT
    warm = 1 + steady.WARMUP_WINDOW
    assert sim.racing.STEADY_WINDOW.measured(2.0) == math.ceil(80 / 2.0) - warm  # the cap


def _product_steps(step: float) -> tuple[int, int]:
    """(steps trained, steps measured after the warm-up) of stopping/steady.py's policy fed
    steps of `step` seconds alternating by 2 %."""
    policy = steady.SteadyInterval()
    policy.begin(0.0)
    now = 0.0
    while True:
        took = step * (1 + 0.02 * (-1) ** policy.steps)
        decision = policy.propose(now, now + took, 1000)
        policy.commit(now + took, decision)
        now += took
        if decision.stop:
            return policy.steps, policy.steps - policy.warmup_steps if policy.steady else 0


@pytest.mark.parametrize("step", [7.0, 10.0, 30.0, 100.0])
def test_steady_stops_at_its_cap_in_or_just_after_the_warm_up_as_the_policy_does(sim, step):
    """The cap counts from the first step's start, warm-up included: steps over 80 s / 11 end
    the run before its warm-up is over (it was priced 12 steps, whatever the step)."""
    window = sim.racing.STEADY_WINDOW
    trained, measured = _product_steps(step)
    assert window.warmup(step) + window.measured(step) == trained == math.ceil(80 / step)
    assert window.measured(step) == measured


def test_a_run_the_cap_ends_in_its_warm_up_is_never_raced_and_its_row_covers_every_step(sim):
    window = sim.racing.STEADY_WINDOW
    incumbent = sim.racing.Incumbent(1000.0, 0.5)
    slow = config(sim, "a", "g", 100.0)  # 10 s steps: the cap ends it at its 8th step
    run = sim.racing.measure(slow, window, incumbent, True)
    assert not run.raced
    assert run.result.gpu_hours == pytest.approx((8.5 + 1.0 * 2 + 8 * 10.0) / 3600)
    assert run.result.ci95_percent == sim.racing.half_width(8)
    slower = sim.racing.measure(config(sim, "b", "g", 40.0), window, incumbent, True)
    assert slower.result.ci95_percent is None  # 25 s steps: 4 of them, too few for one


def test_a_gptq_checkpoint_is_read_at_4_bits_and_a_bnb_one_at_16(sim):
    """The start reads the checkpoint as stored: bitsandbytes quantizes while loading."""

    def observed(quantization):
        shape = SimpleNamespace(total_params=10e9, quantized_params=8e9, quantization=quantization)
        return SimpleNamespace(shape=shape)

    assert sim.search.checkpoint_bytes(observed(None)) == 20e9
    assert sim.search.checkpoint_bytes(observed("bnb")) == 20e9
    assert sim.search.checkpoint_bytes(observed("gptq")) == 2e9 * 2 + 8e9 / 2


def test_a_clear_loser_is_raced_at_the_floor_and_a_tie_runs_whole(sim):
    window = sim.racing.SPEC_WINDOW
    incumbent = sim.racing.Incumbent(1000.0, 0.5)
    whole = sim.racing.measure(config(sim, "a", "g", 500.0), window, None, True)
    raced = sim.racing.measure(config(sim, "a", "g", 500.0), window, incumbent, True)
    tied = sim.racing.measure(config(sim, "b", "g", 995.0), window, incumbent, True)
    assert not whole.raced and raced.raced and not tied.raced
    start = 8.5 + 2.0  # the process start and 2 GB of weights at 1 GB/s
    step = 2.0
    assert raced.result.gpu_hours == pytest.approx(
        (start + (30 + steady.MIN_STEADY_STEPS) * step) / 3600
    )
    assert whole.result.gpu_hours == pytest.approx((start + (30 + 60) * step) / 3600)
    assert raced.result.ci95_percent > whole.result.ci95_percent
    untied = sim.racing.measure(config(sim, "b", "g", 995.0), window, incumbent, False)
    assert untied.raced  # ties unmeasured: at best tied


def test_the_walk_races_losers_never_names_them_and_costs_less(sim):
    space = [
        config(sim, "1", "g", 1000.0),
        config(sim, "2", "g", 600.0),
        config(sim, "3", "g", 400.0),
        config(sim, "4", "g", 300.0, oom=True),
    ]
    for c in space[1:3]:  # predicted as fast as the winner: the walk measures them all
        object.__setattr__(c, "predicted", 1000.0)
    walked = (space, L40, prior_for(L40))
    tallies = sim.racing.simulate({"made up": walked}, sim.racing.SPEC_WINDOW)
    plain, raced = tallies["ties measured, no racing"], tallies["ties measured, racing"]
    assert raced.raced == 2 and raced.hours < plain.hours
    assert raced.right == raced.groups == 1
    assert raced.raced_hours > 0 and plain.raced_hours == 0
    winner = sim.racing.measure(space[0], sim.racing.SPEC_WINDOW, None, True).result.gpu_hours
    parts = raced.oom_hours + raced.raced_hours + raced.losers_hours + winner
    assert parts == pytest.approx(raced.hours)
    assert tallies["floor"].hours < raced.hours
    lines = sim.racing.table(tallies)
    assert lines[0].startswith("| guided walk | GPU-hours | x the floor | rows raced |")
    assert any(line.startswith("| ties measured, racing |") for line in lines)


def test_what_no_racing_rule_saves_is_the_ties_the_ooms_and_the_raced_starts(sim):
    """A tie of the winner (its interval still reaches the winner's) is measured whole, a clear
    loser is raced: the bound counts the tie's whole window, the loser's start only."""
    space = [
        config(sim, "1", "g", 1000.0),
        config(sim, "2", "g", 999.0),  # a tie
        config(sim, "3", "g", 400.0),  # raced
        config(sim, "4", "g", 300.0, oom=True),
    ]
    for c in space[1:]:
        object.__setattr__(c, "predicted", 1000.0)
    walked = (space, L40, prior_for(L40))
    tallies = sim.racing.simulate({"made up": walked}, sim.racing.SPEC_WINDOW)
    raced = tallies["ties measured, racing"]
    runs = sim.racing.walk(walked, sim.racing.SPEC_WINDOW, True, True)
    assert not runs["2"].raced and runs["3"].raced
    assert raced.tie_hours == pytest.approx(runs["2"].result.gpu_hours)
    assert raced.raced_start_hours == pytest.approx(sim.racing.start_hours(space[2]))
    floor = tallies["floor"].hours
    least = raced.least(floor)
    assert least == pytest.approx(
        floor + raced.tie_hours + raced.oom_hours + raced.raced_start_hours
    )
    assert floor < least < raced.hours
    lines = sim.racing.report("fms-acceleration", {"made up": walked})
    assert sum(line.startswith("no racing rule goes below") for line in lines) == 2
