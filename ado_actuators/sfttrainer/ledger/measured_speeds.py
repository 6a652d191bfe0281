"""What each measurement measured, by configuration and answer group: what a configuration
races when no guided walk dealt it a card (the actuator parameter `racing: true`, for a plain
random walk, which knows nothing of groups).

A guided walk reads what the space has stored; a plain walk's measurement has only this record,
which every measurement under `racing: true` appends to as it ends (lines.py: whole lines under a lock, under
data_directory, which every node reads). The newest line of a configuration is the one in force:
measured again slower, or invalid, it no longer holds its group's lead. The group's fastest is
the fastest configuration whose row can be named fastest: valid, trained (its loss finite and
not rising), and measured whole (not itself raced).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.contract.guided import AXES
from ado_actuators.sfttrainer.contract.trainer_io import RaceAgainst
from ado_actuators.sfttrainer.ledger.lines import append_lines, read_lines

FORMAT = 1
WHAT = "the record of measured speeds"


def can_lead(properties: Mapping[str, Any]) -> bool:
    """Whether a row may be its group's fastest: valid, trained, and not stopped by a race."""
    return (
        properties.get("is_valid") == 1
        and bool(properties.get("dataset_tokens_per_second"))
        and properties.get("train_loss_finite", 1) == 1
        and properties.get("train_loss_rose", 0) != 1
        and properties.get("raced_behind_percent") is None
    )


class MeasuredSpeeds:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def record(
        self, group: str, key: str, values: Mapping[str, Any], properties: Mapping[str, Any]
    ) -> None:
        """`key`'s newest row, in `group`: its figure and interval where it can lead, else a
        line that withdraws any lead its older rows held."""
        leads = can_lead(properties)
        line = {
            "format": FORMAT,
            "group": group,
            "key": key,
            "speed": properties.get("dataset_tokens_per_second") if leads else None,
            "ci95_percent": properties.get("dataset_tokens_per_second_ci95_percent"),
            "name": ", ".join(f"{axis} {values[axis]}" for axis in AXES if axis in values),
        }
        append_lines(self.path, FORMAT, WHAT, lambda _: [line])

    def fastest(self, group: str, excluding: str) -> RaceAgainst | None:
        """`group`'s measured fastest but `excluding` (the configuration about to be measured:
        it never races its own older row), or None."""
        newest: dict[str, dict[str, Any]] = {}
        for line in read_lines(self.path, FORMAT, WHAT):
            if line.get("group") == group and line.get("key") != excluding:
                newest[str(line.get("key"))] = line
        leaders = [line for line in newest.values() if _number(line.get("speed"))]
        if not leaders:
            return None
        best = max(leaders, key=lambda line: float(line["speed"]))
        interval = _number(best.get("ci95_percent"))
        return RaceAgainst(
            speed=float(best["speed"]),
            ci95_percent=interval if interval is not None and interval >= 0 else None,
            incumbent=str(best.get("name") or best["key"]),
        )


def _number(value: Any) -> float | None:
    """A positive finite figure of a line (one edited by hand may hold anything), else None."""
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return found if found == found and 0 < found < float("inf") else None
