"""The vision datasets load as HF datasets and go through fms-hf-tuning 3.2.2's vision path.

No hub access: granite-vision-3.2-2b cannot be loaded, so a processor with its image settings
(LlavaNextImageProcessor, 384-pixel tiles, 14-pixel patches, its grid pinpoints, "full"
feature strategy) and a locally trained byte-level BPE tokenizer in a GPT2TokenizerFast (the
class granite's processor has, which selects fms's "first image only" branch) stands in for
it. With that processor, fms's own data preparation (process_dataargs) and VisionDataCollator
run on a small generated file, and the image-token cost the generator documents is checked
against transformers' LLaVA-Next expansion.
"""

from __future__ import annotations

import os

import pytest
from tiny_vision_model import llava_next_processor
from typer.testing import CliRunner

from ado_actuators.sfttrainer.catalog import datasets, model_shapes
from ado_actuators.sfttrainer.cli import generate_dataset_vision as gen
from ado_actuators.sfttrainer.cli import vision_data
from ado_actuators.sfttrainer.plan.model.vision import VisionShape

hf_datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")

SQUARE, TALL = datasets.VISION_DATASET_IDS
MIN_TOKENS = 1500
ENTRIES = 6


def _granite() -> VisionShape:
    found = model_shapes.shipped_shape("granite-vision-3.2-2b")
    shape = VisionShape.of(found.config) if found else None
    assert shape is not None
    return shape


GRANITE = _granite()
"""granite-vision-3.2-2b's image side from its shipped config.json: the processor below is built
with its settings, and the count the preview uses (plan/model/vision.py) is checked against it."""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("vision")
    paths = {}
    for dataset_id, entries in ((SQUARE, ENTRIES), (TALL, 2)):
        result = CliRunner().invoke(
            gen.app,
            [
                "--dataset-id",
                dataset_id,
                "--output-dir",
                str(out),
                "--entries",
                str(entries),
                "--min-tokens",
                str(MIN_TOKENS),
            ],
        )
        assert result.exit_code == 0, result.output
        paths[dataset_id] = str(out / datasets.dataset_filename(dataset_id))
    return paths


@pytest.fixture(scope="module")
def bpe():
    """Byte-level BPE (granite's family) trained on the generator's own text (other seed):
    the vocabulary then holds whole words, the hardest case for a words-per-token bound."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [
        m[1]["content"][0]["text"]
        for m in vision_data.iter_messages(entries=20, min_tokens=3000, seed=777)
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4000,
        special_tokens=["<|end_of_text|>", "<image>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    return tok


@pytest.fixture(scope="module")
def processor(bpe):
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.GPT2TokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|end_of_text|>",
        pad_token="<|end_of_text|>",
        bos_token="<|end_of_text|>",
        unk_token="<|end_of_text|>",
        additional_special_tokens=["<image>"],
        model_max_length=131072,
    )
    return llava_next_processor(
        tokenizer,
        tile=GRANITE.image_size,
        patch=GRANITE.patch_size,
        pinpoints=[list(p) for p in GRANITE.pinpoints],
    )


def test_load_dataset_decodes_one_image_per_entry(files, tmp_path):
    for dataset_id, path in files.items():
        shape = datasets.get_shape(dataset_id)
        ds = hf_datasets.load_dataset(
            "parquet", data_files=path, split="train", cache_dir=str(tmp_path / "cache")
        )
        assert ds.column_names == [shape.text_field, shape.image_field]
        assert ds.features[shape.image_field] == hf_datasets.List(hf_datasets.Image())
        # the storage is the Image feature's {bytes, path}: undecoded, then cast back
        raw = ds.cast_column(shape.image_field, hf_datasets.List(hf_datasets.Image(decode=False)))
        assert {row[0]["path"] for row in raw[shape.image_field]} == {None}
        assert len({row[0]["bytes"] for row in raw[shape.image_field]}) == 1
        decoded = raw.cast_column(shape.image_field, hf_datasets.List(hf_datasets.Image()))
        for row in decoded:
            [image] = row[shape.image_field]
            assert image.size == (shape.image_width, shape.image_height)
            assert image.convert("RGB").mode == "RGB"
            user, assistant = row[shape.text_field]
            assert (user["role"], assistant["role"]) == ("user", "assistant")
            assert (
                sum(c["type"] == "image" for m in row[shape.text_field] for c in m["content"]) == 1
            )


def test_answers_meet_the_token_minimum(files, bpe):
    import pyarrow.parquet as pq

    ratios = []
    for row in pq.read_table(files[SQUARE]).to_pylist():
        answer = row["messages"][1]["content"][0]["text"]
        tokens = len(bpe.encode(answer).ids)
        assert tokens >= MIN_TOKENS
        ratios.append(tokens / len(answer.split()))
    # a vocabulary of whole words brings tokens/word close to 1, never below
    assert 1.0 <= min(ratios) < 1.3, ratios


@pytest.mark.slow  # the module's LLaVA-NeXT processor takes ~12 s to build
def test_image_tokens_match_llava_next(processor):
    from PIL import Image

    for width, height in ((384, 384), (384, 768), (768, 384), (500, 300)):
        # transformers' own count, then the count in an actual processed input
        expected = GRANITE.image_tokens(height, width)
        assert processor._get_number_of_features(height, width, 384, 384) == expected
        batch = processor(
            text=["<image>\nhi"], images=[Image.new("RGB", (width, height))], return_tensors="pt"
        )
        image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
        assert int((batch["input_ids"] == image_id).sum()) == expected


def _data_args(path: str, **extra):
    from tuning.config import configs

    return configs.DataArguments(
        training_data_path=path,
        dataset_text_field="messages",
        dataset_image_field="images",
        **extra,
    )


def _train_args(tmp_path):
    from tuning.config import configs

    return configs.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_seq_length=4096, use_cpu=True, report_to="none"
    )


@pytest.mark.slow  # the module's LLaVA-NeXT processor takes ~12 s to build
def test_fms_hf_tuning_prepares_and_collates(files, processor, tmp_path):
    pytest.importorskip("tuning")
    from tuning.data.collators import VisionDataCollator
    from tuning.data.setup_dataprocessor import process_dataargs

    args = _data_args(files[SQUARE], dataset_conversation_field="messages")
    train, _, text_field, collator, _, dataset_kwargs = process_dataargs(
        args, processor.tokenizer, _train_args(tmp_path), processor=processor
    )
    assert isinstance(collator, VisionDataCollator)
    assert dataset_kwargs == {"skip_prepare_dataset": True}
    assert (text_field, len(train)) == ("messages", ENTRIES)
    assert "<image>" in train[0]["messages"]
    batch = collator([train[i] for i in range(2)])
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    image_tokens = (batch["input_ids"] == image_id).sum(dim=1).tolist()
    assert image_tokens == [GRANITE.image_tokens(384, 384)] * 2
    assert batch["pixel_values"].shape[0] == 2  # one image per entry
    assert int((batch["labels"] == image_id).sum()) == 0
    for i in range(2):
        assert int(batch["attention_mask"][i].sum()) >= MIN_TOKENS + image_tokens[i]


@pytest.mark.xfail(
    reason="fms-hf-tuning 3.2.2 auto-detects the `messages` column only when a row is a dict; "
    "datasets 4 hands map() a LazyRow, so the actuator must pass "
    "--dataset_conversation_field messages (xpass: a release fixed it)",
    raises=KeyError,  # fms's wrapper around the template error: 'str object' has no 'role'
    strict=False,
)
@pytest.mark.slow  # the module's LLaVA-NeXT processor takes ~12 s to build
def test_fms_hf_tuning_without_conversation_field(files, processor, tmp_path, monkeypatch):
    pytest.importorskip("tuning")
    from tuning.data.setup_dataprocessor import process_dataargs

    # fms maps with num_proc = os.cpu_count(): a pool forked from this threaded test process,
    # whose teardown after the expected error once hung on a worker for the whole 900 s
    # timeout (a fresh-clone CI run, 2026-11-25). One process raises the same error in place.
    monkeypatch.setattr(os, "cpu_count", lambda: 1)

    process_dataargs(
        _data_args(files[SQUARE]),
        processor.tokenizer,
        _train_args(tmp_path),
        processor=processor,
    )
