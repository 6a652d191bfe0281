"""A busy host says so (issue 53, part 8): the trainer reads the machine's CPU use beside its
own, the row carries what other processes used, and the answers say when a CPU row they name
was measured beside other work."""

from __future__ import annotations

import time

import psutil
import pytest

from ado_actuators.sfttrainer.contract.properties import CPU_BUSY_THRESHOLD, CPU_OTHERS
from ado_actuators.sfttrainer.contract.trainer_io import (
    ProcessSample,
    RankOutcome,
    RankReport,
    StepTiming,
)
from ado_actuators.sfttrainer.metrics.aggregate import benchmark_properties
from ado_actuators.sfttrainer.report.answers import answers
from ado_actuators.sfttrainer.report.summary import answer_blocks
from ado_actuators.sfttrainer.report.table import space_table
from ado_actuators.sfttrainer.trainer.monitor import MachineCpu


def test_the_machine_reading_counts_at_least_this_process_and_needs_a_baseline():
    reading = MachineCpu()
    assert reading.read() is None  # no baseline yet
    own = psutil.Process()
    reading.prime()
    before = sum(own.cpu_times()[:2])
    started = time.perf_counter()
    end = time.monotonic() + 0.4
    while time.monotonic() < end:  # one core busy here
        pass
    machine = reading.read()
    spent = 100 * (sum(own.cpu_times()[:2]) - before) / (time.perf_counter() - started)
    assert machine is not None
    # the kernel counts this process among every process: never less, at clock-tick grain
    assert machine >= spent - 10
    assert machine <= 100 * (psutil.cpu_count() or 1) + 1


def rank(rank_: int, host: str, own: list[float], machine: list[float | None]) -> RankReport:
    return RankReport(
        rank=rank_,
        local_rank=rank_,
        world_size=2,
        hostname=host,
        outcome=RankOutcome.OK,
        steps=[StepTiming(step=1, start=100, end=110, dataset_tokens=1000)],
        process_samples=[
            ProcessSample(time=101 + i, cpu_percent=c, memory_percent=1.0, machine_cpu_percent=m)
            for i, (c, m) in enumerate(zip(own, machine, strict=True))
        ],
    )


def others(reports: list[RankReport]) -> float | None:
    return benchmark_properties(reports, number_gpus=0, stop_after_seconds=-1).get(CPU_OTHERS)


def test_others_are_the_machine_less_every_rank_on_it():
    # two ranks on one node, 100 each; the node read 260 and 240: 50 used by others
    both = [rank(0, "n0", [100, 100], [260, 260]), rank(1, "n0", [100, 100], [240, 240])]
    assert others(both) == pytest.approx(50)


def test_the_busiest_node_counts_and_never_below_zero():
    apart = [rank(0, "n0", [100, 100], [130, 130]), rank(1, "n1", [100, 100], [90, 90])]
    assert others(apart) == pytest.approx(30)
    idle = [rank(0, "n0", [100, 100], [95, 95]), rank(1, "n1", [100, 100], [99, 99])]
    assert others(idle) == 0.0


def test_a_report_without_the_reading_has_no_figure():
    old = [rank(0, "n0", [100, 100], [None, None]), rank(1, "n0", [100, 100], [None, None])]
    # left out, not stored as empty: ado would store None as a value
    assert CPU_OTHERS not in benchmark_properties(old, number_gpus=0, stop_after_seconds=-1)
    mixed = [rank(0, "n0", [100, 100], [None, 180]), rank(1, "n0", [50, 50], [None, None])]
    assert others(mixed) == pytest.approx(180 - 100 - 50)


def row(gpus: int, speed: float, busy: float | None) -> dict[str, object]:
    values: dict[str, object] = {
        "experiment_id": "SFTTrainer.finetune_full_benchmark-v1.0.0",
        "model_name": "tiny",
        "number_gpus": gpus,
        "model_max_length": 512,
        "batch_size": 1 if speed > 1000 else 2,
        "is_valid": 1,
        "dataset_tokens_per_second": speed,
        "dataset_tokens_per_second_per_gpu": speed / max(1, gpus),
        "dataset_tokens_per_second_ci95_percent": 3.0,
        "train_loss_finite": 1,
    }
    if busy is not None:
        values[CPU_OTHERS] = busy
    return values


def fastest_line(rows: list[dict[str, object]]) -> str:
    [(_, lines)] = answer_blocks(answers(space_table(rows)))
    [line] = [line for line in lines if line.startswith("Fastest valid")]
    return line


def test_the_answers_say_a_cpu_row_was_measured_on_a_busy_host():
    line = fastest_line([row(0, 2000, 130.0), row(0, 900, 0.0)])
    assert line.endswith(
        "; the host was busy: other processes used 1.3 cores while it was measured, so its"
        " figure is lower and its interval wider than alone"
    )


@pytest.mark.parametrize(
    ("gpus", "busy"),
    [(0, CPU_BUSY_THRESHOLD - 1), (0, None), (1, 400.0)],
    ids=["below-half-a-core", "not-recorded", "a-gpu-row"],
)
def test_the_answers_say_nothing_below_half_a_core_without_the_figure_or_on_gpus(gpus, busy):
    assert "busy" not in fastest_line([row(gpus, 2000, busy), row(gpus, 900, 0.0)])
