"""catalog/entity_values.py is what catalog/entity_codegen.py writes from `FIELDS`, nothing else.

The static `EntityValues` lets mypy check every use of an entity field; `FIELDS` stays the one
declaration, so the checked-in class must be regenerated whenever `FIELDS` changes.
"""

from __future__ import annotations

import pytest

from ado_actuators.sfttrainer.catalog import entity_codegen
from ado_actuators.sfttrainer.catalog.entity import FIELDS, entity_values
from ado_actuators.sfttrainer.catalog.entity_values import EntityValues


def test_the_checked_in_class_is_the_generated_one():
    written = entity_codegen.TARGET.read_text()
    assert written == entity_codegen.source(), (
        f"catalog/entity_values.py differs from FIELDS: run `{entity_codegen.COMMAND}`"
    )


def test_every_field_keeps_its_declared_default_and_its_python_type():
    # ado stores -1 and -1.0 as different values: the default's type is part of the contract
    assert list(EntityValues.model_fields) == list(FIELDS)
    for name, field in FIELDS.items():
        declared = EntityValues.model_fields[name]
        assert declared.is_required() == field.required, name
        if not field.required:
            assert declared.default == field.default, name
            assert type(declared.default) is type(field.default), name


def test_discrete_fields_keep_the_type_of_their_default_through_validation():
    values = entity_values(
        {"model_name": "m", "model_max_length": 512.0, "batch_size": 2, "number_gpus": 0}
    )
    assert type(values.model_max_length) is int
    assert type(values.num_train_epochs) is float
    with pytest.raises(ValueError, match="frozen"):
        values.batch_size = 4  # type: ignore[misc]  # the mutation the frozen model refuses
