"""The fixed parts of what the actuator launches, against the spec's own text.

The expected values are copied verbatim from the spec (sfttrainer-actuator-guide.md,
finetune_full_benchmark: the FSDP and DDP `accelerate_config.yml` and the command line),
with its ${placeholders} filled in here, never read from the product's catalog: a constant
mistyped in experiments.yaml or plan/launch/accelerate.py must fail this test.
"""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path

import yaml

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.plan.launch.launch_plan import PlanInputs, plan_launch

SPEC_FSDP = """
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
downcast_bf16: "no"
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_forward_prefetch: false
  fsdp_offload_params: false
  fsdp_sharding_strategy: HYBRID_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_cpu_ram_efficient_loading: true
  fsdp_sync_module_states: true
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
main_process_port: 29511
num_processes: 4
"""

SPEC_DDP = """
compute_environment: LOCAL_MACHINE
debug: False
downcast_bf16: no
distributed_type: MULTI_GPU
machine_rank: 0
main_training_function: main
mixed_precision: fp16
num_machines: 1
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
main_process_port: 29511
num_processes: 4
"""

# The spec's command line with BATCH_SIZE 8, NUM_GPUS 4, MODEL_MAX_LENGTH 512,
# GRADIENT_ACCUMULATION_STEPS 4, OPTIM adamw_torch, BF16 False, reentrant false.
SPEC_COMMAND = r"""
  --torch_dtype bfloat16 --use_flash_attn True
  --response_template "\n### Response:" --dataset_text_field output --log_level debug
  --num_train_epochs 1 --per_device_train_batch_size 2
  --max_seq_length 512 --eval_strategy no
  --gradient_accumulation_steps 4 --save_strategy no
  --learning_rate 1e-05 --weight_decay 0.0 --warmup_ratio 0.03 --lr_scheduler_type cosine
  --logging_steps 1 --include_tokens_per_second True --gradient_checkpointing True
  --packing False --peft_method none --optim adamw_torch --bf16 False
  --gradient_checkpointing_kwargs='{"use_reentrant": false}'
"""
# Settings of the product the spec's files do not list, each an entity field of its own.
PRODUCT_ONLY_FSDP_KEYS = {"fsdp_use_orig_params"}


def plan(**entity):
    definition = catalog_data().experiment("finetune_full_benchmark-v1.0.0")
    values = {
        "model_name": "granite-3.1-2b",
        "model_max_length": 512,
        "batch_size": 8,
        "number_gpus": 4,
        "gpu_model": "NVIDIA-A100-SXM4-80GB",
        **entity,
    }
    return plan_launch(
        PlanInputs(
            values=entity_values(values, definition.default_overrides()),
            definition=definition,
            model_location="/models/m",
            dataset_path=Path("/data/d.jsonl"),
            text_field="output",
            workdir=Path("/work/m1"),
            python="/venv/bin/python",
            hf_home="/hf",
            main_process_port=29511,
            aim_repo=None,
        )
    )


def test_fsdp_config_is_the_specs():
    spec = yaml.safe_load(SPEC_FSDP)
    ours = plan(
        fsdp_sharding_strategy="HYBRID_SHARD",
        fsdp_state_dict_type="SHARDED_STATE_DICT",
        accelerate_config_mixed_precision="bf16",
        accelerate_config_fsdp_transformer_layer_cls_to_wrap="LlamaDecoderLayer",
    ).node.accelerate_config
    spec_fsdp, our_fsdp = spec.pop("fsdp_config"), dict(ours.pop("fsdp_config"))
    assert ours == spec
    assert {k: our_fsdp[k] for k in spec_fsdp} == spec_fsdp
    assert set(our_fsdp) - set(spec_fsdp) == PRODUCT_ONLY_FSDP_KEYS


def test_ddp_config_is_the_specs():
    ours = plan(distributed_backend="DDP", accelerate_config_mixed_precision="fp16")
    assert ours.node.accelerate_config == yaml.safe_load(SPEC_DDP)


def test_fixed_sft_trainer_arguments_are_the_specs():
    argv = plan().node.argv
    ours = dict(itertools.pairwise(argv))
    words = shlex.split(
        SPEC_COMMAND.replace("--gradient_checkpointing_kwargs=", "--gradient_checkpointing_kwargs ")
    )
    spec = dict(zip(words[::2], words[1::2], strict=True))
    assert all(flag.startswith("--") for flag in spec)
    spec["--response_template"] = spec["--response_template"].replace("\\n", "\n")  # bash "\n"
    for flag, value in spec.items():
        assert flag in ours, flag
        mine = ours[flag]
        if flag == "--gradient_checkpointing_kwargs":
            assert yaml.safe_load(mine) == yaml.safe_load(value)
        elif mine != value:  # only a number may be spelt differently (1 vs 1.0)
            assert float(mine) == float(value), (flag, mine, value)
