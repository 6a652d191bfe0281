"""The actuatorconfiguration parameters block."""

import pydantic
import pytest
from ado.core.actuatorconfiguration.config import GenericActuatorParameters

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.actuator.plugin import SFTTrainer
from ado_actuators.sfttrainer.catalog.models import UnknownModelError, model_location
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings


def test_documented_defaults():
    params = SFTTrainerParameters()
    assert params.match_exact_dependencies is True
    assert params.output_dir == "output"
    assert params.data_directory == "/data/fms-hf-tuning/artificial-dataset/"
    assert params.aim_db is None and params.aim_dashboard_url is None
    assert params.hf_home == "/hf-models-pvc/huggingface_home"
    assert params.model_map is None
    assert params.num_tokens_cache_directory == "cache"


def test_unknown_key_arriving_as_ado_core_extra_is_rejected_with_a_hint():
    # ado-core parses the YAML into its permissive model first, then asks the actuator.
    generic = GenericActuatorParameters(hf_home="/h", data_directri="/d")
    with pytest.raises(
        pydantic.ValidationError, match=r"data_directri \(did you mean data_directory\?\)"
    ):
        SFTTrainer.validate_parameters(generic)


def test_known_keys_pass_through_ado_core_model():
    generic = GenericActuatorParameters(hf_home="/h", model_map={"x": {"Vanilla": "/w"}})
    params = SFTTrainer.validate_parameters(generic)
    assert params.hf_home == "/h" and params.model_map == {"x": {"Vanilla": "/w"}}


def test_model_map_rejects_unknown_weights_format_and_accepts_the_spec_spelling():
    with pytest.raises(pydantic.ValidationError, match="unknown weights format 'Vanila'"):
        SFTTrainerParameters(model_map={"x": {"Vanila": "/w"}})
    params = SFTTrainerParameters(model_map={"x": {"QPTQ-Quantized": "/q"}})
    assert params.model_map == {"x": {"GPTQ-Quantized": "/q"}}


def test_model_map_overrides_per_model_and_per_format():
    overrides = {"granite-20b-v2": {"Vanilla": "/mine"}, "new-model": {"Vanilla": "org/new"}}
    assert model_location("granite-20b-v2", "Vanilla", overrides) == "/mine"
    # the shipped GPTQ weights of the same model stay
    assert model_location("granite-20b-v2", "GPTQ-Quantized", overrides).endswith("-gptq/")
    assert model_location("new-model", "Vanilla", overrides) == "org/new"
    with pytest.raises(UnknownModelError, match="model_map"):
        model_location("nowhere", "Vanilla", overrides)
    with pytest.raises(UnknownModelError, match="no GPTQ-Quantized weights"):
        model_location("new-model", "GPTQ-Quantized", overrides)


@pytest.mark.parametrize(
    ("name", "offered"),
    [
        ("new-modle", "(did you mean new-model?)"),  # the actuator configuration's model_map
        ("granite-3.1-2bb", "(did you mean granite-3.1-2b, "),  # the catalogue's
    ],
)
def test_an_unknown_model_is_answered_with_the_close_names(name, offered):
    overrides = {"new-model": {"Vanilla": "org/new"}}
    with pytest.raises(UnknownModelError) as raised:
        model_location(name, "Vanilla", overrides)
    assert str(raised.value).startswith(f"model_name {name!r} {offered}")


def test_relative_token_cache_lives_under_data_directory():
    params = SFTTrainerParameters(data_directory="/data", num_tokens_cache_directory="cache")
    assert str(params.tokens_cache_path()) == "/data/cache"
    assert SFTTrainerParameters(num_tokens_cache_directory=None).tokens_cache_path() is None


def test_engine_settings_refuse_unknown_keys_like_the_actuator():
    with pytest.raises(
        pydantic.ValidationError, match=r"data_directri \(did you mean data_directory\?\)"
    ):
        MeasurementSettings(data_directri="/d")
    # the actuator's parameters take ado's supervisor timings; the engine's settings do not
    assert SFTTrainerParameters(taskRunningTimeoutSeconds=5).taskRunningTimeoutSeconds == 5
    with pytest.raises(pydantic.ValidationError, match="taskRunningTimeoutSeconds"):
        MeasurementSettings(taskRunningTimeoutSeconds=5)
