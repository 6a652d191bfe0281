"""The installed fms-hf-tuning's API generation is recognised and parsed by name (2.1.2 and
3.0.0 are exercised in their own environments by tests/integration/test_environments.py and
tests/e2e/test_versions.py)."""

from __future__ import annotations

from pathlib import Path

from ado_actuators.sfttrainer.trainer import fms, fms_api


def test_installed_generation_parses_every_returned_value_by_name(tmp_path, trainer_tools):
    from tuning import sft_trainer

    assert fms_api.detect(sft_trainer) is fms_api.Api3Quantization  # 3.2.2
    argv = trainer_tools.spec_fms_args(Path("/nonexistent-model"), tmp_path / "d.jsonl",
                                       peft_method="lora", extra=("--target_modules", "q_proj"))
    args = fms.parse(argv)
    assert type(args.configs["peft_config"]).__name__ == "LoraConfig"
    assert args.train_args.max_steps == 3 and args.data_args.dataset_text_field == "output"
    assert {"quantization_config", "fast_moe_config", "tracker_configs"} <= set(args.configs)
