"""Adjustments that let a spec command line train where it otherwise could not.

Each returns a note for RankReport.notes, so a user can see the measurement was not run
exactly as asked.
"""

from __future__ import annotations

import importlib.util
import os


def flash_attention_unavailable_reason() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "CUDA is not available"
    if importlib.util.find_spec("flash_attn") is None:
        return "the flash_attn package is not installed"
    return None


def disable_unavailable_flash_attention(model_args) -> str | None:
    """`--use_flash_attn True` (fms's default) without CUDA or flash_attn: the model cannot load."""
    if not model_args.use_flash_attn:
        return None
    reason = flash_attention_unavailable_reason()
    if reason is None:
        return None
    model_args.use_flash_attn = False
    return f"use_flash_attn=True was requested but {reason}: trained without flash attention"


def use_cpu_for_multi_process(world_size: int, environ=os.environ) -> str | None:
    """Several ranks and no GPU: make accelerate set up gloo DDP (MULTI_CPU).

    accelerate 1.x's multi-GPU launcher ignores `use_cpu: true` from the config file; without
    ACCELERATE_USE_CPU the Trainer sees no distributed setup and every rank trains on the whole
    dataset alone. Must run before fms parses its arguments (TrainingArguments sets up devices).
    """
    import torch

    if world_size <= 1 or torch.cuda.is_available():
        return None
    if environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"):
        return None
    environ["ACCELERATE_USE_CPU"] = "true"
    return (
        f"{world_size} ranks without CUDA: set ACCELERATE_USE_CPU=true so they train as one "
        "gloo DDP job (accelerate launch ignores use_cpu from its config file)"
    )


def same_shuffle_on_every_rank(train_args, world_size: int) -> str | None:
    """Several ranks: give the data sampler one seed, so the ranks split the dataset.

    fms-hf-tuning calls set_seed(seed, device_specific=True) after building the Trainer, and
    accelerate seeds its sampler from torch's initial seed when `data_seed` is unset: each rank
    then shuffles differently and the ranks' shards overlap (entries trained twice, others
    never). HF documents `data_seed` as defaulting to `seed`; this makes that true.
    """
    if world_size <= 1 or train_args.data_seed is not None:
        return None
    train_args.data_seed = train_args.seed
    return (
        f"data_seed unset with {world_size} ranks: using seed {train_args.seed} so every rank "
        "shuffles alike and the ranks train disjoint shards of the dataset"
    )


def _is_prefixing_prompt_learner(model) -> bool:
    """Prompt tuning / P-tuning prepend virtual tokens to the input embeddings, so the logits
    are longer than the labels; prefix tuning works through past_key_values and does not."""
    try:
        from peft import PeftModel
        from peft.utils import PeftType
    except ImportError:
        return False
    if not isinstance(model, PeftModel):
        return False
    config = model.active_peft_config
    prefixing = {PeftType.PROMPT_TUNING, PeftType.P_TUNING, PeftType.MULTITASK_PROMPT_TUNING}
    return bool(config.is_prompt_learning and config.peft_type in prefixing)


def align_prompt_learning_logits(model) -> str | None:
    """Make a prompt-tuning model's logits line up with its labels again.

    PEFT computes the loss inside the model (labels padded with -100 for the virtual tokens),
    then returns logits for virtual + real positions. Every consumer outside pairs them with
    the real positions' labels: TRL 0.19's token accuracy crashes ("The size of tensor a (38)
    must match the size of tensor b (30)") and fms's sum-loss trainer would misalign the loss.
    Dropping the virtual positions from the returned logits fixes all of them and leaves the
    model's own loss untouched. Only needed where TRL does not slice them itself (< 0.20).
    """
    if not _is_prefixing_prompt_learner(model):
        return None

    def trim(module, args, kwargs, output):
        ref = kwargs.get("input_ids")
        if ref is None:
            ref = kwargs.get("inputs_embeds")
        logits = getattr(output, "logits", None)
        if ref is None or logits is None or logits.shape[1] <= ref.shape[1]:
            return output
        output.logits = logits[:, logits.shape[1] - ref.shape[1] :, :]
        return output

    model.register_forward_hook(trim, with_kwargs=True)
    n = model.active_peft_config.num_virtual_tokens
    return (
        f"prompt tuning: logits of the {n} virtual tokens are dropped from the model output so "
        "TRL's token accuracy lines up with the labels (TRL < 0.20 bug; loss unaffected)"
    )
