"""The single declaration of dataset shapes (catalog/datasets.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ado_actuators.sfttrainer.catalog import datasets

SPEC_IDS = (
    "news-chars-512-entries-4096",
    "news-chars-1024-entries-4096",
    "news-chars-2048-entries-4096",
    "news-tokens-16384plus-entries-4096",
    "news-tokens-128kplus-entries-320",
    "vision-384x384-16384plus-entries-4096",
    "vision-384x768-16384plus-entries-4096",
)


# Ids earlier tools stored results under: accepted, so those stores stay usable.
EARLIER_IDS = (
    *(f"news-chars-{c}-entries-{e}" for c in (512, 1024, 2048) for e in (256, 1024)),
    "news-tokens-128kplus-entries-4096",
)


def test_ids_are_the_specs_and_the_earlier_tools():
    assert set(datasets.DATASET_IDS) == {*SPEC_IDS, *EARLIER_IDS}
    assert isinstance(datasets.DATASET_IDS, tuple)
    assert datasets.DEFAULT_DATASET_ID == "news-tokens-16384plus-entries-4096"
    assert datasets.DEFAULT_DATASET_ID in datasets.DATASET_IDS
    assert set(datasets.TEXT_DATASET_IDS) | set(datasets.VISION_DATASET_IDS) == set(
        datasets.DATASET_IDS
    )
    assert not set(datasets.TEXT_DATASET_IDS) & set(datasets.VISION_DATASET_IDS)


@pytest.mark.parametrize("dataset_id", (*SPEC_IDS, *EARLIER_IDS))
def test_shape_matches_what_its_id_says(dataset_id):
    shape = datasets.get_shape(dataset_id)
    assert shape.id == dataset_id
    assert shape.entries == int(dataset_id.rsplit("-", 1)[1])
    if m := re.fullmatch(r"news-chars-(\d+)-entries-\d+", dataset_id):
        assert (shape.kind, shape.length_unit, shape.chars) == ("text", "chars", int(m[1]))
        assert shape.min_tokens is None
    elif m := re.fullmatch(r"news-tokens-(\d+)(k?)plus-entries-\d+", dataset_id):
        expected = int(m[1]) * (1024 if m[2] else 1)
        assert (shape.kind, shape.length_unit, shape.min_tokens) == ("text", "tokens", expected)
        assert shape.chars is None
    else:
        m = re.fullmatch(r"vision-(\d+)x(\d+)-(\d+)plus-entries-\d+", dataset_id)
        assert m, dataset_id
        assert shape.kind == "vision"
        assert (shape.image_width, shape.image_height) == (int(m[1]), int(m[2]))
        assert shape.min_tokens == int(m[3])


def test_128k_is_binary_k():
    assert datasets.get_shape("news-tokens-128kplus-entries-320").min_tokens == 131072


def test_prompt_chars_is_the_specs_127():
    assert datasets.PROMPT_CHARS == 127


@pytest.mark.parametrize(
    ("dataset_id", "filename"),
    [
        ("news-tokens-16384plus-entries-4096", "news-tokens-16384plus-entries-4096.jsonl"),
        ("news-chars-512-entries-4096", "news-chars-512-entries-4096.jsonl"),
        ("vision-384x768-16384plus-entries-4096", "vision-384x768-16384plus-entries-4096.parquet"),
    ],
)
def test_dataset_filename(dataset_id, filename):
    assert datasets.dataset_filename(dataset_id) == filename
    assert datasets.dataset_path("/data/x/", dataset_id) == Path("/data/x") / filename


def test_unknown_id_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown dataset_id 'news-foo'.*news-chars-512"):
        datasets.dataset_filename("news-foo")
    with pytest.raises(ValueError):
        datasets.creation_command("news-foo", "/tmp/x")


def test_creation_command_text():
    path = "/data/fms-hf-tuning/artificial-dataset/news-chars-1024-entries-4096.jsonl"
    assert datasets.creation_command("news-chars-1024-entries-4096", path) == [
        "sfttrainer_generate_dataset_text",
        "--dataset-id",
        "news-chars-1024-entries-4096",
        "-o",
        path,
    ]


def test_creation_command_vision_is_the_specs():
    path = Path("/data/vision-384x768-16384plus-entries-4096.parquet")
    assert datasets.creation_command("vision-384x768-16384plus-entries-4096", path) == [
        "sfttrainer_generate_dataset_vision",
        "--image-width",
        "384",
        "--image-height",
        "768",
        "-o",
        str(path),
    ]


def test_text_generator_is_the_installed_script():
    import tomllib

    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    assert scripts[datasets.TEXT_GENERATOR] == (
        "ado_actuators.sfttrainer.cli.generate_dataset_text:main"
    )


def test_shapes_are_frozen():
    shape = datasets.get_shape(datasets.DEFAULT_DATASET_ID)
    with pytest.raises(AttributeError):
        shape.entries = 1  # type: ignore[misc]


def test_importing_the_catalog_is_light():
    code = (
        "import sys, ado_actuators.sfttrainer.catalog.datasets as d; "
        "heavy = {'typer', 'datasets', 'transformers', 'torch'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
