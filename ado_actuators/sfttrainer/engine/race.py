"""What a measurement races, and what it leaves for those after it (stopping/racing.py decides
inside the trainer when the race is lost).

A guided walk deals each configuration it sends a card (ledger/race_cards.py): the measured
fastest of its answer group, or none. With `racing: true`, a configuration no walk dealt a card
(a plain random walk's) races the fastest its group's measurements recorded
(ledger/measured_speeds.py), which every measurement under `racing: true` appends to as it
ends (under the default nothing is written: a guided walk reads the space's own rows). Racing only ever
saves time: where a record cannot be read or written, the measurement runs whole and the log
says why.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ado_actuators.sfttrainer.contract.guided import point_key, race_group
from ado_actuators.sfttrainer.contract.outcomes import Invalid, Measured, MeasurementOutcome
from ado_actuators.sfttrainer.contract.trainer_io import RaceAgainst
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings
from ado_actuators.sfttrainer.ledger.lines import RecordUnavailable
from ado_actuators.sfttrainer.ledger.measured_speeds import MeasuredSpeeds
from ado_actuators.sfttrainer.ledger.race_cards import RaceCards

log = logging.getLogger(__name__)


class Race:
    """One measurement's race: `card_key` is the key a guided walk deals its card under (None:
    no walk sent it); `inputs` the measurement's inputs, which name its configuration and group
    in the record of measured speeds."""

    def __init__(
        self,
        settings: MeasurementSettings,
        experiment: str,
        inputs: Mapping[str, Any],
        card_key: str | None,
    ) -> None:
        self.settings, self.card_key, self.inputs = settings, card_key, dict(inputs)
        self.key, self.group = point_key(experiment, inputs), race_group(experiment, inputs)
        path = settings.measured_speeds_file()
        self.speeds = MeasuredSpeeds(path) if path is not None else None

    def against(self) -> RaceAgainst | None:
        """The incumbent this measurement races; None where it runs whole."""
        if self.settings.racing is False:
            return None
        try:
            cards = RaceCards(self.settings.race_cards_file())
            if self.card_key is not None and cards.dealt(self.card_key):
                return cards.for_key(self.card_key)
            if self.settings.racing is True and self.speeds is not None:
                return self.speeds.fastest(self.group, excluding=self.key)
        except RecordUnavailable as error:
            log.warning("measuring without racing: %s", error)
        return None

    def record(self, outcome: MeasurementOutcome) -> None:
        """Tell the record what this configuration measured: its figure where it can lead its
        group, else that it holds no lead (invalid); a failure, stored nowhere, says nothing."""
        if self.speeds is None or not isinstance(outcome, Measured | Invalid):
            return
        properties = outcome.properties if isinstance(outcome, Measured) else {"is_valid": 0}
        try:
            self.speeds.record(self.group, self.key, self.inputs, properties)
        except RecordUnavailable as error:
            log.warning("the measured speed is not recorded for racing: %s", error)
