"""Rows of the synthetic vision datasets: one drawn image, chat messages, the parquet schema.

Column layout (what fms-hf-tuning 3.2.2 consumes with `--dataset_text_field messages
--dataset_image_field images`, see the generator's module docstring for the functions read):

- `messages`: list<struct<role, content: list<struct<type, text>>>>, OpenAI-style chat:
  a `user` turn `[{"type": "image"}, {"type": "text", "text": <instruction>}]` and an
  `assistant` turn `[{"type": "text", "text": <response>}]` (`text` is null on the image
  item). The chat template turns `{"type": "image"}` into the processor's image token.
- `images`: list<struct<bytes: binary, path: string>> -- the HF `datasets` Image feature's
  storage (declared in the parquet schema's `huggingface` metadata, so `load_dataset`
  decodes it to PIL) -- holding exactly ONE PNG per entry, the same picture in every entry.
  One image per entry matches the one `{"type": "image"}` placeholder: Granite/LLaVA-1.5
  processors only ever use the first image, and a second placeholder would make the
  processor's image-token count disagree with the images given.

Token guarantee (at least `min_tokens` per entry "tokenized with granite-vision-3.2-2b"):
the assistant text alone has at least `min_tokens` whitespace-separated words, each holding a
letter or digit, so any subword tokenizer yields at least that many tokens (argument in
news_text.response_words); this holds before a single image token is counted. The
instruction, chat-template markup and the image tokens are margin on top; for
granite-vision-3.2-2b (LLaVA-Next "anyres", counted by plan/model/vision.py from its config.json)
the image adds 1485 tokens at 384x384 and 2241 at 384x768.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator

from ado_actuators.sfttrainer.cli import news_text

# ----------------------------------------------------------------------------------------
# The picture: a vertical gradient sky, a horizon, a sun, hills, a house and a few seeded
# shapes -- flat colours, so the PNG stays small (~10 KB) and decodes quickly.
# ----------------------------------------------------------------------------------------


def draw_image(width: int, height: int, seed: int = 0) -> bytes:
    """A deterministic RGB PNG of `width` x `height` pixels (same arguments, same bytes)."""
    from PIL import Image, ImageDraw

    rng = random.Random(f"sfttrainer-vision-image:{seed}:{width}x{height}")
    image = Image.new("RGB", (width, height))
    draw = ImageDraw.Draw(image)
    top, bottom = (rng.randint(20, 90), rng.randint(90, 160), 230), (250, 215, 170)
    horizon = int(height * rng.uniform(0.55, 0.7))
    for y in range(horizon):
        t = y / max(1, horizon - 1)
        draw.line(
            [(0, y), (width, y)],
            fill=tuple(round(a + (b - a) * t) for a, b in zip(top, bottom, strict=True)),
        )
    for y in range(horizon, height):
        t = (y - horizon) / max(1, height - horizon)
        draw.line([(0, y), (width, y)], fill=(40, round(150 - 60 * t), 50))
    s = min(width, height)
    sx, sy, sr = rng.randint(s // 8, width - s // 8), rng.randint(s // 10, horizon // 2), s // 10
    draw.ellipse((sx - sr, sy - sr, sx + sr, sy + sr), fill=(255, 220, 60))
    for _ in range(3):  # hills
        cx, r = rng.randint(0, width), rng.randint(s // 4, s // 2)
        draw.ellipse(
            (cx - r, horizon - r // 2, cx + r, horizon + r // 2),
            fill=(30, rng.randint(100, 140), 40),
        )
    hx, hw = rng.randint(s // 10, width - s // 3), s // 4  # a house
    hy = horizon + (height - horizon) // 4
    draw.rectangle((hx, hy, hx + hw, hy + hw), fill=(200, 70, 60), outline=(60, 30, 20))
    draw.polygon(
        [(hx - hw // 8, hy), (hx + hw // 2, hy - hw // 2), (hx + hw + hw // 8, hy)],
        fill=(110, 50, 40),
    )
    draw.rectangle((hx + hw // 3, hy + hw // 2, hx + 2 * hw // 3, hy + hw), fill=(70, 40, 30))
    for _ in range(6):  # a few seeded shapes on top
        x0, y0 = rng.randrange(width), rng.randrange(height)
        d = rng.randint(s // 20, s // 8)
        colour = tuple(rng.randrange(256) for _ in range(3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x0 + d, y0 + d), fill=colour)
        else:
            draw.rectangle((x0, y0, x0 + d, y0 + d // 2), fill=colour)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=False, compress_level=9)
    return buffer.getvalue()


# ----------------------------------------------------------------------------------------
# Chat messages
# ----------------------------------------------------------------------------------------

_INSTRUCTIONS = (
    "Describe the picture in detail, then write a long news report it could illustrate.",
    "Look at the image and write a detailed wire story that could run beside it.",
    "Write a long feature article for which this picture would be the cover image.",
    "Describe what the image shows, then continue with a full local news report.",
    "Use the picture as a starting point for a detailed report on the week's news.",
    "Write a caption for the image, followed by a long article for the same page.",
)


def iter_messages(*, entries: int, min_tokens: int, seed: int = 0) -> Iterator[list[dict]]:
    """The `messages` of each entry, one at a time; entry i depends only on (seed, i,
    min_tokens), so a smaller --entries gives a prefix of the bigger file."""
    pool = news_text.sentence_pool(seed)
    for i in range(entries):
        rng = random.Random(f"sfttrainer-vision-entry:{seed}:{i}")
        instruction = rng.choice(_INSTRUCTIONS)
        # The guarantee: >= min_tokens words in the response alone (see module docstring).
        response = news_text.response_words(rng, pool, min_tokens)
        yield [
            {
                "role": "user",
                "content": [{"type": "image", "text": None}, {"type": "text", "text": instruction}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": response}]},
        ]


# ----------------------------------------------------------------------------------------
# Parquet schema
# ----------------------------------------------------------------------------------------

_STRING = {"dtype": "string", "_type": "Value"}
#: HF `datasets` features, in the JSON-list form every datasets release reads as "a list of".
HF_FEATURES = {
    "messages": [{"role": _STRING, "content": [{"type": _STRING, "text": _STRING}]}],
    "images": [{"_type": "Image"}],
}


def arrow_schema(text_field: str = "messages", image_field: str = "images"):
    import pyarrow as pa

    content = pa.list_(pa.struct([("type", pa.string()), ("text", pa.string())]))
    message = pa.struct([("role", pa.string()), ("content", content)])
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {text_field: HF_FEATURES["messages"], image_field: HF_FEATURES["images"]}
    return pa.schema(
        [(text_field, pa.list_(message)), (image_field, pa.list_(image))],
        metadata={"huggingface": json.dumps({"info": {"features": features}})},
    )
