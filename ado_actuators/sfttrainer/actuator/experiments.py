"""Our catalog as ado's experiment objects: every entity field becomes a constitutive property
with its domain, every experiment one `Experiment` under each id it answers to. ado-core is
imported when the catalog is built, not by `ado get actuators`' import of the plugin."""

from __future__ import annotations

from typing import Any

from ado_actuators.sfttrainer.catalog import models
from ado_actuators.sfttrainer.catalog.entity import FIELDS, Domain, Field
from ado_actuators.sfttrainer.catalog.experiments import (
    CatalogData,
    ExperimentDefinition,
    FieldOverride,
    catalog_data,
)

IDENTIFIER = "SFTTrainer"
"""The actuator's id in ado: its experiments' `actuatorIdentifier` and the plugin's."""


# Any: ado-core is untyped (no py.typed)
def _domain(field: Field, override: FieldOverride | None, model_names: tuple[str, ...]) -> Any:
    from ado.schema.domain import PropertyDomain

    values = override.values if override and override.values is not None else field.values
    if field.name == "model_name":
        values = model_names
    match field.domain:
        case Domain.DISCRETE:
            assert field.range is not None, field.name  # every DISCRETE field declares its range
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


def _property(field: Field, definition: ExperimentDefinition) -> Any:  # ado-core is untyped
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


# Any: ado-core is untyped (no py.typed)
def build_experiment(definition: ExperimentDefinition, identifier: str | None = None) -> Any:
    from ado.schema.experiment import Experiment
    from ado.schema.property import AbstractPropertyDescriptor, ConstitutivePropertyDescriptor
    from ado.schema.property_value import ConstitutivePropertyValue

    data = catalog_data()
    optional = [_property(FIELDS[n], definition) for n in sorted(definition.optional_fields)]
    defaults = {
        **{n: FIELDS[n].default for n in definition.optional_fields},
        **definition.default_overrides(),
    }
    return Experiment(
        actuatorIdentifier=IDENTIFIER,
        identifier=identifier or definition.identifier,
        metadata=_metadata(definition, data),
        targetProperties=[AbstractPropertyDescriptor(identifier=t) for t in definition.targets],
        requiredProperties=[_property(f, definition) for f in FIELDS.values() if f.required],
        optionalProperties=optional,
        defaultParameterization=[
            ConstitutivePropertyValue(
                value=defaults[p.identifier],
                property=ConstitutivePropertyDescriptor(identifier=p.identifier),
            )
            for p in optional
        ],
    )


def build_experiments() -> list[Any]:  # ado-core is untyped
    """Every experiment under every id it answers to (aliases included)."""
    return [
        build_experiment(definition, identifier)
        for definition in catalog_data().experiments.values()
        for identifier in (definition.identifier, *definition.aliases)
    ]
