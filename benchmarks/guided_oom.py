"""Which of fms-acceleration's A100 runs the product's memory verdict calls a predicted OOM, for
guided_search.py: the guided walk never launches one (space/guided_walk.py leaves every
configuration whose preview verdict is neither "fits" nor "unknown", with that verdict as its
reason), so the simulated walk must not pay for one either.

The verdict is memory_prediction.py's: the predicted peak with the allocator's headroom over
the device's allocatable memory, the headroom fitted with the run's own model family left out
(memory_prediction.leave_one_family_out), so no run is judged by a constant fitted on it. On
these runs that calls 90 of the 100 OOMs and none of the 261 runs that ran
(docs/benchmarks/memory.md). The L40 table has no memory columns: its runs get no verdict, and
the walk launches its OOMs as before.
"""

from __future__ import annotations

from memory_bound import GPU_MODEL, Run, load_runs
from memory_prediction import cases, device_need, judge, leave_one_family_out

from ado_actuators.sfttrainer.metrics.gpu_memory import allocatable_bytes

Key = tuple[str, str, str, int, str, int, int, tuple[str, ...]]


def run_key(run: Run) -> Key:
    return (
        run.table,
        run.framework,
        run.model,
        run.gpus,
        run.peft,
        run.batch,
        run.r,
        run.targets,
    )


def row_key(row: dict[str, str]) -> Key:
    """The key of a row of the A100 table, as memory_bound.load_runs reads it into a Run."""
    return (
        row["table"],
        row["framework_config"],
        row["model_name_or_path"],
        int(row["num_gpus"]),
        "lora" if row["peft_method"] == "lora" else "none",
        int(row["per_device_train_batch_size"]),
        int(float(row["r"] or 8)),
        tuple(row["target_modules"].split()),
    )


def predicted_ooms() -> set[Key]:
    """The A100 runs whose predicted need exceeds the device, each judged with the headroom
    fitted on the other model families."""
    device = allocatable_bytes(GPU_MODEL)
    found: set[Key] = set()
    for headroom, rows in leave_one_family_out(judge(cases(load_runs()))).values():
        found |= {run_key(j.run) for j in rows if device_need(j, headroom) > device}
    return found


if __name__ == "__main__":
    runs = {run_key(r): r for r in load_runs()}
    called = predicted_ooms()
    oom = {k for k, r in runs.items() if not r.ran}
    print(
        f"predicted OOM: {len(called)}; of the {len(oom)} OOMs {len(called & oom)}; ran: {len(called - oom)}"
    )
