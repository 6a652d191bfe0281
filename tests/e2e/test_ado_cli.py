"""The product as a user drives it: the real `ado` CLI, a real local Ray, real training."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from ado_cli import AdoCLI, AdoError, generate_text_dataset
from ado_operations import leftover_processes
from tiny_model import build_tiny_model

REPO = Path(__file__).resolve().parents[2]
BENCHMARK_PROPERTIES = 23
STEADY_CAP = 15
TRAINS = 512
"""Where the tiny tokenizer's entries reach their responses (integration/test_measure.py), so
the loss shows a row trained."""
LENGTH = 64
"""Far short of where the tiny tokenizer reaches an entry's response (385 to 437 tokens in):
fms-hf-tuning trains only what follows the response template, so every label is masked and
the rows train nothing, as the loss properties say (integration/test_measure.py trains at
512, which the 15 s cap of prompt tuning's STEADY_CI95_1PCT here could not afford)."""
SHORT = 16
"""The guided demo's short length: like LENGTH nothing trains, and a step is nearly all fixed
cost, so its tokens/s is a small fraction of TRAINS's however busy the machine: clear enough
for a race to separate the two within its 20 measured steps."""


@pytest.fixture(scope="module")
def ado(tmp_path_factory) -> AdoCLI:
    home = tmp_path_factory.mktemp("ado-home")
    return AdoCLI(
        home=home,
        extra_env={
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": str(home / "hf"),
        },
    )


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def actuator_configuration(ado: AdoCLI, tmp_path: Path, data: Path, model_map: dict) -> str:
    """The identifier of an actuator configuration of the tiny model's on `data`."""
    parameters = {
        "data_directory": str(data),
        "hf_home": str(tmp_path / "hf"),
        "output_dir": str(tmp_path / "out"),
        "model_map": model_map,
    }
    document = {"actuatorIdentifier": "SFTTrainer", "parameters": parameters}
    return ado.create("actuatorconfiguration", write_yaml(tmp_path / "ac.yaml", document))


def test_actuator_and_experiments_are_listed(ado):
    listing = ado.run("get", "actuators", "--details").stdout
    assert "SFTTrainer" in listing
    for spelling in ("gtpq", "gptq"):
        described = ado.run(
            "describe", "experiment", f"SFTTrainer.finetune_{spelling}-lora_benchmark-v1.0.0"
        )
        assert "float16" in described.stdout
    # both stop methods and the adaptive one's cap are in ado's catalogue
    described = ado.run(
        "describe", "experiment", "SFTTrainer.finetune_full_benchmark-v1.0.0"
    ).stdout
    for offered in (
        "WARMUP_60S_STABLE_120S_OR_10_STEPS",
        "STEADY_CI95_1PCT",
        "auto_stop_max_seconds",
    ):
        assert offered in described


def test_seed_example_space_is_accepted_unchanged(ado):
    space = REPO / "examples" / "remote-raycluster" / "space.yaml"
    result = ado.run("create", "space", "-f", str(space), "--new-sample-store", "--dry-run")
    assert "The configuration passed is valid" in result.stdout + result.stderr


def test_misspelt_parameter_is_rejected_naming_it(ado, tmp_path):
    bad = write_yaml(
        tmp_path / "bad.yaml",
        {"actuatorIdentifier": "SFTTrainer", "parameters": {"data_directri": "/data"}},
    )
    with pytest.raises(AdoError, match=r"data_directri \(did you mean data_directory\?\)"):
        ado.create("actuatorconfiguration", bad)


def flops_per_token_bounds(model_dir: Path, max_seq: int) -> dict[str, tuple[float, float]]:
    """The convention's per-token FLOPs for sequences of 1 to max_seq tokens, counted here
    from the model itself: full fine-tuning 6N + 12 L A s, prompt tuning 4N + 12 L A s."""
    from transformers import AutoModelForCausalLM

    from ado_actuators.sfttrainer.trainer.model_size import parameters_of_model

    p = parameters_of_model(AutoModelForCausalLM.from_pretrained(model_dir))
    attention = 12 * p.layers * p.attention_width
    return {
        "full": (6 * p.matmul + attention, 6 * p.matmul + attention * max_seq),
        "pt": (4 * p.matmul + attention, 4 * p.matmul + attention * max_seq),
    }


@pytest.mark.slow
def test_operation_measures_valid_rows_and_leaves_failures_unstored(ado, tmp_path):
    model = build_tiny_model(tmp_path / "tiny-llama")
    data = tmp_path / "data"
    generate_text_dataset(data, "news-chars-512-entries-4096", 64)
    config_id = actuator_configuration(ado, tmp_path, data, {"tiny-llama": {"Vanilla": str(model)}})
    parameterization = [
        {"property": {"identifier": "fms_hf_tuning_version"}, "value": "3.2.2"},
        {"property": {"identifier": "dataset_id"}, "value": "news-chars-512-entries-4096"},
        {"property": {"identifier": "max_steps"}, "value": 2},
        {"property": {"identifier": "torch_dtype"}, "value": "float32"},
        {"property": {"identifier": "gradient_accumulation_steps"}, "value": 1},
    ]
    # prompt tuning stops when its figure is known (or at a 15 s cap) instead of after 2 steps
    steady = [p for p in parameterization if p["property"]["identifier"] != "max_steps"] + [
        {"property": {"identifier": "auto_stop_method"}, "value": "STEADY_CI95_1PCT"},
        {"property": {"identifier": "auto_stop_max_seconds"}, "value": STEADY_CAP},
        {"property": {"identifier": "num_train_epochs"}, "value": 10000},
    ]
    space_id = ado.create(
        "space",
        write_yaml(
            tmp_path / "space.yaml",
            {
                "experiments": [
                    {
                        "experimentIdentifier": e,
                        "actuatorIdentifier": "SFTTrainer",
                        "parameterization": values,
                    }
                    for e, values in (
                        ("finetune_full_benchmark-v1.0.0", parameterization),
                        ("finetune_pt_benchmark-v1.0.0", steady),
                    )
                ],
                "entitySpace": [
                    # a model nobody mapped: its measurements fail, with a reason, and are not stored
                    {
                        "identifier": "model_name",
                        "propertyDomain": {"values": ["tiny-llama", "unmapped-model"]},
                    },
                    # 2 GPUs without a gpu_model: invalid by rule 5, stored at once as is_valid = 0
                    {"identifier": "number_gpus", "propertyDomain": {"values": [0, 2]}},
                    {"identifier": "model_max_length", "propertyDomain": {"values": [LENGTH]}},
                    {"identifier": "batch_size", "propertyDomain": {"values": [2, 4]}},
                ],
            },
        ),
        "--new-sample-store",
    )
    operation = yaml.safe_load((REPO / "examples" / "local-cpu" / "operation.yaml").read_text())
    operation |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    operation_id = ado.create("operation", write_yaml(tmp_path / "op.yaml", operation))
    trace = tmp_path / "trace.yaml"
    ado.run("show", "trace", "operation", operation_id, "-o", "yaml", "--output-file", str(trace))
    trace = trace.read_text()
    rows = ado.measurements(space_id)
    invalid = [r for r in rows if float(r["is_valid"]) == 0]
    assert {(r["model_name"], r["number_gpus"]) for r in invalid} == {
        ("tiny-llama", "2"),
        ("unmapped-model", "2"),
    }
    assert len(invalid) == 8
    assert all(r["dataset_tokens_per_second"] in ("", "nan") for r in invalid)
    rows = [r for r in rows if float(r["is_valid"]) == 1]
    measured = {(r["experiment_id"].split(".")[1].split("-v1")[0], r["batch_size"]) for r in rows}
    assert measured == {
        (e, b) for e in ("finetune_full_benchmark", "finetune_pt_benchmark") for b in ("2", "4")
    }, trace[-3000:]
    for row in rows:
        assert (row["model_name"], row["number_gpus"]) == ("tiny-llama", "0")
        assert float(row["dataset_tokens_per_second"]) > 0
        assert float(row["cpu_compute_utilization"]) > 0
        assert float(row["gpu_memory_utilization_peak"]) == 0.0
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data

    targets = catalog_data().experiment("finetune_full_benchmark-v1.0.0").targets
    spec, beyond = targets[:BENCHMARK_PROPERTIES], targets[BENCHMARK_PROPERTIES:]
    assert set(spec) <= set(rows[0]) and "train_step_seconds_p50" in beyond
    # the properties beyond the spec: present on CPU (MFU excepted: no peak) and consistent
    per_token_bounds = flops_per_token_bounds(model, max_seq=LENGTH)
    for row in rows:
        method = row["experiment_id"].split(".")[1].split("_")[1]  # full or pt
        low, high = per_token_bounds[method]
        assert float(row["train_step_seconds_p50"]) <= float(row["train_step_seconds_p90"])
        assert float(row["train_step_seconds_cv_percent"]) >= 0
        assert float(row["gpu_energy_joules_per_token"]) == 0.0
        assert float(row["gpu_memory_max_allocated_gib"]) == 0.0
        assert row.get("model_flops_utilization", "") in ("", "nan")
        if method == "pt":
            # STEADY_CI95_1PCT: a tested warm-up left out, an interval, and a stop at the target
            # or at the first step end past the 15 s cap: before the spec's method would even
            # end its 60 s warm-up (a margin no step of a tiny model on busy cores comes near)
            assert float(row["warmup_seconds"]) > 0
            assert float(row["dataset_tokens_per_second_ci95_percent"]) > 0
            assert float(row["warmup_seconds"]) + float(row["train_runtime"]) < 60
        else:  # 2 steps: too few for an interval, and nothing left out
            assert row.get("dataset_tokens_per_second_ci95_percent", "") in ("", "nan")
            assert float(row["warmup_seconds"]) == 0.0
        # every label masked: the loss is 0 / 0 at every step, so no loss figure and no rise
        assert float(row["train_loss_finite"]) == 0.0
        for name in ("train_loss_first_step", "train_loss_last_tenth", "train_loss_rose"):
            assert row.get(name, "") in ("", "nan"), name
        per_token = (
            float(row["model_tflops_per_device"])
            * 1e12
            / float(row["dataset_tokens_per_second_per_gpu"])
        )
        assert low <= per_token * (1 + 1e-9) and per_token <= high * (1 + 1e-9), (
            method,
            low,
            per_token,
            high,
        )
    _check_the_machine_in(trace, measured=len(rows))
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    _check_the_picture_of(space_id, ado, tmp_path / "plot", measured=rows, invalid=8)


def _check_the_machine_in(trace: str, measured: int) -> None:
    """Each measured row's metadata says what it ran on: on CPU, the CPU and no GPU."""

    def walk(node):
        yield node
        children = (
            node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        )
        for child in children:
            yield from walk(child)

    found = {
        m["workdir"]: m
        for m in walk(yaml.safe_load(trace))
        if isinstance(m, dict) and "machine" in m
    }
    assert len(found) == measured, trace[-3000:]
    for metadata in found.values():
        machine = metadata["machine"]
        assert machine["cpu_model"] and machine["cpu_cores"] >= machine["cpu_cores_usable"] >= 1
        assert (machine["gpus"], machine["interconnect"], machine["nodes"]) == ([], "no GPU", 1)
        # the steps whose loss was not finite are those without a single label
        window = metadata["train_loss"]
        assert (
            window["not_finite_steps"] and window["not_finite_steps"] == window["unlabelled_steps"]
        )
        assert any("every label of those steps' batches was masked" in n for n in metadata["notes"])


def _check_the_picture_of(space_id, ado, out, measured, invalid):
    """sfttrainer_plot reads the stored space through ado's API, in ado's context."""
    from PIL import Image

    from ado_actuators.sfttrainer.report.summary import format_value

    # the space against itself, as a pipeline gates a release: the machines are read through
    # ado's API, alike, and nothing regressed
    plotted = subprocess.run(
        [
            str(Path(sys.executable).with_name("sfttrainer_plot")),
            space_id,
            "-o",
            str(out),
            "--compare",
            space_id,
            "--fail-on",
            "slower,loss",
        ],
        env=ado.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plotted.returncode == 0, plotted.stderr + plotted.stdout
    paths = plotted.stdout.splitlines()[:2]
    assert paths == [str(out / f"{space_id}.png"), str(out / f"{space_id}.html")]
    # then the answers: valid rows that trained nothing are never named fastest
    assert plotted.stdout.count("Fastest valid: none whose loss shows it trained") == 2
    assert plotted.stdout.count("Passed over: 0 GPUs (CPU), sequence length 64, batch ") == 4
    assert "but its training loss was not finite (train_loss_finite = 0)" in plotted.stdout
    assert "Measured alike: the same GPUs, driver, CUDA, NCCL, CPU" in plotted.stdout
    assert "Regression gate (--fail-on slower,loss)\n  passed: none of 12 matched" in plotted.stdout
    with Image.open(out / f"{space_id}.png") as image:
        image.load()
        assert image.width >= 700 and image.height >= 500
    page = (out / f"{space_id}.html").read_text()
    assert "data:image/png;base64," in page
    for row in measured:
        assert format_value(float(row["dataset_tokens_per_second"])) in page
    assert page.count('class="invalid"') == invalid


def test_plot_of_an_unknown_space_names_it(ado, tmp_path):
    ado.run("get", "spaces")  # ado creates its local context on first use
    context = ado.home / "ado" / "contexts" / "local.json"
    plotted = subprocess.run(
        [
            str(Path(sys.executable).with_name("sfttrainer_plot")),
            "space-000000-000000",
            "--context",
            str(context),
            "-o",
            str(tmp_path / "plot"),
        ],
        # --context, not the active context, says where to look
        env={**ado.env, "XDG_CONFIG_HOME": str(tmp_path / "elsewhere")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plotted.returncode == 2, plotted.stderr
    assert plotted.stderr.startswith(
        "Error: space 'space-000000-000000' does not exist in ado context 'local'"
    )
    assert "Traceback" not in plotted.stderr and not (tmp_path / "plot").exists()


@pytest.mark.slow
def test_guided_walk_killed_and_run_again_measures_only_what_can_win(ado, tmp_path):
    """The guided demo's space and walk (examples/local-cpu/space-guided.yaml and
    operation-guided.yaml, `make guided-demo`) through the real CLI on CPU: batch 1 at TRAINS
    and at SHORT tokens. At SHORT nothing trains (every label masked), which the answers
    never name fastest, however fast it ran: the answer cannot depend on the schedule.
    TRAINS is predicted many times faster than SHORT, so the walk measures it first. Once it
    is measured, SHORT's upper bound (its prediction scaled by that row: 0.17 of TRAINS's figure
    on a busy machine) lies below TRAINS's lower bound (its stored 95 % interval scaled to 50 %:
    about a third of it), and the walk ends with one measurement of two. Only a far wider
    interval than a busy CPU has made leaves nothing out, and the walk measures both. So the
    test asserts whichever the walk did, each with what makes it right: the reason's own
    figures when it left one, a wide interval when it did not. The first run is SIGKILLed while
    its first training runs: nothing of it is stored, nothing of it is left running, and the
    run again ends as an uninterrupted walk would. A third run, at 99 % coverage, measures
    nothing a second time (TRAINS's row stays the same figure) and measures SHORT where the
    walk left it; SHORT, measured after TRAINS (by that walk or by the run again), is raced: it
    stops once it cannot win. (That the same stored rows leave the same configurations for the
    same reasons is unit/test_guided.py's.) A full walk of the same space then replays both rows
    and names the same fastest; the plot prints what the guided walk left, with its reason."""
    model = build_tiny_model(tmp_path / "tiny-llama")
    data = tmp_path / "data"
    generate_text_dataset(data, "news-chars-512-entries-4096", 64)
    model_map = {"tiny-llama": {"Vanilla": str(model)}}
    config_id = actuator_configuration(ado, tmp_path, data, model_map)
    space_file = REPO / "examples" / "local-cpu" / "space-guided.yaml"
    lengths = {
        d["identifier"]: d["propertyDomain"]["values"]
        for d in yaml.safe_load(space_file.read_text())["entitySpace"]
    }["model_max_length"]
    assert lengths == [SHORT, TRAINS]
    space_id = ado.create("space", space_file, "--new-sample-store")
    records = tmp_path / "guided"
    guided = yaml.safe_load((REPO / "examples" / "local-cpu" / "operation-guided.yaml").read_text())
    guided |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    sampler = guided["operation"]["parameters"]["samplerConfig"]["parameters"]
    sampler |= {
        "actuator_parameters": {
            "hf_home": str(tmp_path / "hf"),
            "model_map": model_map,
            "data_directory": str(data),
        },
        "record_directory": str(records),
    }
    operation = write_yaml(tmp_path / "guided.yaml", guided)

    left_running = kill_during_first_training(ado, operation, tmp_path / "out")
    assert left_running == [], left_running
    assert ado.measurements(space_id) == []

    walked = ado.create("operation", operation)
    rows = ado.measurements(space_id)
    measured = {int(r["model_max_length"]): r for r in rows}
    assert TRAINS in measured, rows  # measured first: predicted fastest
    interval = float(measured[TRAINS]["dataset_tokens_per_second_ci95_percent"])
    record = json.loads((records / f"{space_id}.json").read_text())
    assert record["finished"] and record["measured"] == len(rows)
    if sorted(measured) == [TRAINS]:
        # what an uninterrupted walk ends with: one measured, one left with its reason, whose
        # figures put SHORT's upper bound below the measured fastest's lower bound
        [left] = record["unmeasured"]
        assert left["entity"]["model_max_length"] == SHORT
        central, spread, fastest, margin = reason_figures(left["reason"])
        assert central + spread <= fastest - margin + 2, left["reason"]  # each rounded
    else:
        # nothing ruled out: only a wide interval allows that
        assert sorted(measured) == [SHORT, TRAINS] and record["unmeasured"] == [], record
        assert interval >= NARROW, (interval, record)
    rows = the_configuration_measured_after_the_fastest_is_raced(
        ado, tmp_path, guided, walked, rows
    )
    full_walk_names_the_same_fastest(ado, tmp_path, space_id, config_id, rows, records, record)


def the_configuration_measured_after_the_fastest_is_raced(
    ado: AdoCLI, tmp_path: Path, guided: dict, walked: str, walked_rows: list[dict[str, str]]
) -> list[dict[str, str]]:
    """Racing (issue 54): SHORT, measured once TRAINS's row stands, stops once its 95 %
    interval lies below TRAINS's. The guided walk is run a third time, at 99 % coverage (its
    own record): it decides from what the store holds, so it measures nothing a second time
    (TRAINS's row is the same figure, not a new one; every row, where the run again `walked`
    measured both). Where the run again left SHORT, the bounds at 99 % cannot rule it out and
    this walk measures it; where the run again measured it, it was raced there. Either way its
    row is valid, says by how much it lost and what that saved, its interval lies below
    TRAINS's as the rule requires, and its notes, in the trace of the operation that measured
    it, name TRAINS. Asserted from the rows' own figures: SHORT does not train (every label
    masked), so no schedule makes it the answer."""
    space_id = guided["spaces"][0]
    wide = json.loads(json.dumps(guided))
    sampler = wide["operation"]["parameters"]["samplerConfig"]["parameters"]
    sampler |= {"coverage": 0.99, "record_directory": str(tmp_path / "guided-wide")}
    third = ado.create("operation", write_yaml(tmp_path / "wide.yaml", wide))
    before = {int(r["model_max_length"]): r for r in walked_rows}
    measured_by = walked if SHORT in before else third
    wide_record = json.loads((tmp_path / "guided-wide" / f"{space_id}.json").read_text())
    assert wide_record["finished"] and wide_record["measured"] == 2, wide_record
    assert wide_record["unmeasured"] == [], wide_record
    rows = ado.measurements(space_id)
    by_length = {int(r["model_max_length"]): r for r in rows}
    assert sorted(by_length) == [SHORT, TRAINS], rows
    if SHORT in before:
        assert rows == walked_rows  # nothing measured a second time
    else:
        assert same_row(by_length[TRAINS], before[TRAINS]), (by_length[TRAINS], before[TRAINS])
    loser, fastest = by_length[SHORT], by_length[TRAINS]
    print({k: v for k, v in loser.items() if k.startswith(("raced", "dataset", "warmup"))})
    assert "raced_behind_percent" not in fastest or fastest["raced_behind_percent"] in ("", "nan")
    assert float(loser["is_valid"]) == 1 and float(loser["raced_behind_percent"]) > 0, loser
    assert float(loser["raced_saved_seconds"]) >= 0

    def bounds(row: dict[str, str]) -> tuple[float, float]:
        figure = float(row["dataset_tokens_per_second"])
        half = figure * float(row["dataset_tokens_per_second_ci95_percent"]) / 100
        return figure - half, figure + half

    # the trainer judged the same steps' interval; the row's window ends a step's end apart
    assert bounds(loser)[1] < bounds(fastest)[0] * 1.01, (loser, fastest)
    trace = tmp_path / "raced-trace.yaml"
    ado.run("show", "trace", "operation", measured_by, "-o", "yaml", "--output-file", str(trace))
    notes = [
        note
        for found in walk_yaml(yaml.safe_load(trace.read_text()))
        if isinstance(found, dict) and isinstance(found.get("notes"), list)
        for note in found["notes"]
        if "stopped once it could not win" in str(note)
    ]
    # the row's metadata, as the request and as its result: one note
    assert len(set(notes)) == 1 and f"model_max_length {TRAINS}" in notes[0], notes
    return rows


def same_row(row: dict[str, str], was: dict[str, str]) -> bool:
    """`row` is `was` as ado's table shows it once another row stands beside it: every cell the
    same string but the table's row number (the column named ""), and a column only the other
    row has (its racing figures) empty."""
    return {k: v for k, v in row.items() if k and (k in was or v)} == {
        k: v for k, v in was.items() if k
    }


def walk_yaml(node: object) -> Iterator[object]:
    """Every node of a parsed YAML document, depth first."""
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from walk_yaml(child)


NARROW = 10.0
"""A 95 % interval (in %) under which the row measured at TRAINS rules SHORT out whatever the
calibration: SHORT's upper bound would have to reach 0.97 of TRAINS's figure (0.17 seen)."""


def reason_figures(reason: str) -> tuple[float, ...]:
    """(predicted, ± spread, the measured fastest's figure, the margin below it) of a guided
    walk's reason: "predicted 727 ± 1,134 tokens/s, below the measured fastest's 2,502 - 188"."""
    found = re.fullmatch(
        r"predicted ([\d,.]+) ± ([\d,.]+) tokens/s, below the measured fastest's ([\d,.]+) - "
        r"([\d,.]+)",
        reason,
    )
    assert found, reason
    return tuple(float(g.replace(",", "")) for g in found.groups())


def kill_during_first_training(ado: AdoCLI, operation: Path, out: Path) -> list[str]:
    """`ado create operation`, SIGKILLed as soon as a trainer runs (a process naming the
    actuator's output directory `out`); returns the trainers and launchers still running
    120 s later (none, when every promise held). Ray's own processes of the killed `ado` are
    stopped afterwards, whatever became of them."""
    proc = subprocess.Popen(
        [ado.executable, "create", "operation", "-f", str(operation)],
        env=ado.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    family: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 600
        while not leftover_processes(out) and time.monotonic() < deadline:
            assert proc.poll() is None, "the guided walk ended before its first training ran"
            time.sleep(0.2)
        family = psutil.Process(proc.pid).children(recursive=True)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 120
    while leftover_processes(out) and time.monotonic() < deadline:
        time.sleep(1)
    left = leftover_processes(out)
    for process in family:
        with contextlib.suppress(psutil.Error):
            process.kill()
    return left


def full_walk_names_the_same_fastest(
    ado: AdoCLI,
    tmp_path: Path,
    space_id: str,
    config_id: str,
    guided_rows: list[dict[str, str]],
    records: Path,
    record: dict,
) -> None:
    """The full walk of the guided walk's space: both rows replayed (the racing walk measured
    what the guided walk left); the answers name TRAINS fastest; the plot lists what the guided
    walk left."""
    full = yaml.safe_load((REPO / "examples" / "local-cpu" / "operation.yaml").read_text())
    full |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    ado.create("operation", write_yaml(tmp_path / "full.yaml", full))
    rows = {int(r["model_max_length"]): r for r in ado.measurements(space_id)}
    assert sorted(rows) == [SHORT, TRAINS], rows
    # replayed, not measured again: the same figure
    figure = "dataset_tokens_per_second"
    guided = {int(r["model_max_length"]): r[figure] for r in guided_rows}
    assert {n: rows[n][figure] for n in (SHORT, TRAINS)} == guided
    # what the answers read: the row left did not train (its loss), the one measured did
    assert float(rows[SHORT]["train_loss_finite"]) == 0, rows[SHORT]
    assert float(rows[TRAINS]["train_loss_finite"]) == 1, rows[TRAINS]
    plotted = subprocess.run(
        [
            str(Path(sys.executable).with_name("sfttrainer_plot")),
            space_id,
            "-o",
            str(tmp_path / "plot"),
        ],
        env={**ado.env, "SFTTRAINER_GUIDED_RECORDS": str(records)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plotted.returncode == 0, plotted.stderr + plotted.stdout
    print(plotted.stdout)  # for the record only (the how-to's output)
    assert f"Fastest valid: 0 GPUs (CPU), sequence length {TRAINS}, batch 1: " in plotted.stdout
    if record["unmeasured"]:
        assert "Left unmeasured by the guided walk: 1 configuration\n" in plotted.stdout
        assert "GPU-hours (predicted) on 1 configuration it left unmeasured" in plotted.stdout
        assert f"batch 1, sequence length {SHORT}, CPU:\n    predicted " in plotted.stdout
