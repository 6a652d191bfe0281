"""Every synthetic dataset the SFTTrainer experiments accept (`dataset_id`), declared once.

Pure data plus tiny helpers: the actuator's entry point imports this module, so it must stay
free of heavy imports. The generators (`sfttrainer_generate_dataset_text`, and later
`sfttrainer_generate_dataset_vision`) read the shapes from here, and the actuator uses
`dataset_filename` / `creation_command` to find a dataset file under `data_directory` and to
tell the user how to create one that is missing.

Text shapes (JSON lines, one `{"output": "### Input: ...\\n\\n### Response: ..."}` per line):

- chars shapes: each entry is an instruction of exactly `PROMPT_CHARS` (127) characters and an
  article of exactly `chars` characters (the input), and a response of exactly `chars`
  characters -- the spec's "512 + 127 (prompt) + 512 characters".
- tokens shapes: each entry's response alone has at least `min_tokens` tokens under any
  subword tokenizer (see the generator for why), so the whole entry has more.

Vision shapes (parquet): entries of repeated copies of one `image_width` x `image_height`
image, at least `min_tokens` tokens with granite-vision-3.2-2b.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

#: Characters of the instruction that opens the input of every chars-shape entry.
PROMPT_CHARS = 127

TEXT_GENERATOR = "sfttrainer_generate_dataset_text"
VISION_GENERATOR = "sfttrainer_generate_dataset_vision"


@dataclasses.dataclass(frozen=True)
class DatasetShape:
    """What one `dataset_id` promises about its file."""

    id: str
    kind: Literal["text", "vision"]
    entries: int
    #: text only: "chars" (exact character counts) or "tokens" (minimum token count)
    length_unit: Literal["chars", "tokens"] | None = None
    #: chars shapes: characters of the article (input) and of the response, each
    chars: int | None = None
    #: tokens and vision shapes: minimum tokens per entry
    min_tokens: int | None = None
    #: vision only
    image_width: int | None = None
    image_height: int | None = None

    @property
    def suffix(self) -> str:
        return ".jsonl" if self.kind == "text" else ".parquet"

    @property
    def filename(self) -> str:
        return f"{self.id}{self.suffix}"

    @property
    def text_field(self) -> str:
        """The column the trainer reads text from when the entity names none."""
        return "output" if self.kind == "text" else "messages"

    @property
    def image_field(self) -> str | None:
        return None if self.kind == "text" else "images"

    @property
    def conversation_field(self) -> str | None:
        """Vision entries are chats; fms-hf-tuning 3.2 must be told the column (it cannot
        find it in the lazy rows datasets 4 hands it)."""
        return None if self.kind == "text" else "messages"


_SHAPES: tuple[DatasetShape, ...] = (
    DatasetShape("news-chars-512-entries-4096", "text", 4096, "chars", chars=512),
    DatasetShape("news-chars-1024-entries-4096", "text", 4096, "chars", chars=1024),
    DatasetShape("news-chars-2048-entries-4096", "text", 4096, "chars", chars=2048),
    DatasetShape("news-tokens-16384plus-entries-4096", "text", 4096, "tokens", min_tokens=16384),
    DatasetShape("news-tokens-128kplus-entries-320", "text", 320, "tokens", min_tokens=128 * 1024),
    # Smaller variants earlier tools stored results for; same shapes, fewer entries.
    *(
        DatasetShape(f"news-chars-{chars}-entries-{entries}", "text", entries, "chars", chars=chars)
        for chars in (512, 1024, 2048)
        for entries in (256, 1024)
    ),
    DatasetShape(
        "news-tokens-128kplus-entries-4096", "text", 4096, "tokens", min_tokens=128 * 1024
    ),
    DatasetShape(
        "vision-384x384-16384plus-entries-4096",
        "vision",
        4096,
        min_tokens=16384,
        image_width=384,
        image_height=384,
    ),
    DatasetShape(
        "vision-384x768-16384plus-entries-4096",
        "vision",
        4096,
        min_tokens=16384,
        image_width=384,
        image_height=768,
    ),
)

SHAPES: dict[str, DatasetShape] = {shape.id: shape for shape in _SHAPES}
DATASET_IDS: tuple[str, ...] = tuple(SHAPES)
TEXT_DATASET_IDS: tuple[str, ...] = tuple(s.id for s in _SHAPES if s.kind == "text")
VISION_DATASET_IDS: tuple[str, ...] = tuple(s.id for s in _SHAPES if s.kind == "vision")
DEFAULT_DATASET_ID = "news-tokens-16384plus-entries-4096"


def get_shape(dataset_id: str) -> DatasetShape:
    """The shape of `dataset_id`; ValueError naming the known ids if there is none."""
    try:
        return SHAPES[dataset_id]
    except KeyError:
        raise ValueError(
            f"unknown dataset_id {dataset_id!r}; use one of: {', '.join(DATASET_IDS)}"
        ) from None


def dataset_filename(dataset_id: str) -> str:
    """File name of `dataset_id` inside data_directory, e.g. `<id>.jsonl`."""
    return get_shape(dataset_id).filename


def dataset_path(data_directory: str | Path, dataset_id: str) -> Path:
    return Path(data_directory) / dataset_filename(dataset_id)


def creation_command(dataset_id: str, path: str | Path) -> list[str]:
    """The argv that creates the file of `dataset_id` at `path`."""
    shape = get_shape(dataset_id)
    if shape.kind == "vision":
        return [
            VISION_GENERATOR,
            "--image-width",
            str(shape.image_width),
            "--image-height",
            str(shape.image_height),
            "-o",
            str(path),
        ]
    return [TEXT_GENERATOR, "--dataset-id", shape.id, "-o", str(path)]
