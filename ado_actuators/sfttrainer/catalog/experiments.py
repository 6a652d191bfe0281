"""The five experiments, generated from entity.FIELDS and experiments.yaml, as plain data
(ado's experiment objects are built from it in actuator/experiments.py)."""

from __future__ import annotations

import functools
import re
from importlib import resources

import pydantic
import yaml

from ado_actuators.sfttrainer.catalog.entity import FIELDS, FieldValue

_IDENTIFIER = re.compile(r"finetune_(.+?)_(benchmark|stability)-v\d")


def short_name(identifier: str) -> str:
    """An experiment as a table, a legend or a page names it: a benchmark by its method
    (finetune_lora_benchmark-v1.0.0 -> "lora"), the stability experiment by its purpose
    (finetune_full_stability-v1.0.0 -> "stability").

    At most 9 characters for the catalog's five, the width of the preview table's column (the
    method of the one stability experiment is full fine-tuning; its description says so). ado's
    "SFTTrainer." prefix and a parameterised variant's suffix are left off; an identifier of
    no experiment of ours is returned as given.
    """
    match = _IDENTIFIER.match(identifier.removeprefix("SFTTrainer."))
    if not match:
        return identifier
    return match.group(1) if match.group(2) == "benchmark" else match.group(2)


class FieldOverride(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    default: FieldValue = None
    values: list[FieldValue] | None = None


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
    fixed: dict[str, FieldValue] = pydantic.Field(default_factory=dict)
    field_overrides: dict[str, FieldOverride] = pydantic.Field(default_factory=dict)
    sft_trainer_arguments: dict[str, list[str]] = pydantic.Field(default_factory=dict)
    models: tuple[str, ...] | None = None

    def default_overrides(self) -> dict[str, FieldValue]:
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
        resources.files("ado_actuators.sfttrainer.catalog").joinpath("experiments.yaml").read_text()
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
