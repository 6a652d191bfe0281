"""The five experiments, generated from entity.FIELDS and experiments.yaml."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import pydantic
import yaml

from ado_actuators.sfttrainer.catalog import models
from ado_actuators.sfttrainer.catalog.entity import FIELDS, Domain, Field

ACTUATOR_ID = "SFTTrainer"


class FieldOverride(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    default: Any = None
    values: list[Any] | None = None


class ExperimentDefinition(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    identifier: str
    aliases: tuple[str, ...] = ()
    description: str
    method: str
    purpose: str
    peft_method: str
    weights_format: str
    targets: tuple[str, ...]
    optional_fields: tuple[str, ...]
    repeats: int = 1
    fixed: dict[str, Any] = pydantic.Field(default_factory=dict)
    field_overrides: dict[str, FieldOverride] = pydantic.Field(default_factory=dict)
    sft_trainer_arguments: dict[str, list[str]] = pydantic.Field(default_factory=dict)
    models: tuple[str, ...] | None = None

    def default_overrides(self) -> dict[str, Any]:
        return {name: o.default for name, o in self.field_overrides.items()}


class CatalogData(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    sft_trainer_constants: dict[str, str]
    experiments: dict[str, ExperimentDefinition]
    lora_target_modules: dict[str, tuple[str, ...]]
    lora_default_target_modules: tuple[str, ...]

    def experiment(self, identifier: str) -> ExperimentDefinition:
        """Look an experiment up by its id or one of its aliases."""
        for definition in self.experiments.values():
            if identifier == definition.identifier or identifier in definition.aliases:
                return definition
        known = ", ".join(self.experiments)
        raise KeyError(f"SFTTrainer has no experiment {identifier!r}; it offers {known}")

    def target_modules(self, model_name: str) -> tuple[str, ...]:
        return self.lora_target_modules.get(model_name, self.lora_default_target_modules)


@functools.cache
def catalog_data() -> CatalogData:
    raw = yaml.safe_load(
        resources.files("ado_actuators.sfttrainer.catalog")
        .joinpath("experiments.yaml")
        .read_text()
    )
    target_sets = raw["target_sets"]
    common = raw["common_optional_fields"]
    definitions = {}
    for identifier, spec in raw["experiments"].items():
        spec = dict(spec)
        extra = spec.pop("extra_optional_fields", [])
        sets = spec.pop("targets")
        sets = [sets] if isinstance(sets, str) else sets
        definitions[identifier] = ExperimentDefinition(
            identifier=identifier,
            targets=tuple(t for name in sets for t in target_sets[name]),
            optional_fields=tuple(extra) + tuple(common),
            **spec,
        )
    unknown = {
        name
        for d in definitions.values()
        for name in (*d.optional_fields, *d.field_overrides, *d.fixed)
        if name not in FIELDS
    }
    if unknown:
        raise ValueError(f"experiments.yaml names fields entity.py does not declare: {unknown}")
    return CatalogData(
        sft_trainer_constants=raw["sft_trainer_constants"],
        experiments=definitions,
        lora_target_modules=raw["lora_target_modules"],
        lora_default_target_modules=raw["lora_default_target_modules"],
    )


def _domain(field: Field, override: FieldOverride | None, model_names: tuple[str, ...]) -> Any:
    from ado.schema.domain import PropertyDomain

    values = override.values if override and override.values is not None else field.values
    if field.name == "model_name":
        values = model_names
    match field.domain:
        case Domain.DISCRETE:
            return PropertyDomain(
                domainRange=list(field.range), interval=1, variableType=field.domain.value
            )
        case Domain.BINARY:
            return PropertyDomain(values=[False, True], variableType=field.domain.value)
        case _:
            return PropertyDomain(
                values=list(values) if values is not None else None,
                variableType=field.domain.value,
            )


def _property(field: Field, definition: ExperimentDefinition) -> Any:
    from ado.schema.property import ConstitutiveProperty

    names = definition.models or models.shipped_model_names()
    return ConstitutiveProperty(
        identifier=field.name,
        metadata={"description": field.help},
        propertyDomain=_domain(field, definition.field_overrides.get(field.name), names),
    )


def _metadata(definition: ExperimentDefinition, data: CatalogData) -> dict[str, Any]:
    parameters: dict[str, Any] = {
        "peft_method": definition.peft_method,
        "weights_format": definition.weights_format,
        "purpose": definition.purpose,
        "sft_trainer_constants": data.sft_trainer_constants,
    }
    if definition.fixed:
        parameters["fixed"] = definition.fixed
    if definition.repeats > 1:
        parameters["repeats"] = definition.repeats
    if definition.sft_trainer_arguments:
        parameters["sft_trainer_arguments"] = definition.sft_trainer_arguments
    if definition.peft_method == "lora":
        names = definition.models or tuple(data.lora_target_modules)
        parameters["target_modules_map"] = {n: list(data.target_modules(n)) for n in names}
        parameters["default_target_modules"] = list(data.lora_default_target_modules)
    return {
        "description": definition.description,
        "method": definition.method,
        "experiment": definition.identifier.removesuffix("-v1.0.0"),
        "parameters": parameters,
    }


def build_experiment(definition: ExperimentDefinition, identifier: str | None = None) -> Any:
    from ado.schema.experiment import Experiment
    from ado.schema.property import AbstractPropertyDescriptor, ConstitutivePropertyDescriptor
    from ado.schema.property_value import ConstitutivePropertyValue

    data = catalog_data()
    optional = [_property(FIELDS[n], definition) for n in sorted(definition.optional_fields)]
    defaults = {**{n: FIELDS[n].default for n in definition.optional_fields},
                **definition.default_overrides()}  # fmt: skip
    return Experiment(
        actuatorIdentifier=ACTUATOR_ID,
        identifier=identifier or definition.identifier,
        metadata=_metadata(definition, data),
        targetProperties=[AbstractPropertyDescriptor(identifier=t) for t in definition.targets],
        requiredProperties=[
            _property(f, definition) for f in FIELDS.values() if f.required
        ],
        optionalProperties=optional,
        defaultParameterization=[
            ConstitutivePropertyValue(
                value=defaults[p.identifier],
                property=ConstitutivePropertyDescriptor(identifier=p.identifier),
            )
            for p in optional
        ],
    )


def build_experiments() -> list[Any]:
    """Every experiment under every id it answers to (aliases included)."""
    return [
        build_experiment(definition, identifier)
        for definition in catalog_data().experiments.values()
        for identifier in (definition.identifier, *definition.aliases)
    ]
