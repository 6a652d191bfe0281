"""The trained model's parameter counts and shape, as metrics/flops.py needs them."""

from __future__ import annotations

from ado_actuators.sfttrainer.contract.trainer_io import ImageTower, ModelParameters
from ado_actuators.sfttrainer.contract.vision_tiles import has_cls_token, tile_positions

_MOE_ATTRIBUTES = ("num_local_experts", "num_experts", "moe_num_experts", "n_routed_experts")
# GPTQModel / fms-acceleration's kernels spell them the nn.Linear way, AutoGPTQ without "_"
_FEATURES = (("in_features", "out_features"), ("infeatures", "outfeatures"))


def _config(model):
    config = getattr(model, "config", None)
    # multimodal models keep the language model's shape in text_config
    return getattr(config, "text_config", None) or config


def attention_shape(config) -> tuple[int | None, int | None]:
    """(attention layers, query heads x head dimension) from a transformers config.

    Hybrid models (granite-4.0-h: Mamba + attention) name each layer's kind in layer_types;
    only attention layers pay the attention term.
    """
    if config is None:
        return None, None
    layers = getattr(config, "num_hidden_layers", None)
    kinds = getattr(config, "layer_types", None)
    if kinds and any("mamba" in str(k) for k in kinds):
        layers = sum("attention" in str(k) for k in kinds)
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    head_dim = getattr(config, "head_dim", None) or (hidden // heads if hidden and heads else None)
    width = heads * head_dim if heads and head_dim else None
    return layers, width


def is_mixture_of_experts(config) -> bool:
    return any((getattr(config, name, None) or 0) > 1 for name in _MOE_ATTRIBUTES)


def quantised_linear_size(module) -> int:
    """The weights a quantised linear layer multiplies by (in x out), 0 for any other module.

    GPTQ-style layers (GPTQ-LoRA's base model) keep their weights packed into an integer
    `qweight` buffer, so model.parameters() never sees them: the model would look 5-15x
    smaller than the one that runs. Without feature attributes the size comes from the packing
    (`bits` per weight, `in x bits / word bits` rows of `out` columns).
    """
    qweight = module._buffers.get("qweight", module._parameters.get("qweight"))
    if qweight is None:
        return 0
    for in_name, out_name in _FEATURES:
        fan_in, fan_out = getattr(module, in_name, None), getattr(module, out_name, None)
        if isinstance(fan_in, int) and isinstance(fan_out, int):
            return fan_in * fan_out
    bits = getattr(module, "bits", None)
    if isinstance(bits, int) and bits > 0 and qweight.dim() == 2:
        rows, columns = qweight.shape
        return rows * (qweight.element_size() * 8 // bits) * columns
    return 0


def parameters_of_model(model) -> ModelParameters:
    """Counts each parameter once (tied weights are shared tensors).

    Embedding tables are looked up, not multiplied, so they are left out of `matmul`, unless
    the table is also the LM head's weight (tied embeddings), which multiplies every token.
    Prompt-tuning's virtual-token table is an embedding too. A quantised linear layer counts
    its unpacked weights (frozen), not its packed integers.
    """
    import torch

    total = trainable = 0
    for p in model.parameters():
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    for module in model.modules():
        if size := quantised_linear_size(module):
            packed = module._parameters.get("qweight")  # counted above as packed integers
            total += size - (packed.numel() if packed is not None else 0)
    try:
        head = model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        head = None
    head_weight = getattr(head, "weight", None)
    lookup = lookup_trainable = 0
    seen: set[int] = set()
    for module in model.modules():
        if not isinstance(module, torch.nn.Embedding):
            continue
        weight = module.weight
        if weight is head_weight or id(weight) in seen:
            continue
        seen.add(id(weight))
        lookup += weight.numel()
        lookup_trainable += weight.numel() if weight.requires_grad else 0
    config = _config(model)
    layers, width = attention_shape(config)
    tower = image_tower(model)
    apart = (tower.matmul, tower.trainable_matmul) if tower else (0, 0)
    return ModelParameters(
        total=total,
        trainable=trainable,
        matmul=total - lookup - apart[0],
        trainable_matmul=trainable - lookup_trainable - apart[1],
        layers=layers,
        attention_width=width,
        mixture_of_experts=is_mixture_of_experts(config),
        image_tower=tower,
    )


TOWER_MODULES = ("vision_tower", "multi_modal_projector")
"""A LLaVA-style model's modules whose work is per image tile (transformers' names)."""


def image_tower(model) -> ImageTower | None:
    """A vision-language model's tower and projector, counted apart (their work is per tile of
    an image, not per token); None for a text model. Their position table is looked up."""
    import torch

    vision = getattr(getattr(model, "config", None), "vision_config", None)
    if vision is None:
        return None
    parameters: dict[int, torch.nn.Parameter] = {}
    lookups: set[int] = set()
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] not in TOWER_MODULES:
            continue
        parameters.update({id(p): p for p in module.parameters()})
        lookups |= {id(m.weight) for m in module.modules() if isinstance(m, torch.nn.Embedding)}
    counted = [p for key, p in parameters.items() if key not in lookups]
    cls_token = has_cls_token(str(getattr(vision, "model_type", "")))
    return ImageTower(
        matmul=sum(p.numel() for p in counted),
        trainable_matmul=sum(p.numel() for p in counted if p.requires_grad),
        layers=int(vision.num_hidden_layers),
        attention_width=int(vision.hidden_size),
        tile_positions=tile_positions(int(vision.image_size), int(vision.patch_size), cls_token),
    )


def tile_counter(model):
    """A function of a batch's image sizes ([height, width] each) giving the tiles the vision
    tower encodes for them, as LLaVA-NeXT counts them (its image_size_to_num_patches: each
    image's tiling and its base image); None for a model without image_grid_pinpoints.
    `model` may be wrapped (DDP or FSDP keep it as `.module`; PEFT forwards `config`)."""
    config = getattr(getattr(model, "module", model), "config", None)
    pinpoints = getattr(config, "image_grid_pinpoints", None)
    vision = getattr(config, "vision_config", None)
    if not pinpoints or vision is None:
        return None
    try:
        from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches
    except ImportError:  # a release before LLaVA-NeXT: no tiles to count
        return None

    side = int(vision.image_size)

    def tiles(sizes) -> int:
        return sum(
            image_size_to_num_patches(
                image_size=list(size), grid_pinpoints=pinpoints, patch_size=side
            )
            for size in sizes
        )

    return tiles


MAMBA_PATH_NOTES = {
    "fused": "Mamba-2 layers ran mamba-ssm and causal-conv1d's fused kernels",
    "torch": "Mamba-2 layers ran transformers' torch path (mamba_ssm or causal_conv1d does not "
    "import here, or the model is not on a GPU): many times slower and larger than the fused "
    "kernels",
}
"""What a row says of the scan path that ran (mamba_scan_path)."""


def mamba_scan_path(model) -> str | None:
    """Which code a hybrid's Mamba-2 layers run: "fused" where transformers' modeling module
    found mamba_ssm and causal_conv1d (its `is_fast_path_available`) and the layer's weights
    are on a CUDA device, which is its own test; "torch" otherwise; None without Mamba layers.
    Read after the model is placed (on_train_begin): before, FSDP's weights are still on CPU."""
    import sys

    for module in model.modules():
        kind = type(module)
        if not (hasattr(kind, "cuda_kernels_forward") and hasattr(kind, "torch_forward")):
            continue
        modeling = sys.modules.get(kind.__module__)
        fast = bool(getattr(modeling, "is_fast_path_available", False))
        weight = getattr(getattr(module, "in_proj", None), "weight", None)
        on_cuda = weight is not None and weight.device.type == "cuda"
        return "fused" if fast and on_cuda else "torch"
    return None


def image_token_id(model) -> int | None:
    """The token a vision-language model's processor expands each image into (LLaVA-NeXT's
    `image_token_index`, which newer configs call `image_token_id`); None for a text model.
    `model` may be wrapped (DDP or FSDP keep it as `.module`; PEFT forwards `config`)."""
    config = getattr(getattr(model, "module", model), "config", None)
    for name in ("image_token_id", "image_token_index"):
        if isinstance(found := getattr(config, name, None), int):
            return found
    return None
