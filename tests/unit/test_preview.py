"""`sfttrainer_preview` on a space of config.json-only models: verdicts, the fewest GPUs that
fit, the GPU-hours and how they were estimated, the CSV, and one line for bad input."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from cli_checks import one_line_error
from model_configs import LLAMA_31_8B
from typer.testing import CliRunner

from ado_actuators.sfttrainer.cli.preview import app
from ado_actuators.sfttrainer.space.preview import SpaceError, entities

LLAMA_8B = LLAMA_31_8B
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
    rows = {(r["model_name"], int(r["number_gpus"])): r for r in csv.DictReader(out.open())}
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
    assert (
        float(eight["predicted_gpu_memory_gib"]) > 80 > float(eight["gpu_memory_lower_bound_gib"])
    )
    # FSDP over more GPUs at the same per-device batch shards the states until they fit; the
    # logits per device stay, so one more GPU is not enough
    assert int(eight["predicted_fewest_gpus"]) > 2
    # the verdict's two figures: the need (the peak and the allocator's headroom) against
    # what CUDA can allocate, nvidia-smi's 81,920 MiB less the 400 MiB context (not the 80 GiB
    # of the datasheet, which the certain bound uses)
    assert float(eight["allocatable_gib"]) == round((81920 - 400) / 1024, 3) == 79.609
    assert float(eight["device_memory_gib"]) == 80
    need = float(eight["predicted_need_gib"])
    assert float(eight["predicted_gpu_memory_gib"]) < need
    assert f"{need:.1f}/79.6" in result.output
    assert "over what CUDA can allocate on the device" in " ".join(result.output.split())
    text = " ".join(result.output.split())
    assert "4 configurations: 1 certain OOM, 2 invalid, 1 predicted OOM." in text
    assert "the 1 that would launch" in text
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
    assert sum(float(r["predicted_gpu_hours"]) for r in rows) == pytest.approx(1.0)
    assert rows[0]["training_estimated_as"] == "stop_after_seconds: exact"
    assert "that would launch 1.00" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        (
            lambda d: d.update(
                entitySpace=[{"identifier": "modle_name", "propertyDomain": {"values": [1]}}]
            ),
            (
                "unknown field 'modle_name' (did you mean model_name?)",
                "`ado describe experiment SFTTrainer.finetune_full_benchmark-v1.0.0` lists",
            ),
        ),
        (
            lambda d: d["entitySpace"][4].update(identifier="batch_sise"),
            ("'batch_sise' (did you mean batch_size?)",),
        ),
        (
            lambda d: d["experiments"][0]["parameterization"][0]["property"].update(
                identifier="stop_after_second"
            ),
            (
                "the parameterization of finetune_full_benchmark-v1.0.0 names an unknown field "
                "'stop_after_second' (did you mean stop_after_seconds?)",
            ),
        ),
        (
            lambda d: d["entitySpace"][0]["propertyDomain"].update(values=["no-such-model"]),
            ("unknown model 'no-such-model': add it", "model_map"),
        ),
        # the names the actuator configuration's model_map adds, and the catalogue's
        (
            lambda d: d["entitySpace"][0]["propertyDomain"].update(values=["llama-405bb"]),
            ("unknown model 'llama-405bb' (did you mean llama-405b", "model_map"),
        ),
        (
            lambda d: d["entitySpace"][0]["propertyDomain"].update(values=["granite-3.1-2bb"]),
            ("unknown model 'granite-3.1-2bb' (did you mean granite-3.1-2b,",),
        ),
        (
            lambda d: d["experiments"][0].update(experimentIdentifier="finetune_nothing"),
            ("finetune_nothing",),
        ),
        (
            lambda d: d["experiments"][0].update(
                experimentIdentifier="finetune_ful_benchmark-v1.0.0"
            ),
            ("(did you mean finetune_full_benchmark-v1.0.0?)",),
        ),
    ],
)
def test_bad_input_is_one_line_naming_it(files, edit, needles):
    space, ac = files
    document = yaml.safe_load(space.read_text())
    edit(document)
    space.write_text(yaml.safe_dump(document))
    one_line_error(invoke(space, "--actuator-config", ac), *needles)


@pytest.mark.parametrize(
    ("document", "needles"),
    [
        # bare settings, as a user may write them: read as none, they would be ignored silently
        ({"hf_home": "/data/hf"}, ("has no parameters: mapping", "found hf_home", "parameters:")),
        (["hf_home"], ("is not a mapping", "actuatorIdentifier: SFTTrainer")),
        ({"parameters": "hf_home"}, ("parameters: not a mapping",)),
        ({"parameters": {"hf_hom": "/x"}}, ("parameters: ", "hf_hom (did you mean hf_home?)")),
        ({"parameters": {"stall_timeout_seconds": "x"}}, ("parameters.stall_timeout_seconds",)),
    ],
)
def test_an_actuator_configuration_not_shaped_as_ado_reads_it_is_named(
    files, tmp_path, document, needles
):
    space, _ = files
    ac = tmp_path / "flat.yaml"
    ac.write_text(yaml.safe_dump(document))
    one_line_error(invoke(space, "--actuator-config", ac), "--actuator-config", *needles)


def test_a_value_outside_its_domain_fails_on_its_own_gpus_with_the_reason_whole(files):
    """A parameterization's misspelt value fails every configuration before launch: each row
    keeps the GPU model and count the space gives it, and the reason, with its likely fix, is
    printed once and whole (the CSV has it per row)."""
    space, ac = files
    document = yaml.safe_load(space.read_text())
    stop = {"property": {"identifier": "auto_stop_method"}, "value": "STEADY_CI95_1PC"}
    document["experiments"][0]["parameterization"].append(stop)
    space.write_text(yaml.safe_dump(document))
    result = invoke(space, "--actuator-config", ac)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    rows = [line.split() for line in lines if line.startswith("full ")]
    # batch 16 over 3 GPUs breaks a configuration rule, answered before the domain
    assert {(row[2], row[3], row[6]) for row in rows} == {
        ("A100-80GB", "1", "failed"),
        ("A100-80GB", "3", "invalid"),
    }
    (reason,) = [line for line in lines if "STEADY_CI95_1PC'" in line]
    assert reason.startswith("  2 configurations: ")
    assert (
        "auto_stop_method 'STEADY_CI95_1PC' is not one of its values (did you mean "
        "STEADY_CI95_1PCT?): 'WARMUP_60S_STABLE_120S_OR_10_STEPS', 'STEADY_CI95_1PCT'"
    ) in reason
    assert "Model shapes:" not in result.output  # no shape was read: nothing to say there


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


CATALOGUE = [
    "granite-3.1-8b-instruct",
    "llama3.1-8b",
    "mistral-7b-v0.1",
    "granite-3.1-3b-a800m-instruct",
]
EXPERIMENTS = [
    "finetune_full_benchmark-v1.0.0",
    "finetune_lora_benchmark-v1.0.0",
    "finetune_pt_benchmark-v1.0.0",
]


def catalogue_space(path, stop: dict | None = None, models=CATALOGUE, experiments=EXPERIMENTS):
    parameterization = [
        {"property": {"identifier": k}, "value": v} for k, v in (stop or {}).items()
    ]
    path.write_text(
        yaml.safe_dump(
            {
                "experiments": [
                    {"experimentIdentifier": e, "parameterization": parameterization}
                    for e in experiments
                ],
                "entitySpace": [
                    {"identifier": "model_name", "propertyDomain": {"values": list(models)}},
                    {"identifier": "number_gpus", "propertyDomain": {"values": [1, 2, 4]}},
                    {"identifier": "gpu_model", "propertyDomain": {"values": [A100]}},
                    {"identifier": "model_max_length", "propertyDomain": {"values": [2048, 4096]}},
                    {"identifier": "batch_size", "propertyDomain": {"values": [4, 8]}},
                ],
            }
        )
    )
    return path


@pytest.mark.parametrize(
    "stop",
    [None, {"auto_stop_method": "WARMUP_60S_STABLE_120S_OR_10_STEPS"}],
    ids=["epochs", "spec"],
)
def test_catalogue_models_preview_from_their_names_alone(tmp_path, no_network, stop):
    """An empty hf_home, no network: every row gets a verdict and every fitting one a predicted
    speed, the bill is above zero, every line fits 120 columns."""
    from ado_actuators.sfttrainer.catalog.entity import FIELDS

    space = catalogue_space(tmp_path / "space.yaml", stop)
    (tmp_path / "hf").mkdir()
    ac = tmp_path / "ac.yaml"
    ac.write_text(yaml.safe_dump({"parameters": {"hf_home": str(tmp_path / "hf")}}))
    out, document = tmp_path / "p.csv", tmp_path / "p.json"
    result = invoke(space, "--actuator-config", ac, "--csv", out, "--json", document)
    assert result.exit_code == 0, result.output
    assert "unknown" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 120
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 3 * 4 * 3 * 2 * 2
    header = next(csv.reader(out.open()))
    assert header[: 1 + len(FIELDS)] == ["experiment", *FIELDS]  # a column per field, no JSON
    assert not any(cell.startswith("{") for row in rows for cell in row.values() if cell)
    assert {r["verdict"] for r in rows} <= {"fits", "predicted OOM", "certain OOM"}
    fitting = [r for r in rows if r["verdict"] == "fits"]
    assert fitting and all(float(r["predicted_tokens_per_second_per_gpu"]) > 0 for r in fitting)
    assert all(float(r["predicted_gpu_hours"]) > 0 for r in fitting)
    assert {r["shape_source"] for r in rows} == {"shipped shape"}
    bill = json.loads(document.read_text())["bill"]
    assert bill["predicted"] is True
    assert bill["launched_gpu_hours"] > 0 and bill["space_gpu_hours"] >= bill["launched_gpu_hours"]
    # grouped by experiment and model, fastest predicted first in each group
    groups: dict = {}
    for row in rows:
        groups.setdefault((row["experiment"], row["model_name"]), []).append(row)
    assert len(groups) == 3 * 4
    for members in groups.values():
        speeds = [float(r["predicted_tokens_per_second_per_gpu"] or 0) for r in members]
        assert speeds == sorted(speeds, reverse=True)


def test_the_table_says_which_figures_are_predicted_and_where_shapes_came_from(
    tmp_path, no_network
):
    space = catalogue_space(tmp_path / "space.yaml")
    result = invoke(space)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("exp."))
    for column in (
        "model",
        "GPU",
        "GPUs",
        "length",
        "batch",
        "verdict",
        "pred GiB/dev",
        "pred tok/s/GPU",
        "pred GPU-h",
    ):
        assert column in header
    assert "llama3.1-8b: meta-llama/Llama-3.1-8B's config.json, as shipped" in result.output
    text = " ".join(result.output.split())
    assert "All predicted, none measured." in text
    assert "skipping the" in text and "predicted OOMs" in text


def test_an_estimated_shape_is_labelled_so_in_the_rows_the_csv_and_the_json(tmp_path, no_network):
    """granite-13b-v2 is an internal checkpoint: its shape is estimated from public facts, and
    every place a row goes says so, never "shipped shape"."""
    space = catalogue_space(
        tmp_path / "space.yaml", models=["granite-13b-v2"], experiments=EXPERIMENTS[:1]
    )
    out, document = tmp_path / "p.csv", tmp_path / "p.json"
    result = invoke(space, "--csv", out, "--json", document)
    assert result.exit_code == 0, result.output
    assert "granite-13b-v2: estimated from the published parameter count" in result.output
    assert "unknown" not in result.output
    rows = list(csv.DictReader(out.open()))
    assert rows and {r["shape_source"] for r in rows} == {"estimated shape"}
    assert all("13,360,702,464" in r["shape_where"] for r in rows)
    json_rows = json.loads(document.read_text())["rows"]
    assert {r["shape_source"] for r in json_rows} == {"estimated shape"}


def test_a_model_found_nowhere_gets_one_short_line_and_the_fix_once(tmp_path, no_network):
    missing = ["allam-1-13b", "granite-8b-japanese", "granite-3b-1.5"]
    space = catalogue_space(tmp_path / "space.yaml", models=missing, experiments=EXPERIMENTS[:1])
    document = tmp_path / "p.json"
    result = invoke(space, "--json", document)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for name in missing:
        (line,) = [line for line in lines if line.strip().startswith(f"{name}:")]
        assert line == f"  {name}: no config.json in its directory nor the shipped shapes"
    fix = "add a model: model_map: {NAME: {Vanilla: /path/to/model}} in the actuator"
    assert [line for line in lines if fix in line] == [
        f"  {fix} configuration, or its config.json there"
    ]
    assert max(len(line) for line in lines) <= 120
    # the long form stays in the JSON: where exactly, why none is shipped, the fix for this model
    why = {r["model_name"]: r["why"] for r in json.loads(document.read_text())["rows"]}
    assert "none at /hf-models-pvc/allam-1-13b-instruct-20240607/config.json" in why["allam-1-13b"]
    assert "expanded Arabic vocabulary" in why["allam-1-13b"]
    assert "model_map ({allam-1-13b: {Vanilla: /path/to/model}})" in why["allam-1-13b"]


def test_the_page_draws_the_predicted_figures(tmp_path, no_network):
    space = catalogue_space(tmp_path / "space.yaml")
    page = tmp_path / "preview.html"
    result = invoke(space, "--html", page)
    assert result.exit_code == 0, result.output
    text = page.read_text()
    assert "dataset tokens/s per GPU predicted" in text and "GPU memory predicted (GiB)" in text
    assert "(predicted, not measured)" in text
    assert page.with_suffix(".png").read_bytes().startswith(b"\x89PNG")


def test_each_line_names_its_gpu_in_a_space_over_two_gpu_models(tmp_path, no_network):
    """Two rows that differ only in the GPU model differ in the table's GPU column, by a short
    name (the device and its memory), within 120 columns."""
    document = yaml.safe_load(catalogue_space(tmp_path / "space.yaml").read_text())
    h100 = "NVIDIA-H100-80GB-HBM3"
    document["entitySpace"][2]["propertyDomain"]["values"] = [A100, h100, "NVIDIA-A100-PCIE-40GB"]
    space = tmp_path / "two.yaml"
    space.write_text(yaml.safe_dump(document))
    result = invoke(space)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.startswith("exp."))
    start = header.index("GPU ")
    rows = [line for line in lines if line.startswith(("full ", "lora ", "pt "))]
    assert len(rows) == len(EXPERIMENTS) * len(CATALOGUE) * 3 * 3 * 2 * 2
    names = {line[start:].split()[0] for line in rows}
    assert names == {"A100-80GB", "H100-80GB", "A100-40GB-PCIe"}
    assert max(len(line) for line in lines) <= 120
