"""The one training configuration of an entity, built in tests as the engine's resolve builds it
(engine/measurement.py): from the entity's values, its experiment and the model's config.json,
read from a model directory or given as a dict."""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.catalog.entity import EntityValues
from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition
from ado_actuators.sfttrainer.catalog.model_shapes import ModelConfigUnavailable, find_model_config
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration


def configuration_of(
    values: EntityValues,
    definition: ExperimentDefinition,
    model: str | dict[str, Any],
    hf_home: str | None = "/nonexistent",
) -> TrainingConfiguration:
    """`model`: a model directory (or hub id) whose config.json is looked up as resolve looks
    it up, or the config.json itself."""
    if isinstance(model, dict):
        return TrainingConfiguration.of(values, definition, model)
    try:
        found = find_model_config(
            model, hf_home, model_name=values.model_name, weights_format=definition.weights_format
        )
    except ModelConfigUnavailable as error:
        return TrainingConfiguration.of(values, definition, None, str(error))
    return TrainingConfiguration.of(values, definition, found.config)


def sized(
    configuration: TrainingConfiguration, per_device_batch: int, model_max_length: int
) -> TrainingConfiguration:
    """`configuration` at another micro-batch and length, the rest of its batch kept: what a
    memory test varies by hand."""
    batch = dataclasses.replace(
        configuration.batch, per_device_batch=per_device_batch, model_max_length=model_max_length
    )
    return dataclasses.replace(configuration, batch=batch)
