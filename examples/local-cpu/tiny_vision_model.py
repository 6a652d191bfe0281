"""A tiny random LLaVA-NeXT (granite-vision's architecture) with its processor, saved locally.

granite-vision-3.2-2b is a `llava_next` model whose processor is a LlavaNextProcessor over a
GPT2TokenizerFast (the pairing that selects fms-hf-tuning's "first image only" branch) with an
`<image>` token and the "full" feature strategy. This keeps all of that and shrinks the sizes:
a 2-layer SigLIP tower (granite-vision's: no CLS token, which "full" would
keep) on 32-pixel tiles of 8-pixel patches (16 image tokens a tile), the tiny
demo Llama's text side and byte-level BPE (examples/local-cpu/tiny_model.py) plus `<image>`.
"""

from __future__ import annotations

from pathlib import Path

from tiny_model import SPECIAL_TOKENS, build_tokenizer, tiny_llama_config

IMAGE_TOKEN = "<image>"
TILE = 32
PATCH = 8
PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64]]
CHAT_TEMPLATE = (  # granite-vision's renders {"type": "image"} as "<image>" likewise
    "{%- for message in messages -%}{{- '<|' + message['role'] + '|>\n' -}}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{- '<image>\n' -}}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] + '\n' -}}{%- endif -%}"
    "{%- endfor -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"
)


def llava_next_processor(tokenizer, *, tile: int, patch: int, pinpoints: list[list[int]]):
    """A LlavaNextProcessor as granite-vision's is configured (its chat template, image mean
    and std, bicubic resize, padding, "full" features, no CLS token) over `tokenizer` (a
    GPT2TokenizerFast with IMAGE_TOKEN), at tiles of `tile` pixels in patches of `patch`."""
    import transformers

    tokenizer.chat_template = CHAT_TEMPLATE
    image_processor = transformers.LlavaNextImageProcessor(
        size={"shortest_edge": tile},
        crop_size={"height": tile, "width": tile},
        image_grid_pinpoints=pinpoints,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        do_pad=True,
        resample=3,
    )
    return transformers.LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        patch_size=patch,
        vision_feature_select_strategy="full",
        num_additional_image_tokens=0,
        image_token=IMAGE_TOKEN,
    )


def build_processor(out_dir: Path):
    """The tiny model's processor, saved in `out_dir` (the tokenizer trained there first)."""
    import transformers

    trained = build_tokenizer(out_dir)
    tokenizer = transformers.GPT2TokenizerFast(
        tokenizer_object=trained.backend_tokenizer,
        additional_special_tokens=[IMAGE_TOKEN],
        model_max_length=131072,  # a vision sample is not cut to the row's length
        **SPECIAL_TOKENS,
    )
    processor = llava_next_processor(tokenizer, tile=TILE, patch=PATCH, pinpoints=PINPOINTS)
    processor.save_pretrained(out_dir)
    return processor


def build_tiny_vision_model(out_dir: Path, *, seed: int = 0) -> Path:
    """Writes config, weights and processor of a ~200k-parameter LLaVA-NeXT to `out_dir`."""
    import torch
    import transformers

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_processor(out_dir).tokenizer
    text = tiny_llama_config(tokenizer, positions=4096)  # samples are not cut
    vision = transformers.SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=TILE,
        patch_size=PATCH,
    )
    config = transformers.LlavaNextConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = transformers.LlavaNextForConditionalGeneration(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir
