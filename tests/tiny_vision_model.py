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

from tiny_model import SPECIAL_TOKENS, build_tokenizer

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


def build_processor(out_dir: Path):
    """The LlavaNextProcessor saved in `out_dir` (the tokenizer trained there first)."""
    import transformers

    trained = build_tokenizer(out_dir)
    tokenizer = transformers.GPT2TokenizerFast(
        tokenizer_object=trained.backend_tokenizer,
        additional_special_tokens=[IMAGE_TOKEN],
        model_max_length=131072,  # a vision sample is not cut to the row's length
        **SPECIAL_TOKENS,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    image_processor = transformers.LlavaNextImageProcessor(
        size={"shortest_edge": TILE},
        crop_size={"height": TILE, "width": TILE},
        image_grid_pinpoints=PINPOINTS,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        do_pad=True,
    )
    processor = transformers.LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        patch_size=PATCH,
        vision_feature_select_strategy="full",
        num_additional_image_tokens=0,
        image_token=IMAGE_TOKEN,
    )
    processor.save_pretrained(out_dir)
    return processor


def build_tiny_vision_model(out_dir: Path, *, seed: int = 0) -> Path:
    """Writes config, weights and processor of a ~200k-parameter LLaVA-NeXT to `out_dir`."""
    import torch
    import transformers

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_processor(out_dir).tokenizer
    text = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
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
