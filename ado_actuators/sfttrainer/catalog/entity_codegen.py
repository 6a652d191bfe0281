"""Writes catalog/entity_values.py, the static `EntityValues`, from `FIELDS` (catalog/entity.py).

`FIELDS` is the one declaration of the entity's fields. A class built from it at run time (pydantic's
`create_model`) is invisible to a type checker, so the class is generated as source instead and
checked in: mypy sees every field with its type and default, and
tests/unit/test_entity_values.py fails, naming `COMMAND`, when the file and `FIELDS` differ.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ado_actuators.sfttrainer.catalog.entity import FIELDS, Domain, Field

TARGET = Path(__file__).with_name("entity_values.py")
COMMAND = ".venv/bin/python -m ado_actuators.sfttrainer.catalog.entity_codegen"

_HEADER = f'''"""The resolved value of every entity field for one measurement: `EntityValues`.

GENERATED from `FIELDS` (catalog/entity.py) by catalog/entity_codegen.py; do not edit by hand.
After changing `FIELDS`, run `{COMMAND}`.
"""

from __future__ import annotations

import pydantic


class EntityValues(pydantic.BaseModel):
    """The resolved value of every field for one measurement (defaults filled in).

    A class of its own, so that what carries one (plan/launch/launch_plan.MeasurementInputs,
    across to the node) names its type. Built by catalog/entity.entity_values, which normalises
    what ado hands back; catalog/entity.domain_problems then checks each value against its
    field's domain. A name is typed `str | None` as pydantic accepts it; where the field's
    domain holds no None, that check refuses None, and code after it may assert it away."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
'''


def annotation(field: Field) -> str:
    """The type pydantic validates a field's value against (and mypy checks its uses with).

    DISCRETE fields keep the Python type of their default: ado stores `-1.0` and `-1` as
    different values (catalog/entity.py's docstring)."""
    if field.domain is Domain.BINARY:
        return "bool"
    if field.domain is Domain.DISCRETE:
        return "float" if isinstance(field.default, float) else "int"
    if field.name == "fast_kernels":
        return "list[str] | None"
    return "str | None"


def _literal(value: object) -> str:
    # json.dumps writes strings in the double quotes ruff's formatter keeps
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _declaration(field: Field) -> str:
    default = "" if field.required else f" = {_literal(field.default)}"
    assert '"""' not in field.help and "\\" not in field.help, field.name
    doc = textwrap.fill(field.help, width=92, initial_indent="", subsequent_indent="    ")
    return f'    {field.name}: {annotation(field)}{default}\n    """{doc}"""\n'


def source() -> str:
    """The text of catalog/entity_values.py for the current `FIELDS`."""
    return _HEADER + "".join("\n" + _declaration(f) for f in FIELDS.values())


def main() -> None:
    TARGET.write_text(source())
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
