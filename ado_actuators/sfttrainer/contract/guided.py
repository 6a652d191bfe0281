"""What a guided walk leaves beside the space: the configurations it did not measure, each with
its reason, and what measuring them would have cost. The sampler (actuator/guided_sampler.py)
writes it after each decision; sfttrainer_plot reads it by the space's identifier and prints
it as its own section of the answers, with the GPU-hours saved.

One JSON file per space, `<directory>/<space id>.json`; the directory is the sampler's
`record_directory` parameter, else $SFTTRAINER_GUIDED_RECORDS, else
$XDG_DATA_HOME/ado-sfttrainer/guided (~/.local/share/ado-sfttrainer/guided). On a Ray cluster
the sampler runs where the operation's operator runs: give it a directory the reader sees too.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.host.atomic import write_atomically

ENVIRONMENT = "SFTTRAINER_GUIDED_RECORDS"
AXES = ("batch_size", "model_max_length", "number_gpus")
"""What varies inside an answer group: the picture's x axis, its lines, its rows of panels
(space/groups.py builds the groups on them)."""


@dataclasses.dataclass(frozen=True)
class Unmeasured:
    """A configuration the guided walk left: its experiment, its entity values, its answer group,
    why it was not measured, the GPU-hours measuring it was predicted to cost, and whether it
    would not have launched at all (a configuration rule, a predicted OOM: nothing saved)."""

    experiment: str
    entity: dict[str, Any]
    group: str
    reason: str
    predicted_gpu_hours: float = 0.0
    skipped: bool = False


@dataclasses.dataclass(frozen=True)
class GuidedRecord:
    space: str
    coverage: float
    budget_gpu_hours: float | None
    measure_ties: bool
    measured: int
    spent_gpu_hours: float
    unmeasured: tuple[Unmeasured, ...]
    finished: bool

    @property
    def saved_gpu_hours(self) -> float:
        return sum(u.predicted_gpu_hours for u in self.unmeasured)

    def as_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, default=str)


def canonical(value: Any) -> Any:  # an entity value as ado or YAML gives it
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def point_key(experiment: str, point: Mapping[str, Any]) -> str:
    """One configuration's key: its experiment and its entity values, whatever their types. The
    guided walk names its configurations by it, and the actuator finds their race cards by it
    (ledger/race_cards.py)."""
    values = {k: canonical(v) for k, v in sorted(point.items())}
    return f"{experiment} {json.dumps(values, sort_keys=True, default=str)}"


def race_group(experiment: str, inputs: Mapping[str, Any]) -> str:
    """The group a configuration races in without a guided walk (ledger/measured_speeds.py):
    its experiment and every input but the axes, as the measurement resolves them, the
    experiment's fixed values and the device included. As strict as an answer group or
    stricter: two spaces that fix a field differently never race each other."""
    rest = {k: canonical(v) for k, v in sorted(inputs.items()) if k not in AXES}
    return f"{experiment} {json.dumps(rest, sort_keys=True, default=str)}"


def directory(given: str | None = None) -> Path:
    if given:
        return Path(given)
    if os.environ.get(ENVIRONMENT):
        return Path(os.environ[ENVIRONMENT])
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "ado-sfttrainer" / "guided"


def record_path(space: str, given: str | None = None) -> Path:
    return directory(given) / f"{space}.json"


def write_record(record: GuidedRecord, given: str | None = None) -> Path:
    path = record_path(record.space, given)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, record.as_json())
    return path


def read_record(space: str, given: str | None = None) -> GuidedRecord | None:
    """The space's record, or None where no guided walk wrote one."""
    path = record_path(space, given)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    data["unmeasured"] = tuple(Unmeasured(**u) for u in data["unmeasured"])
    return GuidedRecord(**data)
