"""What a guided walk left unmeasured, as its own section of sfttrainer_plot's answers: each
configuration with its reason, then the walk's bill with what it saved. Read from the record
the guided sampler writes beside the space (contract/guided.py)."""

from __future__ import annotations

from ado_actuators.sfttrainer.contract.guided import GuidedRecord, Unmeasured, read_record


def _configuration(left: Unmeasured) -> str:
    values = left.entity
    gpus = values.get("number_gpus")
    where = "CPU" if gpus in (0, "0") else f"{gpus} GPUs"
    parts = [
        f"batch {values.get('batch_size')}",
        f"sequence length {values.get('model_max_length')}",
    ]
    return f"{', '.join(parts)}, {where}"


def _count(number: int) -> str:
    return f"{number} configuration{'' if number == 1 else 's'}"


def guided_lines(record: GuidedRecord) -> list[str]:
    """The section's lines: a title, each configuration left with its reason, the bill."""
    done = "" if record.finished else " (the walk had not finished)"
    lines = [
        f"Left unmeasured by the guided walk{done}: {_count(len(record.unmeasured))}",
        f"(every figure here is a prediction, at {record.coverage * 100:g} % coverage)",
    ]
    for left in sorted(record.unmeasured, key=lambda u: (u.group, u.reason)):
        lines += [f"  {left.group}: {_configuration(left)}:", f"    {left.reason}"]
    lines += [
        f"Guided walk's bill: {_count(record.measured)} measured, "
        f"{record.spent_gpu_hours:,.2f} GPU-hours;",
        f"  {len(record.unmeasured)} left unmeasured saved about "
        f"{record.saved_gpu_hours:,.2f} GPU-hours (predicted)",
    ]
    return lines


def record_of(space: str) -> GuidedRecord | None:
    """The guided walk's record of `space`, None where no guided walk left one."""
    return read_record(space)


def guided_text(space: str) -> str | None:
    """The section for `space`, or None where no guided walk left a record of it."""
    record = record_of(space)
    return None if record is None else "\n".join(guided_lines(record))
