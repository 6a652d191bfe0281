"""A model type the transformers release an fms-hf-tuning version pins cannot build is refused
before launch, naming the first version that can (plan/model/releases.build_problem, read from
plan/packages/transformers-loss.yaml's builds, which tests/unit/test_transformers_releases.py
checks against the wheels): is_valid = 0 by a configuration rule, in a measurement and in the
preview alike."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.catalog.model_shapes import shipped_shape
from ado_actuators.sfttrainer.cli.preview import app
from ado_actuators.sfttrainer.contract.outcomes import ANSWERED_BY, CONFIGURATION_RULE, Invalid
from ado_actuators.sfttrainer.engine.measurement import Resolved, resolve
from ado_actuators.sfttrainer.plan.model import releases

HYBRID_ON_212 = (
    "fms-hf-tuning 2.1.2 pins transformers 4.45.2, which cannot build granitemoehybrid models; "
    "choose fms_hf_tuning_version 3.0.0 or later"
)
LORA = "finetune_lora_benchmark-v1.0.0"


def test_a_hybrid_on_a_release_before_its_transformers_is_refused_naming_the_first_that_can():
    assert releases.build_problem("2.1.2", "granitemoehybrid") == HYBRID_ON_212
    # 2.8.2 pins 4.50.3, the last without it; 3.0.0 (4.52.4) is the first offered that has it
    assert releases.build_problem("2.8.2", "granitemoehybrid").endswith("3.0.0 or later")
    for version in ("3.0.0", "3.0.0.1", "3.1.0", "3.2.2"):
        assert releases.build_problem(version, "granitemoehybrid") is None, version
    # granite came with transformers 4.45: 2.0.1 (4.44.2) cannot build it, 2.1.0 (4.45.2) can
    assert releases.build_problem("2.0.1", "granite") == (
        "fms-hf-tuning 2.0.1 pins transformers 4.44.2, which cannot build granite models; "
        "choose fms_hf_tuning_version 2.1.0 or later"
    )
    assert releases.build_problem("2.1.0", "granite") is None
    assert releases.build_problem("2.0.1", "llama") is None


def test_a_model_type_the_record_does_not_list_is_not_judged():
    """A local model of a type no shipped shape names: the record cannot say, so nothing is
    refused (it fails at its load if its release cannot build it)."""
    for version in ("2.0.1", "2.1.2", "3.2.2"):
        assert releases.build_problem(version, "qwen3") is None
        assert releases.build_problem(version, "no-such-type") is None
    assert releases.build_problem("9.9.9", "granitemoehybrid") is None  # no package list


def test_a_vision_models_text_config_is_judged_too():
    vision = shipped_shape("granite-vision-3.2-2b")
    assert vision is not None
    assert list(releases.model_types(vision.config))[:2] == ["llava_next", "granite"]
    assert releases.config_build_problem("2.0.1", vision.config) == releases.build_problem(
        "2.0.1", "granite"
    )
    assert releases.config_build_problem("2.1.0", vision.config) is None
    assert releases.config_build_problem("2.1.2", {"model_type": "qwen3"}) is None
    assert releases.config_build_problem("2.1.2", {}) is None


def _resolve(tmp_path, model_name: str, version: str, model_map=None):
    values = {
        "model_name": model_name,
        "number_gpus": 1,
        "gpu_model": "NVIDIA-H100-80GB-HBM3",
        "batch_size": 2,
        "model_max_length": 1024,
        "fms_hf_tuning_version": version,
    }
    return resolve(values, catalog_data().experiment(LORA), model_map, str(tmp_path))


def test_a_measurement_of_a_hybrid_on_2_1_2_is_invalid_by_a_configuration_rule(tmp_path):
    """Before any memory judgement, placement or environment build: from the shipped shape,
    and from a local model's own config.json alike."""
    outcome = _resolve(tmp_path, "granite-4.0-h-tiny", "2.1.2")
    assert isinstance(outcome, Invalid)
    assert outcome.reason == HYBRID_ON_212
    assert outcome.metadata == {ANSWERED_BY: CONFIGURATION_RULE}
    assert isinstance(_resolve(tmp_path, "granite-4.0-h-tiny", "3.0.0"), Resolved)

    shape = shipped_shape("granite-4.0-h-tiny")
    assert shape is not None
    for model_type, refused in (("granitemoehybrid", True), ("qwen3", False)):
        directory = tmp_path / model_type
        directory.mkdir()
        (directory / "config.json").write_text(
            json.dumps({**shape.config, "model_type": model_type})
        )
        model_map = {"local": {"Vanilla": str(directory)}}
        outcome = _resolve(tmp_path, "local", "2.1.2", model_map)
        assert isinstance(outcome, Invalid) is refused, model_type
        if not refused:
            assert isinstance(outcome, Resolved)


def test_the_preview_says_a_hybrid_on_2_1_2_is_invalid_and_why(tmp_path, no_network):
    space = tmp_path / "space.yaml"
    space.write_text(
        yaml.safe_dump(
            {
                "experiments": [{"experimentIdentifier": LORA, "actuatorIdentifier": "SFTTrainer"}],
                "entitySpace": [
                    {
                        "identifier": "model_name",
                        "propertyDomain": {"values": ["granite-4.0-h-tiny"]},
                    },
                    {"identifier": "number_gpus", "propertyDomain": {"values": [1]}},
                    {
                        "identifier": "gpu_model",
                        "propertyDomain": {"values": ["NVIDIA-H100-80GB-HBM3"]},
                    },
                    {
                        "identifier": "fms_hf_tuning_version",
                        "propertyDomain": {"values": ["2.1.2", "3.0.0"]},
                    },
                    {"identifier": "batch_size", "propertyDomain": {"values": [2]}},
                    {"identifier": "model_max_length", "propertyDomain": {"values": [1024]}},
                ],
            }
        )
    )
    (tmp_path / "hf").mkdir()
    ac = tmp_path / "ac.yaml"
    ac.write_text(yaml.safe_dump({"parameters": {"hf_home": str(tmp_path / "hf")}}))
    document = tmp_path / "p.json"
    result = CliRunner().invoke(
        app, [str(space), "--actuator-config", str(ac), "--json", str(document)]
    )
    assert result.exit_code == 0, result.output
    rows = {r["fms_hf_tuning_version"]: r for r in json.loads(document.read_text())["rows"]}
    assert rows["2.1.2"]["verdict"] == "invalid"
    assert rows["2.1.2"]["why"] == HYBRID_ON_212
    assert rows["3.0.0"]["verdict"] == "fits"
