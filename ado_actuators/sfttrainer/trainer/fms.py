"""Everything that depends on the fms-hf-tuning version (3.2.x, with TRL 0.19 and PEFT 0.19).

fms-hf-tuning's `main()` passes no callbacks to `train()`, so the wrapper parses the same command
line with fms's own parser and calls `train()` itself. Other fms versions get a sibling module
exposing the same four names: `parse`, `train`, `appends_eos`, `PROMPT_LOGITS_NEED_ALIGNMENT`.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import sys
from typing import Any


def _version_tuple(name: str) -> tuple[int, ...]:
    parts = []
    for piece in importlib.metadata.version(name).split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


PROMPT_LOGITS_NEED_ALIGNMENT = _version_tuple("trl") < (0, 20)
"""TRL < 0.20 pairs a prompt-tuning model's logits (virtual tokens first) with the labels of the
real tokens and crashes computing token accuracy; TRL 0.20 slices the logits itself."""


@dataclasses.dataclass
class FmsArguments:
    """What `tuning.sft_trainer.parse_arguments` returns, by name."""

    model_args: Any
    data_args: Any
    train_args: Any
    trainer_controller_args: Any
    tune_config: Any
    quantization_config: Any
    quantized_lora_config: Any
    fusedops_kernels_config: Any
    attention_and_distributed_packing_config: Any
    fast_moe_config: Any
    tracker_configs: Any
    exp_metadata: dict | None
    ignored: list[str]  # arguments fms's parser did not recognise (it silently drops them)


def parse(argv: list[str]) -> FmsArguments:
    from tuning import sft_trainer

    parser = sft_trainer.get_parser()
    _, ignored = parser.parse_known_args(argv)
    saved = sys.argv
    # parse_arguments reads sys.argv itself (parse_args_into_dataclasses without args)
    sys.argv = [saved[0] if saved else "sft_trainer", *argv]
    try:
        parsed = sft_trainer.parse_arguments(parser, None)
    finally:
        sys.argv = saved
    *configs, exp_metadata = parsed
    metadata = json.loads(exp_metadata) if exp_metadata else None
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError(f"--exp_metadata must be a JSON object, got {exp_metadata!r}")
    return FmsArguments(*configs, exp_metadata=metadata, ignored=list(ignored))


def train(args: FmsArguments, callbacks: list) -> Any:
    from tuning import sft_trainer

    trainer, _metadata, _tc_callback = sft_trainer.train(
        model_args=args.model_args,
        data_args=args.data_args,
        train_args=args.train_args,
        peft_config=args.tune_config,
        quantization_config=args.quantization_config,
        trainer_controller_args=args.trainer_controller_args,
        tracker_configs=args.tracker_configs,
        additional_callbacks=callbacks,
        exp_metadata=args.exp_metadata,
        quantized_lora_config=args.quantized_lora_config,
        fusedops_kernels_config=args.fusedops_kernels_config,
        attention_and_distributed_packing_config=args.attention_and_distributed_packing_config,
        fast_moe_config=args.fast_moe_config,
    )
    return trainer


def appends_eos(args: FmsArguments) -> bool:
    """Whether every trained sequence is the entry's text plus one EOS fms/TRL appended.

    3.2.x, single-sequence text datasets (`--dataset_text_field`, or a formatter template):
    fms renders `{{text}}{{eos_token}}` (setup_dataprocessor._get_dataset_formatting_handlers),
    TRL 0.19's add_eos sees the EOS already there and adds none, then TRL tokenises with the
    tokenizer's special tokens (BOS for Llama-style ones) and truncates to
    min(max_seq_length, tokenizer.model_max_length). Chat, vision and pre-tokenised datasets
    take other paths with no appended EOS.
    """
    data = args.data_args
    return bool(
        (data.dataset_text_field or data.data_formatter_template)
        and not data.instruction_template
        and not getattr(data, "dataset_image_field", None)
    )
