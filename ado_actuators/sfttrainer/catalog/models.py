"""Where each model's weights live: the shipped map, overridden by an actuator's model_map."""

from __future__ import annotations

import functools
from importlib import resources

import yaml

from ado_actuators.sfttrainer.catalog.names import did_you_mean

VANILLA = "Vanilla"
"""The weights_format of every experiment but GPTQ-LoRA: the checkpoint as published."""
GPTQ_QUANTIZED = "GPTQ-Quantized"
WEIGHTS_FORMATS = (VANILLA, GPTQ_QUANTIZED)
"""Inner keys of a model_map entry. The spec also spells the second one `QPTQ-Quantized`."""
WEIGHTS_FORMAT_ALIASES = {"QPTQ-Quantized": GPTQ_QUANTIZED}

ModelMap = dict[str, dict[str, str]]


@functools.cache
def shipped_model_map() -> ModelMap:
    raw = yaml.safe_load(
        resources.files("ado_actuators.sfttrainer.catalog").joinpath("models.yaml").read_text()
    )
    return {
        name: {WEIGHTS_FORMAT_ALIASES.get(k, k): v for k, v in formats.items()}
        for name, formats in raw.items()
    }


def shipped_model_names() -> tuple[str, ...]:
    return tuple(sorted(shipped_model_map()))


def merged_model_map(overrides: ModelMap | None) -> ModelMap:
    """Overrides replace the shipped location per model *and per weights format*."""
    merged = {name: dict(formats) for name, formats in shipped_model_map().items()}
    for name, formats in (overrides or {}).items():
        merged.setdefault(name, {}).update(formats)
    return merged


class UnknownModelError(LookupError):
    pass


CLOSE_MODELS = 3
"""How many close model names a message offers: a typo is usually one of a family's sizes."""


def close_models(model_name: object, overrides: ModelMap | None) -> str:
    """' (did you mean NAME?)' naming the models of the catalogue and of `overrides` closest to
    `model_name`, or '' when none is close."""
    return did_you_mean(model_name, merged_model_map(overrides), CLOSE_MODELS)


def model_location(model_name: str | None, weights_format: str, overrides: ModelMap | None) -> str:
    """The hub id or path of `model_name` in `weights_format`, or a message saying how to add it.
    None (an entity that names no model; its open domain lets it through) is in no map."""
    merged = merged_model_map(overrides)
    formats = merged.get(model_name) if model_name is not None else None
    if formats is None:
        raise UnknownModelError(
            f"model_name {model_name!r}{close_models(model_name, overrides)} is not in the "
            f"shipped model map nor in the actuator configuration's model_map; add it there, "
            f"e.g. model_map: {{{model_name}: {{{weights_format}: <hub id or absolute path>}}}}"
        )
    if weights_format not in formats:
        raise UnknownModelError(
            f"model_name {model_name!r} has no {weights_format} weights (it has "
            f"{', '.join(sorted(formats))}); add them to the actuator configuration's "
            f"model_map: {{{model_name}: {{{weights_format}: <hub id or absolute path>}}}}"
        )
    return formats[weights_format]
