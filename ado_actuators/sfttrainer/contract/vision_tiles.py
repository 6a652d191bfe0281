"""How many positions a vision tower attends over per tile of an image: what the trainer (its
FLOPs per tile, trainer/model_size.py) and the plan (memory and step, plan/model/vision.py)
both read from a model's vision_config. Standard library only: both sides import it."""

from __future__ import annotations

CLS_TOWERS = ("clip_vision_model",)
"""Vision towers (vision_config's model_type) that prepend a CLS token to a tile's patches;
SigLIP's (granite-vision's) has none."""


def has_cls_token(tower_model_type: str) -> bool:
    return tower_model_type in CLS_TOWERS


def tile_positions(image_size: int, patch_size: int, cls_token: bool) -> int:
    """A tile's patches (its side in patches, squared), and the CLS token of a tower that
    prepends one."""
    side = image_size // patch_size
    return side * side + (1 if cls_token else 0)
