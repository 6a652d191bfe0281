"""The `parameters:` block of an SFTTrainer actuatorconfiguration: the engine's settings plus
ado-core's executor-supervisor timings. Nothing is declared here: each field has one home,
engine/settings.py for the engine's and ado-core for the supervisor's."""

from __future__ import annotations

from ado.modules.actuators.executor_supervisor import ExperimentExecutorSupervisorParameters

from ado_actuators.sfttrainer.engine.settings import MeasurementSettings


class SFTTrainerParameters(MeasurementSettings, ExperimentExecutorSupervisorParameters):
    """Actuator parameters. The supervisor timings come from ado-core's executor supervisor."""
