"""Everything that depends on the fms-hf-tuning version (fms_api reads how each release
is called from the release itself).

fms-hf-tuning's `main()` passes no callbacks to `train()`, so the wrapper parses the same command
line with fms's own parser and calls `train()` itself.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import sys
from typing import Any

from ado_actuators.sfttrainer.trainer import fms_api


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
    """What `tuning.sft_trainer.parse_arguments` returned, as train() takes it (see fms_api)."""

    model_args: Any  # tuning is untyped
    data_args: Any  # tuning is untyped
    train_args: Any  # tuning is untyped
    configs: dict[str, Any]  # train()'s other keywords, built as the release's main() builds them
    exp_metadata: dict | None
    ignored: list[str]  # arguments fms's parser did not recognise (it silently drops them)


def parse(argv: list[str]) -> FmsArguments:
    from tuning import sft_trainer

    api = fms_api.read_installed(sft_trainer)
    parser = sft_trainer.get_parser()
    _, ignored = parser.parse_known_args(argv)
    saved = sys.argv
    # parse_arguments reads sys.argv itself (parse_args_into_dataclasses without args)
    sys.argv = [saved[0] if saved else "sft_trainer", *argv]
    try:
        values = sft_trainer.parse_arguments(parser, None)
    finally:
        sys.argv = saved
    if len(values) != len(api.parsed_names):
        raise fms_api.ApiNotUnderstood(
            f"parse_arguments returned {len(values)} values; main() unpacks "
            f"{len(api.parsed_names)} ({', '.join(api.parsed_names)})"
        )
    parsed = dict(zip(api.parsed_names, values, strict=True))
    exp_metadata = parsed[fms_api.METADATA]
    metadata = json.loads(exp_metadata) if exp_metadata else None
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError(f"--exp_metadata must be a JSON object, got {exp_metadata!r}")
    configs = api.train_keywords(sft_trainer, parsed)
    return FmsArguments(
        **{role: configs.pop(role) for role in fms_api.ROLES},
        configs=configs,
        exp_metadata=metadata,
        ignored=list(ignored),
    )


def train(args: FmsArguments, callbacks: list) -> Any:  # tuning is untyped
    from tuning import sft_trainer

    result = sft_trainer.train(
        model_args=args.model_args,
        data_args=args.data_args,
        train_args=args.train_args,
        additional_callbacks=callbacks,
        exp_metadata=args.exp_metadata,
        **args.configs,
    )
    return result[0]  # 2.x: (trainer, metadata); 3.x: (trainer, metadata, tc_callback)


def appends_eos(args: FmsArguments) -> bool:
    """Whether every trained sequence is the entry's text plus one EOS fms/TRL appended.

    3.2.x, single-sequence text datasets (`--dataset_text_field`, or a formatter template):
    fms renders `{{text}}{{eos_token}}` (setup_dataprocessor._get_dataset_formatting_handlers),
    TRL 0.19's add_eos sees the EOS already there and adds none, then TRL tokenises with the
    tokenizer's special tokens (BOS for Llama-style ones) and truncates to
    min(max_seq_length, tokenizer.model_max_length). Chat, vision and pre-tokenised datasets
    take other paths with no appended EOS. 2.x does the same in
    preprocessing_utils.get_formatted_dataset_with_single_sequence (text + eos_token), and TRL
    0.11-0.17 tokenise with special tokens and truncate alike (checked by the per-version
    measurements in tests/e2e).
    """
    data = args.data_args
    return bool(
        (data.dataset_text_field or data.data_formatter_template)
        and not getattr(data, "instruction_template", None)
        and not getattr(data, "dataset_image_field", None)
    )
