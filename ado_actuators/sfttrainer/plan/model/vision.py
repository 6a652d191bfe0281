"""A vision-language model's image side, read from its config.json: the image tokens one image
becomes in the language model's input, and the vision tower's and projector's size and work.
Pure arithmetic on config.json's fields; no torch, no transformers.

Image tokens follow transformers 4.55.4 (the release fms-hf-tuning 3.2.2 pins,
plan/packages/fms-hf-tuning_v3.2.2.txt), models/llava_next/processing_llava_next.py:
`LlavaNextProcessor._get_number_of_features` and `_get_unpadded_features`, with
image_processing_utils.select_best_resolution. The image is tiled at the pinpoint that keeps
most of it (ties: the least waste), each tile `image_size` square; the tiles' patch grid is
unpadded back to the image's aspect, one image-newline token ends each row, and the base image
(one tile of the whole picture) adds its patch grid, plus the CLS token
(`num_additional_image_tokens`) that `vision_feature_select_strategy` "default" then removes.

The processor's `num_additional_image_tokens` lives in processor_config.json, not config.json:
it is 1 for a CLIP tower (its CLS token, llava-hf's processors) and 0 for SigLIP (no CLS), which
is what this reads from `vision_config.model_type`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.contract.vision_tiles import has_cls_token, tile_positions

VISION_MODEL_TYPES = ("llava_next",)
"""Composite models whose image tokens this counts (granite-vision-3.2 is llava_next too)."""


@dataclasses.dataclass(frozen=True)
class VisionShape:
    """The image side of a LLaVA-NeXT config.json."""

    image_size: int  # a tile's side, in pixels (vision_config.image_size)
    patch_size: int
    hidden: int  # the tower's width
    intermediate: int
    layers: int
    pinpoints: tuple[tuple[int, int], ...]  # (height, width) of each tiling
    select_strategy: str  # "default" drops the CLS feature, "full" keeps every one
    feature_layers: int  # hidden states concatenated into the projector (a list's length)
    text_hidden: int  # the projector's output width
    cls_token: bool
    projector_bias: bool = True
    pooling_head: bool = True  # SigLIP's vision_use_head
    heads: int = 12
    activation: str = "gelu_pytorch_tanh"  # the tower MLP's hidden_act

    @classmethod
    def of(cls, config: dict[str, Any]) -> VisionShape | None:
        """The image side of `config` (a parsed config.json); None for a text model or one
        whose vision fields are missing."""
        vision = config.get("vision_config")
        text = config.get("text_config")
        if config.get("model_type") not in VISION_MODEL_TYPES or not isinstance(vision, dict):
            return None
        pinpoints = config.get("image_grid_pinpoints")
        needed = ("image_size", "patch_size", "hidden_size", "intermediate_size")
        if not pinpoints or not isinstance(text, dict) or any(k not in vision for k in needed):
            return None
        layer = config.get("vision_feature_layer", -2)
        cls_token = has_cls_token(str(vision.get("model_type", "clip_vision_model")))
        return cls(
            image_size=int(vision["image_size"]),
            patch_size=int(vision["patch_size"]),
            hidden=int(vision["hidden_size"]),
            intermediate=int(vision["intermediate_size"]),
            layers=int(vision.get("num_hidden_layers", 12)),
            pinpoints=tuple((int(h), int(w)) for h, w in pinpoints),
            select_strategy=str(config.get("vision_feature_select_strategy", "default")),
            feature_layers=len(layer) if isinstance(layer, list) else 1,
            text_hidden=int(text["hidden_size"]),
            cls_token=cls_token,
            projector_bias=bool(config.get("multimodal_projector_bias", True)),
            pooling_head=bool(vision.get("vision_use_head", True)),
            heads=int(vision.get("num_attention_heads", 12)),
            # CLIPVisionConfig's and SiglipVisionConfig's defaults
            activation=str(
                vision.get("hidden_act", "quick_gelu" if cls_token else "gelu_pytorch_tanh")
            ),
        )

    @property
    def grid(self) -> int:
        """Patches along a tile's side."""
        return self.image_size // self.patch_size

    def best_resolution(self, height: int, width: int) -> tuple[int, int]:
        """select_best_resolution: the pinpoint keeping most of the image, then least waste."""
        best, kept, waste = self.pinpoints[0], 0, float("inf")
        for pin_h, pin_w in self.pinpoints:
            scale = min(pin_w / width, pin_h / height)
            effective = min(int(width * scale) * int(height * scale), width * height)
            wasted = pin_w * pin_h - effective
            if effective > kept or (effective == kept and wasted < waste):
                best, kept, waste = (pin_h, pin_w), effective, wasted
        return best

    def tiles(self, height: int, width: int) -> int:
        """Tiles the tower encodes for one image: the tiling's, plus the base image."""
        best_h, best_w = self.best_resolution(height, width)
        return (best_h // self.image_size) * (best_w // self.image_size) + 1

    def image_tokens(self, height: int, width: int) -> int:
        """Tokens one `height` x `width` image becomes in the language model's input."""
        best_h, best_w = self.best_resolution(height, width)
        rows = self.grid * (best_h // self.image_size)
        columns = self.grid * (best_w // self.image_size)
        if width / height > columns / rows:
            new_rows = int(round(height * (columns / width), 7))
            rows -= 2 * ((rows - new_rows) // 2)
        else:
            new_columns = int(round(width * (rows / height), 7))
            columns -= 2 * ((columns - new_columns) // 2)
        tokens = rows * columns + rows + self.positions
        return tokens - 1 if self.select_strategy == "default" else tokens

    @property
    def positions(self) -> int:
        """Positions the tower runs over per tile: the patches, and its CLS token."""
        return tile_positions(self.image_size, self.patch_size, self.cls_token)

    @property
    def layer_parameters(self) -> int:
        """One encoder layer: q, k, v, out projections, the MLP, two layer norms (biases on)."""
        h, m = self.hidden, self.intermediate
        return 4 * (h * h + h) + (h * m + m) + (m * h + h) + 4 * h

    @property
    def tower_parameters(self) -> int:
        """The vision tower: patch embedding (3 channels), positions, layers and norms: CLIP's
        class embedding and pre- and post-layer norms; SigLIP's patch bias, post-layer norm and
        attention-pooling head (built by SiglipVisionModel, unused by LLaVA-NeXT)."""
        h, m = self.hidden, self.intermediate
        common = (
            3 * self.patch_size**2 * h + self.positions * h + self.layers * self.layer_parameters
        )
        if self.cls_token:
            return common + h + 4 * h
        head = h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * m + m) + (m * h + h)
        return common + h + 2 * h + (head if self.pooling_head else 0)

    @property
    def projector_parameters(self) -> int:
        """LlavaNextMultiModalProjector (two linears) and the image_newline vector."""
        into, out = self.hidden * self.feature_layers, self.text_hidden
        bias = out if self.projector_bias else 0
        return into * out + bias + out * out + bias + out

    @property
    def tower_linears(self) -> tuple[tuple[str, int, int, int], ...]:
        """The tower's nn.Linear kinds (name, inputs, outputs, count), named as CLIP's and
        SigLIP's encoder layers name them: LoRA's target_modules match these too."""
        h, m, n = self.hidden, self.intermediate, self.layers
        attention = tuple((name, h, h, n) for name in ("q_proj", "k_proj", "v_proj", "out_proj"))
        return (*attention, ("fc1", h, m, n), ("fc2", m, h, n))

    def tower_flops(self, tiles: int) -> float:
        """Forward FLOPs of the tower and projector over `tiles` tiles: 2 per weight per
        position in each layer's matrices, and attention's QK^T and AV (4 x positions^2 x
        width a layer)."""
        p = self.positions
        per_layer = 2 * p * (4 * self.hidden**2 + 2 * self.hidden * self.intermediate)
        attention = 4 * p * p * self.hidden
        tower = self.layers * (per_layer + attention) + 2 * p * 3 * self.patch_size**2 * self.hidden
        into = self.hidden * self.feature_layers
        projector = 2 * self.grid**2 * (into * self.text_hidden + self.text_hidden**2)
        return float(tiles * (tower + projector))
