"""`sfttrainer_generate_dataset_vision` on small sizes: layout, naming, determinism, errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_checks import one_line_error
from PIL import Image
from typer.testing import CliRunner

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli import generate_dataset_vision as gen
from ado_actuators.sfttrainer.cli import vision_data

SQUARE, TALL = datasets.VISION_DATASET_IDS  # 384x384, 384x768
SMALL = ("--entries", "3", "--min-tokens", "40")


def run(*args: str):
    return CliRunner().invoke(gen.app, list(args))


def make(path: Path, *args: str) -> Path:
    result = run("-o", str(path), *SMALL, *args)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("Wrote ") and str(path) in result.stderr
    return path


def rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def image_size(path: Path) -> tuple[int, int]:
    (image,) = rows(path)[0]["images"]
    return Image.open(io.BytesIO(image["bytes"])).size


def test_help():
    result = run("--help")
    assert result.exit_code == 0
    for option in (
        "--output",
        "-o",
        "--output-dir",
        "--image-width",
        "--image-height",
        "--dataset-id",
        "--entries",
        "--min-tokens",
        "--seed",
    ):
        assert option in result.stdout


def test_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(gen, "ROW_GROUP_ENTRIES", 2)
    path = make(tmp_path / "v.parquet", "--entries", "5")
    meta = pq.ParquetFile(path).metadata
    assert (meta.num_rows, meta.num_row_groups) == (5, 3)
    schema = pq.read_schema(path)
    assert (
        schema.names
        == ["messages", "images"]
        == [datasets.get_shape(SQUARE).text_field, datasets.get_shape(SQUARE).image_field]
    )
    features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert features["images"] == [{"_type": "Image"}]
    entries = rows(path)
    images = {image["bytes"] for entry in entries for image in entry["images"]}
    assert len(images) == 1 and all(len(e["images"]) == 1 for e in entries)
    assert all(e["images"][0]["path"] is None for e in entries)
    assert next(iter(images)).startswith(b"\x89PNG\r\n\x1a\n")
    for entry in entries:
        user, assistant = entry["messages"]
        assert user["role"] == "user" and assistant["role"] == "assistant"
        assert [c["type"] for c in user["content"]] == ["image", "text"]
        assert user["content"][0]["text"] is None and user["content"][1]["text"]
        [answer] = assistant["content"]
        assert answer["type"] == "text"
        words = answer["text"].split()
        assert len(words) >= 40
        assert all(any(ch.isalnum() for ch in word) for word in words)
    answers = [e["messages"][1]["content"][0]["text"] for e in entries]
    assert len(set(answers)) == 5


def test_deterministic_and_prefix(tmp_path):
    a = make(tmp_path / "a.parquet")
    b = make(tmp_path / "b.parquet")
    assert a.read_bytes() == b.read_bytes()
    other = make(tmp_path / "c.parquet", "--seed", "1")
    assert other.read_bytes() != a.read_bytes()
    assert rows(other)[0]["images"] != rows(a)[0]["images"]  # the seed also draws the image
    longer = make(tmp_path / "d.parquet", "--entries", "5")
    assert rows(longer)[:3] == rows(a)


def test_spec_command_and_catalog_creation_command(tmp_path):
    for dataset_id, size in ((SQUARE, (384, 384)), (TALL, (384, 768))):
        path = tmp_path / "out" / datasets.dataset_filename(dataset_id)
        argv = datasets.creation_command(dataset_id, path)
        assert argv[0] == "sfttrainer_generate_dataset_vision"
        result = run(*argv[1:], *SMALL)
        assert result.exit_code == 0, result.output
        assert dataset_id in result.stderr
        assert image_size(path) == size  # (width, height)


@pytest.mark.parametrize(
    ("args", "name", "size"),
    [
        (("--dataset-id", TALL), f"{TALL}.parquet", (384, 768)),
        (("--image-width", "384", "--image-height", "768"), f"{TALL}.parquet", (384, 768)),
        ((), f"{SQUARE}.parquet", (384, 384)),
    ],
)
def test_output_dir_names_the_file(tmp_path, args, name, size):
    result = run("--output-dir", str(tmp_path / "d"), *args, *SMALL)
    assert result.exit_code == 0, result.output
    assert [p.name for p in (tmp_path / "d").iterdir()] == [name]
    assert image_size(tmp_path / "d" / name) == size


def test_output_name_implies_dataset(tmp_path):
    path = make(tmp_path / f"{TALL}.parquet")
    assert image_size(path) == (384, 768)
    path = make(tmp_path / "mine.parquet")  # any other name: the default, 384x384
    assert image_size(path) == (384, 384)
    path = make(tmp_path / "x" / f"{TALL}.parquet", "--image-width", "384")
    assert image_size(path) == (384, 768)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--dataset-id", "nope", "-o", "x.parquet"), ("--dataset-id", "nope", SQUARE)),
        (
            ("--dataset-id", datasets.DEFAULT_DATASET_ID, "-o", "x.parquet"),
            ("text dataset", "sfttrainer_generate_dataset_text"),
        ),
        (("-o", f"{datasets.DEFAULT_DATASET_ID}.jsonl"), ("text dataset",)),
        (("--dataset-id", SQUARE, "-o", f"{TALL}.parquet"), ("-o/--output", TALL, SQUARE)),
        (
            ("--dataset-id", SQUARE, "--image-height", "768", "-o", "x.parquet"),
            ("--image-height 768", SQUARE),
        ),
        (("-o", f"{TALL}.parquet", "--image-width", "512"), ("--image-width 512", TALL)),
        (
            ("--image-width", "512", "--image-height", "512", "-o", "x.parquet"),
            ("512", "384x384", "384x768"),
        ),
        (("--image-width", "384", "-o", "x.parquet"), ("--image-height", "384x768")),
        (("--image-width", "0", "-o", "x.parquet"), ("--image-width 0",)),
        (("--entries", "0", "-o", "x.parquet"), ("--entries 0",)),
        (("--min-tokens", "-1", "-o", "x.parquet"), ("--min-tokens -1",)),
        (("-o", "x.parquet", "--output-dir", "."), ("--output-dir", "not both")),
        ((), ("no output given", SQUARE)),
        (("-o", "x.jsonl"), (".parquet",)),
    ],
)
def test_errors_are_one_line(tmp_path, monkeypatch, args, needles):
    monkeypatch.chdir(tmp_path)
    one_line_error(run(*args), *needles)
    assert list(tmp_path.iterdir()) == []


def test_directory_or_unwritable_output(tmp_path):
    one_line_error(run("-o", str(tmp_path)), "is a directory")
    blocker = tmp_path / "file"
    blocker.write_text("")
    one_line_error(run("-o", str(blocker / "v.parquet")), "cannot write", "-o/--output")


def test_atomic_write(tmp_path, monkeypatch):
    path = make(tmp_path / "v.parquet")
    before = path.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["v.parquet"]

    def broken(**kwargs):
        yield from []
        raise RuntimeError("boom")

    monkeypatch.setattr(vision_data, "iter_messages", broken)
    with pytest.raises(RuntimeError):
        gen.generate(path, datasets.get_shape(SQUARE), entries=3, progress=False)
    assert path.read_bytes() == before  # the old file is untouched, no temp file is left
    assert [p.name for p in tmp_path.iterdir()] == ["v.parquet"]


def test_image_is_deterministic_and_small():
    for width, height in ((384, 384), (384, 768), (50, 30)):
        data = vision_data.draw_image(width, height)
        assert data == vision_data.draw_image(width, height)
        image = Image.open(io.BytesIO(data))
        assert (image.size, image.mode) == ((width, height), "RGB")
        assert len(image.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 10
        assert len(data) < 64 * 1024
