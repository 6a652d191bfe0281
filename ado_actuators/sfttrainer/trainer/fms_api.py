"""One adapter per fms-hf-tuning API generation, chosen by what `tuning.sft_trainer` offers.

The generations differ in what `parse_arguments` returns (2.x: file logger and AIM configs that
`main()` combines into a TrackerConfigFactory; 3.x: fast_moe_config and one TrackerConfigs;
3.2: a quantization_config too) and
in what `train()` returns (2.x: trainer, metadata; 3.x: trainer, metadata, controller callback).
Everything else the wrapper needs is the same in 2.1.2, 3.0.0 and 3.2.2.
"""

from __future__ import annotations

import inspect
from typing import Any

PARSED_V3 = (
    "model_args", "data_args", "train_args", "trainer_controller_args", "tune_config",
    "quantized_lora_config", "fusedops_kernels_config",
    "attention_and_distributed_packing_config", "fast_moe_config", "tracker_configs",
    "exp_metadata",
)  # fmt: skip
PARSED_V3_QUANTIZATION = (*PARSED_V3[:5], "quantization_config", *PARSED_V3[5:])
PARSED_V2 = (
    "model_args", "data_args", "train_args", "trainer_controller_args", "tune_config",
    "file_logger_config", "aim_config", "quantized_lora_config", "fusedops_kernels_config",
    "attention_and_distributed_packing_config", "exp_metadata",
)  # fmt: skip


class Api3:
    """fms-hf-tuning 3.x: parse_arguments returns fast_moe_config and tracker_configs."""

    parsed_names = PARSED_V3

    @staticmethod
    def tracker_configs(sft_trainer, parsed: dict[str, Any]) -> Any:
        return parsed["tracker_configs"]


class Api3Quantization(Api3):
    """fms-hf-tuning 3.2 (and later 3.x): also a quantization_config (Mxfp4), after tune_config."""

    parsed_names = PARSED_V3_QUANTIZATION


class Api2:
    """fms-hf-tuning 2.x: trackers come as separate configs; main() combines them."""

    parsed_names = PARSED_V2

    @staticmethod
    def tracker_configs(sft_trainer, parsed: dict[str, Any]) -> Any:
        combined = sft_trainer.TrackerConfigFactory()
        combined.file_logger_config = parsed["file_logger_config"]
        combined.aim_config = parsed["aim_config"]
        return combined


def detect(sft_trainer) -> type[Api2] | type[Api3]:
    parameters = inspect.signature(sft_trainer.train).parameters
    if "quantization_config" in parameters:
        return Api3Quantization
    if "fast_moe_config" in parameters:
        return Api3
    if hasattr(sft_trainer, "TrackerConfigFactory"):
        return Api2
    raise RuntimeError(
        "this fms-hf-tuning's tuning.sft_trainer matches no API generation the wrapper knows "
        "(2.x: TrackerConfigFactory; 3.x: train(fast_moe_config=...))"
    )
