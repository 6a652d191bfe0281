"""The race cards a guided walk deals: for each configuration it sends to be measured, the
answer group's measured fastest at that moment (or none), which the measurement races
(stopping/racing.py): it stops once it cannot win.

The walk (actuator/guided_sampler.py) decides in the operation's process; the measurement runs
in a Ray task wherever Ray places it. ado hands the actuator an entity and nothing of the
walk's, so the card goes through a record both read, beside the record of measured OOMs under
data_directory, which every node already reads (lines.py: appended whole, under a lock). A
card is found by the configuration's key (contract/guided.point_key); the newest card for a key
is the one in force, so a walk that deals "no incumbent" withdraws an older walk's card.
"""

from __future__ import annotations

from pathlib import Path

import pydantic

from ado_actuators.sfttrainer.contract.trainer_io import RaceAgainst
from ado_actuators.sfttrainer.ledger.lines import append_lines, read_lines

FORMAT = 1
WHAT = "the race cards"


class RaceCards:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def deal(self, key: str, against: RaceAgainst | None) -> None:
        """The card for `key`'s next measurement: race `against`, or (None) measure it whole."""
        line = {
            "format": FORMAT,
            "key": key,
            "race": against.model_dump() if against is not None else None,
        }
        append_lines(self.path, FORMAT, WHAT, lambda _: [line])

    def dealt(self, key: str) -> bool:
        """Whether a walk dealt `key` a card, an incumbent or none."""
        return any(line.get("key") == key for line in read_lines(self.path, FORMAT, WHAT))

    def for_key(self, key: str) -> RaceAgainst | None:
        """The card in force for `key`: what its measurement races, or None."""
        found = [line for line in read_lines(self.path, FORMAT, WHAT) if line.get("key") == key]
        if not found or found[-1].get("race") is None:
            return None
        try:
            return RaceAgainst.model_validate(found[-1]["race"])
        except pydantic.ValidationError:
            return None  # a card edited by hand: measure whole, as without one
