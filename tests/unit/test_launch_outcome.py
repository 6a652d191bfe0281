"""A finished launch -> its outcome, in detail: the reason a user reads (which node, which
rank, which log) and the metadata stored beside the figures. test_classify.py has the verdicts."""

import pytest
from gpu_failure_texts import ACCELERATE_PORT_IN_USE

from ado_actuators.sfttrainer.contract.outcomes import Failed, Invalid, Measured
from ado_actuators.sfttrainer.contract.trainer_io import (
    Failure,
    GpuSample,
    GpuSampleFailure,
    Machine,
    ModelParameters,
    RankOutcome,
    RankReport,
    StepTiming,
)
from ado_actuators.sfttrainer.execute.classify import image_note, launch_outcome, launcher_said
from ado_actuators.sfttrainer.execute.node import NodeRun

A100 = "NVIDIA-A100-SXM4-80GB"  # a dense bf16 peak of 312 TFLOP/s (metrics/gpu_peaks.yaml)
TINY = ModelParameters(
    total=150_000,
    trainable=150_000,
    matmul=100_000,
    trainable_matmul=100_000,
    layers=2,
    attention_width=64,
)
OOM = Failure(exception_type="torch.OutOfMemoryError", message="CUDA out of memory")


def rank(r, world=2, outcome=RankOutcome.OK, failure=None, steps=None, **fields):
    steps = [StepTiming(step=1, start=0, end=1, dataset_tokens=5)] if steps is None else steps
    return RankReport(
        rank=r,
        local_rank=r,
        world_size=world,
        hostname="h",
        outcome=outcome,
        failure=failure,
        steps=steps,
        **fields,
    )


def error(r, message="NCCL Error 3", world=2, **failure):
    return rank(
        r,
        world,
        RankOutcome.ERROR,
        Failure(exception_type="builtins.RuntimeError", message=message, **failure),
    )


def node(machine_rank=0, returncode=0, log_tail="", **fields):
    return NodeRun(
        machine_rank=machine_rank,
        hostname=f"host{machine_rank}",
        returncode=returncode,
        log_tail=log_tail,
        **fields,
    )


def outcome(reports, runs, world_size=2, number_gpus=2, **kw):
    return launch_outcome(
        reports, runs, world_size=world_size, number_gpus=number_gpus, stop_after_seconds=-1, **kw
    )


TWO_NODE_TAILS = "--- node 0 (host0):\nzero\n--- node 1 (host1):\none"


# ---- GPU out of memory ------------------------------------------------------------------------


def test_an_oom_report_is_invalid_naming_the_rank_and_what_it_raised():
    found = outcome(
        [rank(0), rank(1, outcome=RankOutcome.GPU_OOM, failure=OOM)], [node(returncode=1)]
    )
    assert found == Invalid(
        reason="GPU out of memory: rank 1: torch.OutOfMemoryError: CUDA out of memory", gpu_oom=True
    )


def test_an_oom_names_the_node_of_its_rank_when_each_node_runs_several():
    # 4 ranks over 2 nodes: rank 3 is node 1's second rank
    reports = [rank(r, world=4) for r in range(3)] + [
        rank(3, world=4, outcome=RankOutcome.GPU_OOM, failure=OOM)
    ]
    found = outcome(reports, [node(0), node(1, returncode=1)], world_size=4, number_gpus=4)
    assert found == Invalid(
        reason="GPU out of memory: rank 3 on node 1 (host1): torch.OutOfMemoryError: "
        "CUDA out of memory",
        gpu_oom=True,
    )


def test_a_ranks_error_names_the_node_of_its_rank_when_each_node_runs_several():
    reports = [rank(r, world=4) for r in range(3)] + [error(3, world=4)]
    found = outcome(reports, [node(0), node(1, returncode=1)], world_size=4, number_gpus=4)
    assert isinstance(found, Failed)
    assert found.reason.startswith(
        "training failed: rank 3 on node 1 (host1): RuntimeError: NCCL Error 3"
    )


def test_a_report_from_a_rank_of_no_node_returned_is_still_classified_without_a_place():
    # the node of rank 0 returned no run (its result lost); its rank's OOM report still counts
    found = outcome(
        [rank(0, outcome=RankOutcome.GPU_OOM, failure=OOM)], [node(1, returncode=1), node(2)]
    )
    assert found == Invalid(
        reason="GPU out of memory: rank 0: torch.OutOfMemoryError: CUDA out of memory", gpu_oom=True
    )


def test_an_oom_only_the_log_tells_is_invalid_and_says_it_was_read_from_the_log():
    log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    found = outcome([rank(0)], [node(returncode=1, log_tail=log)])
    assert found == Invalid(reason="GPU out of memory (from the training log)", gpu_oom=True)


def test_an_oom_in_the_log_wins_over_the_errors_it_caused_in_the_other_ranks():
    # a rank that ran out of memory and died before its report; its peers' collectives fail
    log = "torch.OutOfMemoryError: CUDA out of memory\n"
    found = outcome([error(0), rank(1)], [node(returncode=1, log_tail=log)])
    assert found == Invalid(reason="GPU out of memory (from the training log)", gpu_oom=True)


def test_without_an_oom_in_the_log_a_ranks_own_error_is_the_reason():
    found = outcome(
        [error(0), rank(1)], [node(returncode=1, log_tail="RuntimeError: NCCL Error 3\n")]
    )
    assert isinstance(found, Failed) and found.reason.startswith(
        "training failed: rank 0: RuntimeError"
    )


# ---- which node, which rank -------------------------------------------------------------------


def test_a_ranks_error_report_fails_the_measurement_even_when_every_launcher_exited_0():
    found = outcome([error(0), rank(1)], [node(log_tail="log")])
    assert found == Failed("training failed: rank 0: RuntimeError: NCCL Error 3\nLog tail:\nlog")


def test_a_ranks_error_names_its_node_and_shows_every_nodes_log():
    reports = [rank(0, 4), rank(1, 4), rank(2, 4), error(3, world=4)]
    found = outcome(reports, [node(0, log_tail="zero"), node(1, 1, log_tail="one")], world_size=4)
    assert found.reason == (
        f"training failed: rank 3 on node 1 (host1): RuntimeError: NCCL Error 3\nLog tail:\n{TWO_NODE_TAILS}"
    )


def test_a_ranks_own_traceback_replaces_the_log_of_every_rank():
    bad = error(1, traceback_tail='  File "train.py", line 3\nRuntimeError: NCCL Error 3')
    found = outcome([rank(0), bad], [node(returncode=1, log_tail="noise of both ranks")])
    assert found.reason == (
        "training failed: rank 1: RuntimeError: NCCL Error 3\n"
        'Traceback of rank 1:\n  File "train.py", line 3\nRuntimeError: NCCL Error 3'
    )


def test_the_cause_heads_the_reason_and_what_was_raised_is_cut_to_one_readable_line():
    bad = error(
        0,
        message="x" * 2000,
        world=1,
        cause="line 3 of /data/news.jsonl is not JSON: fix or remove it",
    )
    found = outcome([bad], [node(returncode=1, log_tail="log")], world_size=1)
    first, raised, *rest = found.reason.splitlines()
    assert first == "line 3 of /data/news.jsonl is not JSON: fix or remove it"
    assert raised == "(raised on " + ("rank 0: RuntimeError: " + "x" * 2000)[:500] + ")"
    assert rest == ["Log tail:", "log"]


def test_a_launcher_that_exits_non_zero_after_every_rank_reported_fails_the_measurement():
    one = outcome([rank(0), rank(1)], [node(returncode=1, log_tail="one node's log")])
    assert one == Failed(
        "training failed: the launcher exited with status 1\nLog tail:\none node's log"
    )
    two = outcome(
        [rank(0, 4), rank(1, 4), rank(2, 4), rank(3, 4)],
        [node(0, log_tail="zero"), node(1, 3, log_tail="one")],
        world_size=4,
    )
    assert two == Failed(
        f"training failed: the launcher exited with status 3 on node 1 (host1)\nLog tail:\n{TWO_NODE_TAILS}"
    )


def test_the_watchdog_stop_names_the_node_and_shows_every_nodes_log():
    runs = [
        node(0, None, log_tail="zero", cancelled=True),
        node(1, -15, log_tail="one", stopped_by_watchdog="no output for 31 s"),
    ]
    found = outcome([], runs, world_size=4)
    assert found.reason.startswith(
        "the training was stopped on node 1 (host1): no output for 31 s; "
    )
    assert found.reason.endswith(
        "then raise stall_timeout_seconds.\nLog tail:\n--- node 1 (host1):\none"
    )


def test_a_node_without_a_log_adds_no_empty_section():
    found = outcome(
        [rank(0, 4), rank(1, 4)],
        [node(0), node(1, -9, log_tail="one", signal_name="SIGKILL")],
        world_size=4,
    )
    assert found.reason.endswith("\nLog tail:\n--- node 1 (host1):\none")


# ---- ranks that ended without a report --------------------------------------------------------


def test_a_rank_killed_by_a_signal_says_the_signal():
    found = outcome([rank(0)], [node(returncode=-9, log_tail="log", signal_name="SIGKILL")])
    assert found == Failed(
        "training failed: rank(s) [1] ended without a report (the launcher exited by SIGKILL): "
        "killed from outside, or by the kernel's out-of-memory killer (check the node's memory)"
        "\nLog tail:\nlog"
    )


def test_signals_on_several_nodes_are_all_named():
    runs = [node(0, -9, signal_name="SIGKILL"), node(1, -9, signal_name="SIGTERM")]
    found = outcome([], runs, world_size=4)
    assert (
        "(the launcher exited by SIGKILL on node 0 (host0), SIGTERM on node 1 (host1)): "
        in found.reason
    )
    assert "rank(s) [0, 1, 2, 3] ended without a report on node 0 (host0)" in found.reason


@pytest.mark.parametrize("reported, missing", [(0, 1), (1, 0)])
def test_a_node_whose_ranks_started_is_not_blamed_on_its_launcher(reported, missing):
    # a rank of the node reported, so the launcher did start them; the exception in the log
    # is a rank's, not the launcher's
    log = "RuntimeError: something a rank printed\n"
    found = outcome([rank(reported)], [node(returncode=1, log_tail=log)])
    headline = found.reason.splitlines()[0]
    assert headline == (
        f"training failed: rank(s) [{missing}] ended without a report: killed from "
        f"outside, or by the kernel's out-of-memory killer (check the node's memory)"
    )


def test_a_launcher_killed_by_a_signal_is_not_said_to_have_failed_on_its_own():
    found = outcome([], [node(returncode=-9, signal_name="SIGKILL", log_tail="KeyError: 'x'\n")])
    assert "before any rank started" not in found.reason and "SIGKILL" in found.reason


def test_the_node_whose_launcher_started_no_rank_is_named_with_what_it_said():
    runs = [node(0, log_tail="zero"), node(1, 1, log_tail=ACCELERATE_PORT_IN_USE)]
    found = outcome([rank(0, 4), rank(1, 4)], runs, world_size=4)
    assert found.reason.startswith(
        "training failed: the launcher exited with status 1 on node 1 (host1) before any rank "
        "started, saying: ConnectionError: Tried to launch distributed communication on port `29633`"
    )


def test_what_a_launcher_said_is_kept_to_1000_characters():
    said = launcher_said("noise\nValueError: " + "v" * 5000 + "\n")
    assert said == ("ValueError: " + "v" * 5000)[:1000]


# ---- what a measurement stores beside its figures ---------------------------------------------


def cpu_run(losses=(None, None), **fields):
    """One CPU rank (number_gpus 0) that trained two steps of 100 tokens, 1 s each."""
    steps = [
        StepTiming(
            step=i,
            start=i - 1,
            end=i,
            dataset_tokens=100,
            sequence_tokens_squared=10_000,
            loss=losses[i - 1],
        )
        for i in (1, 2)
    ]
    return outcome([rank(0, 1, steps=steps, **fields)], [node()], world_size=1, number_gpus=0)


def test_a_vision_rows_metadata_and_note_say_how_many_of_its_tokens_were_image_tokens():
    """Every rank's window steps: here warm-up (step 1) left out, 2 ranks, 80 of 100 tokens
    image tokens in each step measured."""
    steps = [
        StepTiming(step=i, start=i - 1, end=i, dataset_tokens=100, image_tokens=10 + 70 * (i > 1))
        for i in range(1, 8)
    ]
    reports = [rank(r, steps=steps, warmup_steps=1) for r in (0, 1)]
    found = outcome(reports, [node()], number_gpus=0)
    assert isinstance(found, Measured)
    assert found.metadata["image_tokens"] == 2 * 6 * 80
    assert (
        "dataset tokens count text and image tokens together: 960 of the 1,200 in the measured "
        "window (80%) are image tokens, one per image feature the model's processor expanded "
        "each image into; they carry no loss"
    ) in found.metadata["notes"]
    assert not any("image tokens" in n for n in cpu_run().metadata["notes"])  # a text model
    # a step whose batches held no picture counts no image token
    steps.append(StepTiming(step=8, start=7, end=8, dataset_tokens=100, image_tokens=None))
    found = outcome([rank(0, 1, steps=steps, warmup_steps=1)], [node()], 1, number_gpus=0)
    assert isinstance(found, Measured) and found.metadata["image_tokens"] == 6 * 80
    assert image_note((1, 1)) is not None and "(100%)" in image_note((1, 1))


def test_a_vision_rows_flops_add_its_towers_work_per_tile_over_its_tokens():
    """model_flops_per_token of a vision row: the language model's per token, and the tower's
    per tile (metrics/flops.flops_per_tile) times the window's tiles over its tokens."""
    from ado_actuators.sfttrainer.contract.trainer_io import ImageTower
    from ado_actuators.sfttrainer.metrics.flops import flops_per_tile, flops_per_token

    tower = ImageTower(
        matmul=1_000, trainable_matmul=0, layers=2, attention_width=32, tile_positions=16
    )
    params = TINY.model_copy(update={"image_tower": tower})
    # a warm-up step of 7 tiles, then three of 3 and one whose batches held no picture
    tiles = [7, 3, 3, 3, None]
    steps = [
        StepTiming(step=i, start=i - 1, end=i, dataset_tokens=100, image_tiles=n)
        for i, n in enumerate(tiles, start=1)
    ]
    reports = [rank(0, 1, steps=steps, model_parameters=params, warmup_steps=1)]
    found = outcome(reports, [node()], world_size=1)
    assert isinstance(found, Measured)
    text = flops_per_token(TINY, 0.0)
    assert text is not None
    assert found.metadata["model_flops_per_token"] == pytest.approx(
        text + flops_per_tile(tower) * 9 / 400
    )
    assert found.metadata["image_tiles"] == 9
    # a text dataset on the vision model: no tile, the language model's figure alone
    text_steps = [s.model_copy(update={"image_tiles": None}) for s in steps]
    reports = [rank(0, 1, steps=text_steps, model_parameters=params, warmup_steps=1)]
    found = outcome(reports, [node()], world_size=1)
    assert isinstance(found, Measured)
    assert found.metadata["model_flops_per_token"] == pytest.approx(text)
    assert found.metadata["image_tiles"] is None


def test_the_metadata_of_a_measurement():
    machine = Machine(
        node="h",
        cpu_model="AMD EPYC 7763",
        cpu_cores=2,
        cpu_cores_usable=2,
        memory_gib=24.0,
        os="Linux",
        python="3.11.7",
        interconnect="no GPU",
    )
    found = cpu_run(
        losses=(2.5, 2.25),
        machine=machine,
        model_parameters=TINY,
        flash_attention=True,
        distributed_type="NO",
        notes=["flash_attn dropped on CPU"],
        versions={"torch": "2.13.0"},
        stopped_by="stop_after_seconds=30",
        aim_run_hash="4f2a",
    )
    assert isinstance(found, Measured)
    assert found.metadata == {
        "flash_attention": True,
        "mamba_scan_path": None,  # no Mamba layers
        "image_tokens": None,  # a text model
        "image_tiles": None,
        "distributed_type": "NO",
        "notes": [
            "dataset_tokens_per_second_ci95_percent omitted: 2 measured step(s): an interval "
            "needs at least 6 (3 batches of 2 steps)",
            "flash_attn dropped on CPU",
            "model_flops_utilization omitted: no dense peak known for gpu_model None (CPU)",
            "train_loss_rose omitted: 2 measured step(s) with a loss, the rule needs 6",
        ],
        "versions": {"torch": "2.13.0"},
        "steps": 2,
        "warmup_steps": 0,
        "measured_steps": 2,
        "model_flops_per_token": 6 * 100_000 + 12 * 2 * 64 * 100,
        "dataset_tokens_per_second_ci95": None,  # two steps: no interval
        "model_parameters": TINY.model_dump(),
        "stopped_by": "stop_after_seconds=30",
        "auto_stop": None,  # no adaptive method
        "aim_run_hash": "4f2a",
        "train_loss": {
            "tenth_steps": 2,
            "window_steps": 2,
            "not_finite_steps": [],
            "unlabelled_steps": [],
            "rise": None,
        },
        "machine": machine.model_dump(mode="json") | {"nodes": 1},
    }
    assert {k: v for k, v in found.properties.items() if k.startswith("train_loss")} == {
        "train_loss_first_step": 2.5,
        "train_loss_last_tenth": 2.375,
        "train_loss_finite": 1.0,
    }


@pytest.mark.parametrize(
    "parameters, why",
    [
        (None, "the trainer did not report the model's parameters"),
        (
            TINY.model_copy(update={"mixture_of_experts": True}),
            "mixture-of-experts model: the per-token FLOP convention does not apply",
        ),
        (
            TINY.model_copy(update={"layers": None}),
            "the model's attention shape is unknown",
        ),
    ],
    ids=["unreported", "moe", "no attention shape"],
)
def test_a_note_says_why_model_tflops_are_omitted(parameters, why):
    found = cpu_run(model_parameters=parameters)
    assert "model_tflops_per_device" not in found.properties
    assert f"model_tflops_per_device omitted: {why}" in found.metadata["notes"]
    assert found.metadata["model_flops_per_token"] is None


def gpu_rank(steps, **fields):
    return rank(
        0,
        1,
        steps=steps,
        gpu_indices=[0],
        model_parameters=TINY,
        gpu_samples=[
            GpuSample(
                time=t,
                index=0,
                compute_percent=90,
                memory_percent=50,
                power_watts=300,
                power_percent=75,
            )
            for t in (s.end for s in steps)
        ],
        **fields,
    )


ONE_STEP = [
    StepTiming(step=1, start=0, end=1, dataset_tokens=100, sequence_tokens_squared=10_000, loss=2.0)
]


def test_notes_say_why_utilisation_and_energy_are_omitted_on_a_gpu():
    unknown = outcome(
        [gpu_rank(ONE_STEP)], [node()], world_size=1, number_gpus=1, gpu_model="Acme-X1"
    )
    assert set(unknown.metadata["notes"]) == {
        "model_flops_utilization omitted: no dense peak known for gpu_model Acme-X1",
        "gpu_energy_joules_per_token omitted: GPU 0 on h: no energy counter readings",
        "dataset_tokens_per_second_ci95_percent omitted: 1 measured step(s): an interval needs "
        "at least 6 (3 batches of 2 steps)",
        "train_loss_rose omitted: 1 measured step(s) with a loss, the rule needs 6",
    }
    known = outcome([gpu_rank(ONE_STEP)], [node()], world_size=1, number_gpus=1, gpu_model=A100)
    assert "model_flops_utilization" in known.properties
    assert not any(n.startswith("model_flops_utilization") for n in known.metadata["notes"])


def test_warm_up_is_left_out_of_the_figures_the_metadata_and_the_gpu_checks():
    # step 1 is warm-up: 60 s on sequences of 1000 tokens; the window is steps 2-3 of 100 tokens
    steps = [
        StepTiming(step=1, start=0, end=60, dataset_tokens=1000, sequence_tokens_squared=1000**2),
        *(
            StepTiming(
                step=i, start=58 + i, end=59 + i, dataset_tokens=100, sequence_tokens_squared=100**2
            )
            for i in (2, 3)
        ),
    ]
    # every reading taken during the warm-up failed: it must not fail the measurement
    failures = [GpuSampleFailure(time=t, index=0, error="NVMLError: Unknown") for t in (10, 20, 30)]
    report = gpu_rank(steps, warmup_steps=1, gpu_sample_failures=failures)
    found = outcome([report], [node()], world_size=1, number_gpus=1, gpu_model=A100)
    assert isinstance(found, Measured), found
    per_token = 6 * 100_000 + 12 * 2 * 64 * 100  # the window's sequence length, not warm-up's
    assert found.properties["train_runtime"] == 2
    assert found.properties["dataset_tokens_per_second"] == 100
    assert found.properties["model_tflops_per_device"] == pytest.approx(per_token * 100 / 1e12)
    assert found.properties["model_flops_utilization"] == pytest.approx(
        per_token * 100 / 1e12 / 312
    )
    assert (
        found.metadata["steps"],
        found.metadata["warmup_steps"],
        found.metadata["measured_steps"],
    ) == (3, 1, 2)
    assert found.metadata["model_flops_per_token"] == per_token


def test_the_loss_of_the_window_leaves_the_warm_up_out_but_not_the_first_step():
    steps = [
        StepTiming(step=i, start=i - 1, end=i, dataset_tokens=100, loss=9.0 - i)
        for i in range(1, 9)
    ]
    found = outcome(
        [rank(0, 1, steps=steps, warmup_steps=2)], [node()], world_size=1, number_gpus=0
    )
    assert found.metadata["train_loss"]["window_steps"] == 6  # steps 3 to 8
    assert found.properties["train_loss_first_step"] == 8.0
    assert found.properties["train_loss_rose"] == 0.0  # 6 steps: judged


def test_when_every_step_was_warm_up_the_whole_run_is_measured_and_a_note_says_so():
    steps = [StepTiming(step=i, start=i - 1, end=i, dataset_tokens=100) for i in (1, 2)]
    warm = outcome([rank(0, 1, steps=steps, warmup_steps=2)], [node()], world_size=1, number_gpus=0)
    assert isinstance(warm, Measured)
    assert (
        warm.properties["train_runtime"] == 2
        and warm.properties["dataset_tokens_per_second"] == 100
    )
    assert warm.properties["warmup_seconds"] == 0.0  # nothing was left out
    assert (
        warm.metadata["steps"],
        warm.metadata["warmup_steps"],
        warm.metadata["measured_steps"],
    ) == (2, 2, 2)
    assert (
        "warm-up not excluded: training ended on the last warm-up step, so the figures cover "
        "every step"
    ) in warm.metadata["notes"]
    assert not any(n.startswith("warm-up") for n in cpu_run().metadata["notes"])


def test_a_window_of_six_steps_has_its_interval_counted_and_the_warm_up_its_length():
    # warm-up 0-30 s, then six steps of 1 s: batches of 2 steps, 3 of them, none left out
    steps = [
        StepTiming(step=1, start=0, end=30, dataset_tokens=100),
        *(StepTiming(step=i, start=28 + i, end=29 + i, dataset_tokens=100) for i in range(2, 8)),
    ]
    found = outcome(
        [rank(0, 1, steps=steps, warmup_steps=1)], [node()], world_size=1, number_gpus=0
    )
    assert isinstance(found, Measured), found
    assert found.properties["dataset_tokens_per_second_ci95_percent"] == 0.0
    assert found.properties["warmup_seconds"] == 30
    assert found.metadata["dataset_tokens_per_second_ci95"] == {
        "steps_per_batch": 2,
        "batches": 3,
        "steps_left_out": 0,
    }
    assert not any(n.startswith("dataset_tokens_per_second_ci95") for n in found.metadata["notes"])
    # the warm-up was left out as planned: no note says otherwise
    assert not any(n.startswith("warm-up") for n in found.metadata["notes"])


def test_no_completed_step_fails_a_training_that_completed():
    found = outcome([rank(0, 1, steps=[])], [node(log_tail="log")], world_size=1, number_gpus=0)
    assert found == Failed(
        "training produced no measurement: the trainer completed no optimisation "
        "step. Log tail:\nlog",
        {"training_completed": True},
    )


def test_cpu_ranks_on_several_nodes_split_the_per_device_figures():
    reports = [rank(0, 2, steps=ONE_STEP), rank(1, 2, steps=ONE_STEP)]
    found = outcome(reports, [node(0), node(1)], number_gpus=0, devices=2)
    assert found.properties["dataset_tokens_per_second"] == 200
    assert found.properties["dataset_tokens_per_second_per_gpu"] == 100
