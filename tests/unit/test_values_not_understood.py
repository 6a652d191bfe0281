"""Values a configuration cannot be read with: one line per field, naming it and the fix, never
pydantic's dump of the whole input."""

from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.outcomes import Failed
from ado_actuators.sfttrainer.engine.measurement import resolve

FULL = catalog_data().experiment("finetune_full_benchmark-v1.0.0")


def test_a_missing_field_and_a_wrong_one_are_each_named_with_the_fix(tmp_path):
    given = {"model_name": "granite-3.1-2b", "number_gpus": 1, "model_max_length": "long"}
    found = resolve(given, FULL, None, "")
    assert isinstance(found, Failed)
    assert found.reason == (
        "entity values not understood: model_max_length = 'long': Input should be a valid "
        "integer, unable to parse string as an integer; batch_size is required: give it in "
        "the space (entitySpace, or the experiment's parameterization)"
    )
    assert "input_value" not in found.reason and "\n" not in found.reason
