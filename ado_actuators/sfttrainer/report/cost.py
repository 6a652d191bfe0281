"""What a space cost: the device-hours its stored measurements reserved, valid and invalid
apart, the configurations skipped without launching, by the rule that skipped them, and what a
guided walk over the space saved by leaving configurations unmeasured.

Pure: a SpaceTable's stored rows in, a Cost and its words out.
"""

from __future__ import annotations

import dataclasses
import re

from ado_actuators.sfttrainer.contract.guided import GuidedRecord
from ado_actuators.sfttrainer.contract.outcomes import (
    ANSWERED_WITHOUT_LAUNCHING,
    CERTAIN_OOM,
    CONFIGURATION_RULE,
    OOM_DOMINANCE,
    PREDICTED_OOM,
)
from ado_actuators.sfttrainer.report.table import SpaceTable, Stored

COST_HEADING = "What the space cost"
RULE_WORDS = {
    CONFIGURATION_RULE: "by a configuration rule",
    CERTAIN_OOM: "certain OOM (memory lower bound)",
    PREDICTED_OOM: "predicted OOM (skip_predicted_oom)",
    OOM_DOMINANCE: "dominated by a measured OOM",
}
# Rows stored before the configuration rules and the certain bound wrote answered_by carry only
# their reason: its first words name the rule. The configuration rules' texts are
# catalog/validity.configuration_problems' and plan/launch/environments.vision_problem's
# (tests/unit/test_report_cost.py holds each of them to these).
_CONFIGURATION_REASON = re.compile(
    r"(batch_size \S+ is not divisible by number_gpus"
    r"|number_gpus \S+ is not divisible by (number_nodes|fast_moe)"
    r"|(number_nodes|batch_size) must be at least 1"
    r"|gpu_model must be set when number_gpus is"
    r"|fast_moe \S+ needs a Mixture of Experts model"
    r"|the model's num_local_experts \S+ is not divisible by fast_moe"
    r"|fms-hf-tuning \S+ cannot read vision datasets)"
)
# A measured OOM's answer says so in its reason (ledger/neighbours.py), in today's words and in
# those of rows stored before them.
_DOMINANCE_WORDS = ("skipped without launching", "answered without launching")


def rule_of(answered_by: str, reason: str) -> str | None:
    """The rule that skipped an is_valid = 0 measurement without launching; None: launched,
    or not known to be otherwise."""
    if answered_by in ANSWERED_WITHOUT_LAUNCHING:
        return answered_by
    if reason.startswith("certain GPU out of memory"):
        return CERTAIN_OOM
    if reason.startswith("predicted GPU out of memory"):
        return PREDICTED_OOM
    if any(words in reason for words in _DOMINANCE_WORDS):
        return OOM_DOMINANCE
    if _CONFIGURATION_REASON.match(reason):
        return CONFIGURATION_RULE
    return None


@dataclasses.dataclass(frozen=True)
class Hours:
    valid: float = 0.0
    invalid: float = 0.0
    measurements: int = 0  # those whose time is counted

    @property
    def total(self) -> float:
        return self.valid + self.invalid

    def plus(self, valid: bool, hours: float) -> Hours:
        if valid:
            return Hours(self.valid + hours, self.invalid, self.measurements + 1)
        return Hours(self.valid, self.invalid + hours, self.measurements + 1)


@dataclasses.dataclass(frozen=True)
class Cost:
    gpu: Hours = Hours()  # measurement_seconds x number_gpus
    # number_gpus 0 holds no GPU: measurement_seconds x nodes (one CPU rank per node)
    cpu: Hours = Hours()
    untimed: int = 0  # measurements not known to have reserved nothing, without a time to count
    # Configurations (rows) per rule; None where the table holds no metadata (ado's CSV).
    answered: dict[str, int] | None = None

    @property
    def answered_total(self) -> int:
        return sum((self.answered or {}).values())


def cost(table: SpaceTable) -> Cost:
    hours = {"gpu": Hours(), "cpu": Hours()}
    untimed = 0
    answered = dict.fromkeys(ANSWERED_WITHOUT_LAUNCHING, 0)
    metadata = any(row.answered_by is not None for row in table.stored)
    for row in table.stored:
        rules = _rules(row)
        for rule in set(filter(None, rules)):
            answered[rule] += 1
        held, left = _timed(
            row, [v for v, rule in zip(row.valid, rules, strict=True) if rule is None]
        )
        untimed += left
        if row.number_gpus is None:  # nothing says what it held: counted with the untimed
            untimed += len(held)
            continue
        kind, devices = ("gpu", row.number_gpus) if row.number_gpus else ("cpu", row.number_nodes)
        for valid, seconds in held:
            hours[kind] = hours[kind].plus(valid, seconds * devices / 3600)
    return Cost(hours["gpu"], hours["cpu"], untimed, answered if metadata else None)


def _rules(row: Stored) -> list[str | None]:
    """Per measurement, the rule that answered it. sources.py lists the metadata one per
    measurement; lists of another length are not theirs, and answer nothing."""
    count = len(row.valid)

    def per_measurement(texts: tuple[str, ...] | None) -> tuple[str, ...]:
        return texts if texts and len(texts) == count else ("",) * count

    return [
        None if valid else rule_of(answered, reason)
        for valid, answered, reason in zip(
            row.valid, per_measurement(row.answered_by), per_measurement(row.reasons), strict=True
        )
    ]


def _timed(row: Stored, launched: list[bool]) -> tuple[list[tuple[bool, float]], int]:
    """(validity, seconds) of the launched measurements with a time, and how many have none.

    ado lists a row's times apart from its validities, in the same order but skipping the
    measurements without one; those skipped without launching reserved nothing. So the times
    pair with the launched measurements when there is one each, and otherwise only when these
    share one validity (the missing ones are older rows); else which measurement held which
    time is unknown and none is counted."""
    if len(row.seconds) == len(launched):
        return list(zip(launched, row.seconds, strict=True)), 0
    if len(set(launched)) == 1 and len(row.seconds) < len(launched):
        return [(launched[0], s) for s in row.seconds], len(launched) - len(row.seconds)
    return [], len(launched)


def cost_lines(found: Cost, guided: GuidedRecord | None = None) -> list[str]:
    """The space's cost in words: GPU time and CPU time are never added together; with the
    record of a guided walk over the space, what the configurations it left unmeasured would
    have cost."""
    lines = []
    if found.gpu.measurements:
        lines.append(
            f"GPU time reserved: {_hours(found.gpu, 'GPU-hour')} (measurement_seconds × "
            "number_gpus)"
        )
    if found.cpu.measurements:
        lines.append(
            "CPU time reserved, apart (number_gpus 0, no GPU): "
            f"{_hours(found.cpu, 'CPU-hour')} (measurement_seconds × nodes, one CPU "
            "rank per node; cores not recorded)"
        )
    if found.untimed:
        lines.append(
            f"Not counted: {_count(found.untimed, 'measurement')} without a recorded "
            "time (stored before measurement_seconds, or the stability experiment, "
            "which records none"
            + (
                ""
                if found.answered is not None
                else "; in ado's CSV, also those skipped without launching"
            )
            + ")"
        )
    return [*lines, _answered_line(found), *([saved_line(guided)] if guided else [])]


def saved_line(record: GuidedRecord) -> str:
    """What the guided walk saved: the GPU-hours its unmeasured configurations that fit were
    predicted to cost (those skipped without launching are counted above, at none; on CPUs
    the configurations left are counted, at no GPU-hours)."""
    fitting = [u for u in record.unmeasured if not u.skipped]
    done = "" if record.finished else "; the walk had not finished"
    return (
        f"Saved by the guided walk: about {_figure(record.saved_gpu_hours)} GPU-hours "
        f"(predicted) on {_count(len(fitting), 'configuration')} it left unmeasured, against "
        f"{_figure(record.spent_gpu_hours)} spent on {_count(record.measured, 'measurement')}"
        f"{done}; the configurations and reasons: 'Left unmeasured by the guided walk'"
    )


def _hours(hours: Hours, unit: str) -> str:
    return (
        f"{_figure(hours.total)} {unit}{'s' if hours.total != 1 else ''} "
        f"({_figure(hours.valid)} valid, {_figure(hours.invalid)} invalid) over "
        f"{_count(hours.measurements, 'measurement')}"
    )


def _figure(value: float) -> str:
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number != 1 else ''}"


def _answered_line(found: Cost) -> str:
    if found.answered is None:
        return (
            "Skipped without launching: not known from this table (ado's CSV holds no "
            "result metadata); plot the space by its id to count them"
        )
    counts = [f"{n} {RULE_WORDS[rule]}" for rule, n in found.answered.items() if n]
    return (
        f"Skipped without launching (no device reserved): "
        f"{_count(found.answered_total, 'configuration')}"
        + (f": {', '.join(counts)}" if counts else "")
    )
