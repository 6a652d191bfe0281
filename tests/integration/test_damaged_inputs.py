"""Inputs damaged the way shared filesystems damage them, through a real measurement:
the reason's first line names the file (and the line) and the fix."""

from __future__ import annotations

import shutil

import pytest

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli.generate_dataset_text import generate
from ado_actuators.sfttrainer.contract.outcomes import Failed
from ado_actuators.sfttrainer.engine.measurement import measure
from ado_actuators.sfttrainer.execute.environment import installed_fms_hf_tuning

pytestmark = pytest.mark.slow
DATASET = "news-chars-512-entries-4096"
ENTRIES = 24


@pytest.fixture
def setup(tmp_path, tiny_model_dir):
    data = tmp_path / "data"
    path = data / datasets.dataset_filename(DATASET)
    generate(path, datasets.get_shape(DATASET), entries=ENTRIES, progress=False)
    params = SFTTrainerParameters(
        data_directory=str(data),
        hf_home=str(tmp_path / "hf"),
        output_dir=str(tmp_path / "out"),
        model_map={"tiny": {"Vanilla": str(tiny_model_dir)}},
        stall_timeout_seconds=120,
    )
    return params, path


def run(params, **overrides):
    values = {
        "model_name": "tiny",
        "model_max_length": 64,
        "batch_size": 2,
        "number_gpus": 0,
        "dataset_id": DATASET,
        "max_steps": -1,
        "gradient_accumulation_steps": 1,
        "torch_dtype": "float32",
        "fms_hf_tuning_version": installed_fms_hf_tuning(),
        **overrides,
    }
    return measure(values, "finetune_full_benchmark-v1.0.0", params, label="damaged")


def damage_line(path, number):
    lines = path.read_text().splitlines()
    lines[number - 1] = lines[number - 1][: len(lines[number - 1]) // 2]  # a write cut short
    path.write_text("\n".join(lines) + "\n")


def test_malformed_line_read_by_the_trainer_is_named(setup):
    params, path = setup
    damage_line(path, 17)
    outcome = run(params)  # max_steps -1: the trainer reads the user's file itself
    assert isinstance(outcome, Failed)
    first, *rest = outcome.reason.splitlines()
    assert f"dataset {path}: line 17 does not parse as a JSON object" in first, outcome.reason
    assert not [line for line in rest if "[DEBUG]" in line or "AddedToken" in line], outcome.reason


def test_malformed_line_among_the_entries_copied_is_named_before_launch(setup):
    params, path = setup
    damage_line(path, 3)
    outcome = run(params, max_steps=2)  # 4 entries are copied for the trainer: line 3 among them
    assert isinstance(outcome, Failed)
    assert outcome.reason.startswith(f"dataset {path}: line 3 does not parse as a JSON object")


def test_truncated_weights_file_is_named(setup, tiny_model_dir, tmp_path):
    params, _ = setup
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    damaged = params.model_copy(update={"model_map": {"tiny": {"Vanilla": str(model)}}})
    outcome = run(damaged, max_steps=1)
    assert isinstance(outcome, Failed)
    first = outcome.reason.splitlines()[0]
    assert f"the weights file {weights} cannot be read" in first, outcome.reason


def test_model_directory_without_its_tokenizer_is_named(setup, tiny_model_dir, tmp_path):
    params, _ = setup
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    for tokenizer_file in model.glob("tokenizer*"):
        tokenizer_file.unlink()  # a copy that stopped before the tokenizer's files
    damaged = params.model_copy(update={"model_map": {"tiny": {"Vanilla": str(model)}}})
    outcome = run(damaged, max_steps=1)
    assert isinstance(outcome, Failed)
    first = outcome.reason.splitlines()[0]
    assert f"the model directory {model} on " in first and "has no tokenizer file" in first, first


@pytest.mark.parametrize(
    "max_steps", [-1, 1]
)  # the trainer reads it / its first entries are copied
def test_empty_dataset_file_is_named(setup, max_steps):
    params, path = setup
    path.write_bytes(b"")  # created, never written: what an interrupted copy leaves
    outcome = run(params, max_steps=max_steps)
    assert isinstance(outcome, Failed)
    first = outcome.reason.splitlines()[0]
    assert f"dataset {path} " in first and ("is empty" in first or "has no entries" in first), first


@pytest.mark.parametrize("setting", ["hf_home", "output_dir", "aim_db"])
def test_directory_setting_that_is_a_file_is_named(setup, tmp_path, setting):
    """A stray file where a directory should be (a copy or sync gone wrong): without the check,
    hf_home failed deep in the trainer (NotADirectoryError on .../datasets) and aim_db lost
    the run silently."""
    params, _ = setup
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    outcome = run(params.model_copy(update={setting: str(blocker)}), max_steps=1)
    assert isinstance(outcome, Failed)
    first = outcome.reason.splitlines()[0]
    assert first.startswith(f"{setting} {blocker} cannot be written on "), first
    assert f"set {setting} to a directory every node can write" in first, first
