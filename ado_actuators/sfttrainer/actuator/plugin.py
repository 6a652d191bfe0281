"""The SFTTrainer actuator: glue between ado-core and the measurement engine.

`ado get actuators` imports this module: keep it (and what it imports at module level)
free of torch, transformers, datasets and aim.
"""

from __future__ import annotations

import functools
from typing import Any

from ado.modules.actuators.catalog import ExperimentCatalog
from ado.modules.actuators.standard import StandardActuator

from ado_actuators.sfttrainer.actuator.experiments import IDENTIFIER
from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters


@functools.cache
def _catalog() -> ExperimentCatalog:
    from ado_actuators.sfttrainer.actuator.experiments import build_experiments

    return ExperimentCatalog(
        experiments={e.identifier: e for e in build_experiments()},
        catalogIdentifier=IDENTIFIER,
    )


class SFTTrainer(StandardActuator):
    """Measures fine-tuning throughput and stability with fms-hf-tuning's sft_trainer."""

    identifier = IDENTIFIER
    parameters_class = SFTTrainerParameters

    @classmethod
    # Any: ado-core is untyped (no py.typed)
    def catalog(cls, actuator_configuration: Any = None) -> ExperimentCatalog:
        return _catalog()

    @classmethod
    def validate_parameters(cls, parameters: Any) -> SFTTrainerParameters:  # ado-core is untyped
        return SFTTrainerParameters.from_any(parameters)

    def __init__(self, queue: Any = None, params: Any = None) -> None:  # ado-core is untyped
        super().__init__(queue=queue, params=SFTTrainerParameters.from_any(params))

    # Any: ado-core is untyped (no py.typed)
    def _get_request_executor(self, request: Any, use_ray: bool = False) -> Any:
        from ado_actuators.sfttrainer.actuator.results import measure_request

        experiment = self.catalog().experimentForReference(
            request.experimentReference, resolve=True
        )
        return functools.partial(
            measure_request, request, experiment=experiment, params=self._parameters
        )
