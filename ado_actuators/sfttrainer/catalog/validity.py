"""The spec's configuration rules (is_valid logic 1-7): which entities are invalid before launch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def configuration_problems(values: Any, num_local_experts: int | None = None) -> list[str]:
    """Reasons the entity cannot be measured as configured; empty when it can.

    `values` is an `EntityValues`. `num_local_experts` is the model's MoE expert count
    (None for dense models); only rule 7 needs it, and only when fast_moe is set.
    """
    problems = []
    gpus, nodes, batch = values.number_gpus, values.number_nodes, values.batch_size
    if gpus > 0 and batch % gpus != 0:
        problems.append(f"batch_size {batch} is not divisible by number_gpus {gpus}")
    if nodes > 0 and gpus % nodes != 0:
        problems.append(f"number_gpus {gpus} is not divisible by number_nodes {nodes}")
    if nodes < 1:
        problems.append(f"number_nodes must be at least 1, got {nodes}")
    if batch < 1:
        problems.append(f"batch_size must be at least 1, got {batch}")
    if gpus > 0 and not (values.gpu_model or "").strip():
        problems.append(f"gpu_model must be set when number_gpus is {gpus}")
    if values.fast_moe:
        if gpus % values.fast_moe != 0:
            problems.append(f"number_gpus {gpus} is not divisible by fast_moe {values.fast_moe}")
        if num_local_experts is None:
            problems.append(
                f"fast_moe {values.fast_moe} needs a Mixture of Experts model, but "
                f"{values.model_name} declares no num_local_experts"
            )
        elif num_local_experts % values.fast_moe != 0:
            problems.append(
                f"the model's num_local_experts {num_local_experts} is not divisible by "
                f"fast_moe {values.fast_moe}"
            )
    return problems


class ModelConfigUnavailable(LookupError):
    pass


def read_model_config(location: str, hf_home: str | None) -> dict[str, Any]:
    """The model's config.json, from a local directory or the Hugging Face cache; no weights."""
    local = Path(location).expanduser()
    if local.is_dir():
        path = local / "config.json"
    elif location.startswith(("/", ".", "~")):
        raise ModelConfigUnavailable(f"no model directory at {location}")
    else:
        from huggingface_hub import try_to_load_from_cache
        from huggingface_hub.errors import HFValidationError

        cache_dir = Path(hf_home) / "hub" if hf_home else None
        try:
            found = try_to_load_from_cache(location, "config.json", cache_dir=cache_dir)
        except HFValidationError as error:
            raise ModelConfigUnavailable(
                f"{location!r} is neither a model directory nor a hub id: {error}"
            ) from None
        if not isinstance(found, str):
            raise ModelConfigUnavailable(
                f"no config.json for {location!r} in {cache_dir or 'the Hugging Face cache'}; "
                f"fetch the weights first: sfttrainer_download_hf_weights -i models.yaml "
                f"-o {hf_home or '$HF_HOME'}"
            )
        path = Path(found)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ModelConfigUnavailable(f"cannot read {path}: {error}") from error


def num_local_experts(config: dict[str, Any]) -> int | None:
    # Multimodal models nest the language model's settings under text_config.
    for source in (config, config.get("text_config") or {}):
        if source.get("num_local_experts") is not None:
            return int(source["num_local_experts"])
    return None
