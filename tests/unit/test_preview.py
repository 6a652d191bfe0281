"""`sfttrainer_preview` on a space of config.json-only models: verdicts, the fewest GPUs that
fit, the GPU-hours and how they were estimated, the CSV, and one line for bad input."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from cli_checks import one_line_error
from typer.testing import CliRunner

from ado_actuators.sfttrainer.cli.preview import app
from ado_actuators.sfttrainer.engine.preview import SpaceError, entities

LLAMA_8B = {
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
}
LLAMA_405B = dict(
    LLAMA_8B,
    hidden_size=16384,
    intermediate_size=53248,
    num_hidden_layers=126,
    num_attention_heads=128,
)
A100 = "NVIDIA-A100-SXM4-80GB"


@pytest.fixture
def files(tmp_path):
    models = {}
    for name, config in {"llama-8b": LLAMA_8B, "llama-405b": LLAMA_405B}.items():
        directory = tmp_path / name
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(config))  # config.json and nothing else
        models[name] = {"Vanilla": str(directory)}
    ac = tmp_path / "ac.yaml"
    ac.write_text(
        yaml.safe_dump(
            {
                "actuatorIdentifier": "SFTTrainer",
                "parameters": {"model_map": models, "hf_home": str(tmp_path)},
            }
        )
    )
    space = tmp_path / "space.yaml"
    space.write_text(
        yaml.safe_dump(
            {
                "experiments": [
                    {
                        "experimentIdentifier": "finetune_full_benchmark-v1.0.0",
                        "actuatorIdentifier": "SFTTrainer",
                        "parameterization": [
                            {"property": {"identifier": "stop_after_seconds"}, "value": 600},
                            {"property": {"identifier": "fms_hf_tuning_version"}, "value": "3.2.2"},
                        ],
                    }
                ],
                "entitySpace": [
                    {
                        "identifier": "model_name",
                        "propertyDomain": {"values": ["llama-8b", "llama-405b"]},
                    },
                    {"identifier": "number_gpus", "propertyDomain": {"values": [1, 3]}},
                    {"identifier": "gpu_model", "propertyDomain": {"values": [A100]}},
                    {"identifier": "model_max_length", "propertyDomain": {"values": [2048]}},
                    {"identifier": "batch_size", "propertyDomain": {"values": [16]}},
                ],
            }
        )
    )
    return space, ac


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_every_entity_gets_a_verdict_and_the_space_its_cost(files, tmp_path):
    space, ac = files
    out = tmp_path / "preview.csv"
    result = invoke(space, "--actuator-config", ac, "--csv", out)
    assert result.exit_code == 0, result.output
    rows = {
        (json.loads(r["entity"])["model_name"], json.loads(r["entity"])["number_gpus"]): r
        for r in csv.DictReader(out.open())
    }
    assert len(rows) == 4
    # batch 16 over 3 GPUs breaks a configuration rule
    assert (
        rows["llama-8b", 3]["verdict"] == "invalid"
        and "not divisible" in rows["llama-8b", 3]["why"]
    )
    # the 405B model's weights alone exceed one A100
    assert rows["llama-405b", 1]["verdict"] == "certain OOM"
    # Llama 8B full fine-tuning on one A100, 16 x 2048 tokens: the bound fits (weights,
    # gradients, AdamW: 8 bytes a parameter), the logits of a 128k vocabulary do not
    eight = rows["llama-8b", 1]
    assert eight["verdict"] == "predicted OOM"
    assert float(eight["predicted_gib"]) > 80 > float(eight["bound_gib"])
    # FSDP over more GPUs at the same per-device batch shards the states until they fit; the
    # logits per device stay, so one more GPU is not enough
    assert int(eight["fewest_gpus"]) > 2
    text = " ".join(result.output.split())
    assert "4 configurations: 0 would be launched" in text
    assert "predicted, not measured" in text


def test_a_space_that_launches_reports_exact_gpu_hours_for_time_bounded_measurements(
    files, tmp_path
):
    space, ac = files
    document = yaml.safe_load(space.read_text())
    document["entitySpace"][1]["propertyDomain"]["values"] = [2, 4]
    document["entitySpace"][0]["propertyDomain"]["values"] = ["llama-8b"]
    space.write_text(yaml.safe_dump(document))
    out = tmp_path / "p.csv"
    result = invoke(space, "--actuator-config", ac, "--csv", out)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(out.open()))
    assert [r["verdict"] for r in rows] == ["fits", "fits"]
    # 600 s on 2 GPUs and on 4 GPUs: (2 + 4) x 600 / 3600 = 1 GPU-hour
    assert sum(float(r["gpu_hours"]) for r in rows) == pytest.approx(1.0)
    assert "time-bounded: exact" in rows[0]["why"]
    assert "1.00 GPU-hours" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        (
            lambda d: d.update(
                entitySpace=[{"identifier": "modle_name", "propertyDomain": {"values": [1]}}]
            ),
            ("modle_name",),
        ),
        (
            lambda d: d["entitySpace"][0]["propertyDomain"].update(values=["no-such-model"]),
            ("no-such-model", "model_map"),
        ),
        (
            lambda d: d["experiments"][0].update(experimentIdentifier="finetune_nothing"),
            ("finetune_nothing",),
        ),
    ],
)
def test_bad_input_is_one_line_naming_it(files, edit, needles):
    space, ac = files
    document = yaml.safe_load(space.read_text())
    edit(document)
    space.write_text(yaml.safe_dump(document))
    one_line_error(invoke(space, "--actuator-config", ac), *needles)


def test_a_missing_file_is_named(files, tmp_path):
    space, ac = files
    one_line_error(
        invoke(tmp_path / "nope.yaml", "--actuator-config", ac), "nope.yaml", "does not exist"
    )
    one_line_error(
        invoke(space, "--actuator-config", tmp_path / "ac-missing.yaml"), "ac-missing.yaml"
    )


def test_a_range_domain_expands_by_its_interval():
    document = {
        "experiments": [{"experimentIdentifier": "finetune_lora_benchmark-v1.0.0"}],
        "entitySpace": [
            {"identifier": "batch_size", "propertyDomain": {"domainRange": [2, 9], "interval": 2}}
        ],
    }
    assert [v["batch_size"] for _, v in entities(document)] == [2, 4, 6, 8]
    with pytest.raises(SpaceError, match="entitySpace"):
        entities({"experiments": []})


def test_gpu_hours_follow_the_entity_s_stop():
    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.engine.preview import gpu_hours

    def hours(**fields):
        values = entity_values(
            {
                "model_name": "m",
                "model_max_length": 8,
                "batch_size": 2,
                "number_gpus": 2,
                "gpu_model": "L40S",
                **fields,
            }
        )
        return gpu_hours(values, None, "none")

    # no limit of any kind: the epochs decide (stop_after_seconds' default -1 is no limit)
    assert hours() == (None, "bounded by epochs: the dataset's length decides")
    assert hours(stop_after_seconds=900.0) == (0.5, "time-bounded: exact")
    assert hours(auto_stop_method="WARMUP_60S_STABLE_120S_OR_10_STEPS") == (
        pytest.approx(0.1),
        "auto-stop: at least 60 s + 120 s",
    )
    # STEADY_CI95_1PCT: at most its cap, or an earlier stop_after_seconds
    assert hours(auto_stop_method="STEADY_CI95_1PCT") == (
        pytest.approx(2 * 80 / 3600),
        "STEADY_CI95_1PCT: at most 80 s",
    )
    assert hours(
        auto_stop_method="STEADY_CI95_1PCT", auto_stop_max_seconds=1800.0, stop_after_seconds=900.0
    ) == (0.5, "STEADY_CI95_1PCT: at most 900 s")
