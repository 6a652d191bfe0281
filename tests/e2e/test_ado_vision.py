"""A vision-language model measured as a user measures one: the real `ado` CLI, a real local Ray,
fms-hf-tuning 3.2.2's vision path training a tiny LLaVA-NeXT on CPU (examples/local-cpu/tiny_vision_model.py,
granite-vision's architecture and processor at toy sizes) on a dataset written by the shipped
`sfttrainer_generate_dataset_vision`."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ado_cli import AdoCLI, generate_vision_dataset
from tiny_vision_model import build_tiny_vision_model

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.contract.trainer_io import ModelParameters
from ado_actuators.sfttrainer.metrics.flops import flops_per_tile, flops_per_token

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
DATASET = datasets.VISION_DATASET_IDS[0]  # one 384×384 picture a sample
BATCH, STEPS = 2, 3
ENTRIES = BATCH * STEPS
"""One epoch exactly: every entry is trained once, whatever order the sampler draws them in, so
the row's tokens are the dataset's."""


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_vision_row_counts_the_text_and_image_tokens_the_processor_made(tmp_path):
    home = tmp_path / "ado-home"
    home.mkdir()
    ado = AdoCLI(
        home=home,
        extra_env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(home / "hf")},
    )
    model = build_tiny_vision_model(tmp_path / "tiny-granite-vision")
    data = tmp_path / "data"
    generate_vision_dataset(data, DATASET, ENTRIES)
    parameters = {
        "data_directory": str(data),
        "hf_home": str(tmp_path / "hf"),
        "output_dir": str(tmp_path / "out"),
        "model_map": {"tiny-granite-vision": {"Vanilla": str(model)}},
    }
    config_id = ado.create(
        "actuatorconfiguration",
        write_yaml(
            tmp_path / "ac.yaml", {"actuatorIdentifier": "SFTTrainer", "parameters": parameters}
        ),
    )
    space = demo_space()
    space_id = ado.create("space", write_yaml(tmp_path / "space.yaml", space), "--new-sample-store")
    operation = yaml.safe_load((REPO / "examples" / "local-cpu" / "operation.yaml").read_text())
    operation |= {"spaces": [space_id], "actuatorConfigurationIdentifiers": [config_id]}
    operation_id = ado.create("operation", write_yaml(tmp_path / "op.yaml", operation))
    [row] = ado.measurements(space_id)
    assert float(row["is_valid"]) == 1, row
    trained = float(row["dataset_tokens_per_second"]) * float(row["train_runtime"])
    counted = tokens_of(model, data / datasets.dataset_filename(DATASET))
    text, images = counted.text, counted.images
    # both counted: every sample's text (whole, far past 64 tokens) and its image's tokens
    assert round(trained) == text + images, (trained, text, images)
    assert text > ENTRIES * 64
    # the row's own account: how many of its tokens were image tokens, and that the columns
    # the vision collator reads were kept (the spec's remove_unused_columns default drops them)
    trace = tmp_path / "trace.yaml"
    ado.run("show", "trace", "operation", operation_id, "-o", "yaml", "--output-file", str(trace))
    [metadata] = {
        json.dumps(found, sort_keys=True)
        for found in walk_yaml(yaml.safe_load(trace.read_text()))
        if isinstance(found, dict) and "image_tokens" in found
    }
    metadata = json.loads(metadata)
    assert metadata["image_tokens"] == images
    notes = "\n".join(metadata["notes"])
    assert f"{images:,} of the {text + images:,} in the measured window" in notes, notes
    assert "trained with remove_unused_columns=False" in notes, notes
    # its FLOPs: the language model's per token, and the tower's per tile the processor cut
    # each picture into (one epoch: every entry once)
    assert metadata["image_tiles"] == counted.tiles
    parameters = ModelParameters.model_validate(metadata["model_parameters"])
    assert parameters.image_tower is not None and parameters.image_tower.tile_positions == 16
    language = flops_per_token(parameters, counted.squares / (text + images))
    assert language is not None
    assert metadata["model_flops_per_token"] == pytest.approx(
        language + flops_per_tile(parameters.image_tower) * counted.tiles / (text + images)
    )


def demo_space() -> dict:
    """`make vision-demo`'s space (examples/local-cpu/space-vision.yaml), ended by steps, not
    by the clock: one epoch exactly."""
    space = yaml.safe_load((REPO / "examples" / "local-cpu" / "space-vision.yaml").read_text())
    [experiment] = space["experiments"]
    fixed = {p["property"]["identifier"]: p["value"] for p in experiment["parameterization"]}
    assert fixed["dataset_id"] == DATASET
    assert fixed["fms_hf_tuning_version"] == "3.2.2"  # 2.8.2 was the first with a vision path
    for clock in ("stop_after_seconds", "num_train_epochs"):
        fixed.pop(clock)
    experiment["parameterization"] = [
        {"property": {"identifier": k}, "value": v}
        for k, v in (fixed | {"max_steps": STEPS}).items()
    ]
    batch = next(d for d in space["entitySpace"] if d["identifier"] == "batch_size")
    assert batch["propertyDomain"]["values"] == [BATCH]
    return space


def walk_yaml(node: object) -> Iterator[object]:
    """Every node of a parsed YAML document, depth first."""
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from walk_yaml(child)


@dataclasses.dataclass
class Counted:
    """What the model's own processor makes of a dataset's samples."""

    text: int = 0  # text tokens
    images: int = 0  # image tokens
    tiles: int = 0  # the tiles of each picture (pixel_values' second dimension, one image)
    squares: int = 0  # the sum of each sample's length squared (what attention costs)


def tokens_of(model: Path, dataset: Path) -> Counted:
    """The text and image tokens, tiles and squared lengths of every sample of `dataset`,
    counted apart from the product: the model's own processor on each sample's chat-templated
    text and its picture, as fms-hf-tuning's vision collator hands them to it (no max_length:
    nothing cut)."""
    import pyarrow.parquet as pq
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model)
    image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    counted = Counted()
    for sample in pq.read_table(dataset).to_pylist():
        [picture] = sample["images"]
        rendered = processor.apply_chat_template(sample["messages"], tokenize=False)
        batch = processor(
            text=[rendered],
            images=[Image.open(io.BytesIO(picture["bytes"])).convert("RGB")],
            return_tensors="pt",
        )
        real = int(batch["attention_mask"].sum())
        image = int((batch["input_ids"] == image_id).sum())
        counted.text, counted.images = counted.text + real - image, counted.images + image
        counted.tiles += int(batch["pixel_values"].shape[1])
        counted.squares += real * real
    return counted
