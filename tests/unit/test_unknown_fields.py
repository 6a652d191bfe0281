"""A misspelt entity field is answered in one line naming it, the field it was likely meant as
and the command that lists the fields, as it runs: in the actuator (what ado shows for a
request) and in sfttrainer_preview's reading of a space, alike (issue 53, part 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from ado.schema.entity import Entity
from ado.schema.property import ConstitutivePropertyDescriptor
from ado.schema.property_value import ConstitutivePropertyValue
from ado.schema.result import InvalidMeasurementResult

from ado_actuators.sfttrainer.actuator.experiments import build_experiments
from ado_actuators.sfttrainer.actuator.results import entity_inputs, measure_request
from ado_actuators.sfttrainer.catalog.entity import misspelt_fields, unknown_fields
from ado_actuators.sfttrainer.contract.outcomes import Failed
from ado_actuators.sfttrainer.space.preview import SpaceError, entities

FULL = "finetune_full_benchmark-v1.0.0"
COMMAND = f"`ado describe experiment SFTTrainer.{FULL}` lists the fields"
FIELDS = {"model_name": "tiny", "number_gpus": 0, "model_max_length": 512, "batch_size": 2}


@pytest.fixture(scope="module")
def experiment():
    return next(e for e in build_experiments() if e.identifier == FULL)


def entity(**fields):
    return Entity(
        identifier="e1",
        constitutive_property_values=tuple(
            ConstitutivePropertyValue(
                value=v, property=ConstitutivePropertyDescriptor(identifier=k)
            )
            for k, v in fields.items()
        ),
    )


def test_the_line_names_each_field_its_likely_fix_and_the_command():
    assert unknown_fields(["batch_sise"], "entity e1", FULL) == (
        f"entity e1 names an unknown field 'batch_sise' (did you mean batch_size?): {COMMAND}"
    )
    assert unknown_fields(["batch_sise", "zzz"], "entitySpace", FULL) == (
        f"entitySpace names unknown fields 'batch_sise' (did you mean batch_size?), 'zzz': {COMMAND}"
    )


def test_a_name_is_misspelt_when_the_field_it_resembles_is_not_given():
    assert misspelt_fields({"batch_sise", "model_name"}) == ["batch_sise"]
    # given beside the field itself, or close to no field: another actuator's property
    assert misspelt_fields({"batch_sise", "batch_size"}) == []
    assert misspelt_fields({"ambient_temperature"}) == []
    assert misspelt_fields(set(FIELDS)) == []


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        # a required field: ado-core would say only "no value for required property batch_size"
        (
            {**{k: v for k, v in FIELDS.items() if k != "batch_size"}, "batch_sise": 2},
            f"entity e1 names an unknown field 'batch_sise' (did you mean batch_size?): {COMMAND}",
        ),
        # an optional one: ado-core would drop it silently and the default be measured
        (
            {**FIELDS, "gradient_checkpointin": False},
            "entity e1 names an unknown field 'gradient_checkpointin' (did you mean "
            f"gradient_checkpointing?): {COMMAND}",
        ),
    ],
)
def test_the_actuator_names_a_misspelt_field_and_measures_nothing(experiment, fields, line):
    outcome = entity_inputs(entity(**fields), experiment)
    assert isinstance(outcome, Failed) and outcome.reason == line


def test_a_missing_input_close_to_nothing_given_names_the_command(experiment):
    fields = {k: v for k, v in FIELDS.items() if k != "batch_size"}
    outcome = entity_inputs(entity(**fields), experiment)
    assert isinstance(outcome, Failed)
    assert outcome.reason.startswith("entity e1 lacks an input: ")
    assert "batch_size" in outcome.reason and outcome.reason.endswith(COMMAND)
    assert "\n" not in outcome.reason


def test_well_named_fields_reach_the_measurement(experiment):
    values = entity_inputs(entity(**FIELDS, ambient_temperature=20), experiment)
    assert isinstance(values, dict)
    assert {k: values[k] for k in FIELDS} == FIELDS and "ambient_temperature" not in values


def test_what_ado_shows_for_the_request_is_the_line(experiment, capsys):
    """The request's result (ado's record, `ado show trace`) and the operation's output."""
    fields = {**{k: v for k, v in FIELDS.items() if k != "batch_size"}, "batch_sise": 2}
    request = SimpleNamespace(entities=[entity(**fields)], measurements=None, status=None)
    measure_request(request, experiment=experiment, params=None)
    (result,) = request.measurements
    line = f"entity e1 names an unknown field 'batch_sise' (did you mean batch_size?): {COMMAND}"
    assert isinstance(result, InvalidMeasurementResult) and result.reason == line
    assert f"SFTTrainer {FULL} e1: Failed: {line}" in capsys.readouterr().out


def test_the_preview_says_what_the_actuator_says():
    document = {
        "experiments": [{"experimentIdentifier": FULL, "actuatorIdentifier": "SFTTrainer"}],
        "entitySpace": [
            {
                "identifier": k if k != "batch_size" else "batch_sise",
                "propertyDomain": {"values": [v]},
            }
            for k, v in FIELDS.items()
        ],
    }
    with pytest.raises(SpaceError) as raised:
        entities(document)
    assert str(raised.value) == unknown_fields(["batch_sise"], "entitySpace", FULL)
    assert "(did you mean batch_size?)" in str(raised.value) and COMMAND in str(raised.value)


def test_the_command_the_line_names_runs(tmp_path):
    """`ado describe experiment SFTTrainer.<id>` as the line writes it."""
    ado = subprocess.run(
        [Path(sys.executable).parent / "ado", "describe", "experiment", f"SFTTrainer.{FULL}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
        check=False,
    )
    assert ado.returncode == 0, ado.stderr
    assert f"SFTTrainer.{FULL}" in ado.stdout and "batch_size" in ado.stdout
