"""Image tokens, tower and projector sizes of the catalogue's vision-language models
(plan/model/vision.py), counted by hand from LLaVA-NeXT's formula and checked against
transformers' own LlavaNextProcessor and model (offline, on the meta device)."""

from __future__ import annotations

from typing import Any

import pytest

from ado_actuators.sfttrainer.catalog import model_shapes
from ado_actuators.sfttrainer.plan.model.vision import VisionShape

GRANITE = "granite-vision-3.2-2b"
LLAVA = "llava-v1.6-mistral-7b"


def _config(name: str) -> dict[str, Any]:
    found = model_shapes.shipped_shape(name)
    assert found is not None
    return found.config


def _shape(name: str) -> VisionShape:
    shape = VisionShape.of(_config(name))
    assert shape is not None
    return shape


# Hand counts, (height, width) of the two vision datasets' images: 384x384 and 384 wide x 768 high.
# granite-vision: tile 384, patch 14 -> 27x27; SigLIP, no CLS; strategy "full".
#   384x384: pinpoint (384, 384), 1x1 tiles: 27*27 unpadded + 27 newlines + 27*27 base = 1485
#   768x384: pinpoint (768, 384), 2x1 tiles: 54*27 + 54 + 729 = 2241
# llava-v1.6-mistral: tile 336, patch 14 -> 24x24; CLIP's CLS; strategy "default" drops it.
#   384x384: pinpoint (672, 672) keeps all 147456 pixels: 48*48 + 48 + (576 + 1) - 1 = 2928
#   768x384: pinpoint (672, 336), no waste: 48*24 + 48 + 577 - 1 = 1776
HAND = [
    (GRANITE, 384, 384, 1485, 2),
    (GRANITE, 768, 384, 2241, 3),
    (LLAVA, 384, 384, 2928, 5),
    (LLAVA, 768, 384, 1776, 3),
]


@pytest.mark.parametrize(("name", "height", "width", "tokens", "tiles"), HAND)
def test_image_tokens_by_hand(name: str, height: int, width: int, tokens: int, tiles: int) -> None:
    shape = _shape(name)
    assert shape.image_tokens(height, width) == tokens
    assert shape.tiles(height, width) == tiles


def test_unpadding_removes_rows_of_a_wide_image() -> None:
    # llava at 336 high x 1008 wide -> pinpoint (336, 1008): 24 x 72 grid, no padding;
    # at 300 x 1008: the aspect is wider than the grid's, rows unpadded to round(300*72/1008)=21
    # -> padding (24 - 21) // 2 = 1 each side: 22 rows; 22*72 + 22 + 577 - 1 = 2182
    shape = _shape(LLAVA)
    assert shape.image_tokens(336, 1008) == 24 * 72 + 24 + 576
    assert shape.image_tokens(300, 1008) == 2182


def test_a_text_model_has_no_vision_shape() -> None:
    assert VisionShape.of(_config("granite-3.1-2b")) is None


def _processor(name: str) -> Any:
    """transformers' LlavaNextProcessor with the model's processor settings, without a
    tokenizer (only _get_number_of_features is called)."""
    processing = pytest.importorskip("transformers.models.llava_next.processing_llava_next")
    config = _config(name)
    processor = object.__new__(processing.LlavaNextProcessor)
    processor.image_processor = type(
        "Pinpoints", (), {"image_grid_pinpoints": config["image_grid_pinpoints"]}
    )()
    processor.patch_size = config["vision_config"]["patch_size"]
    processor.num_additional_image_tokens = int(_shape(name).cls_token)
    processor.vision_feature_select_strategy = config["vision_feature_select_strategy"]
    return processor


@pytest.mark.parametrize("name", [GRANITE, LLAVA])
@pytest.mark.parametrize("size", [(384, 384), (768, 384), (300, 1008), (1000, 200), (640, 480)])
def test_matches_transformers_processor(name: str, size: tuple[int, int]) -> None:
    processor, shape = _processor(name), _shape(name)
    tile = shape.image_size
    expected = processor._get_number_of_features(size[0], size[1], tile, tile)
    if processor.vision_feature_select_strategy == "default":
        expected -= 1  # as LlavaNextProcessor.__call__ does
    assert shape.image_tokens(*size) == expected


@pytest.mark.parametrize("name", [GRANITE, LLAVA])
def test_parameters_match_transformers_model(name: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = {k: v for k, v in _config(name).items() if k != "architectures"}
    with torch.device("meta"):
        model = transformers.LlavaNextForConditionalGeneration(
            transformers.LlavaNextConfig(**config)
        )
    shape = _shape(name)
    tower = sum(p.numel() for p in model.model.vision_tower.parameters())
    projector = sum(p.numel() for p in model.model.multi_modal_projector.parameters())
    assert shape.tower_parameters == tower
    assert shape.projector_parameters == projector + model.model.image_newline.numel()
