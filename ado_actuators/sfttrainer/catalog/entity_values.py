"""The resolved value of every entity field for one measurement: `EntityValues`.

GENERATED from `FIELDS` (catalog/entity.py) by catalog/entity_codegen.py; do not edit by hand.
After changing `FIELDS`, run `.venv/bin/python -m ado_actuators.sfttrainer.catalog.entity_codegen`.
"""

from __future__ import annotations

import pydantic


class EntityValues(pydantic.BaseModel):
    """The resolved value of every field for one measurement (defaults filled in).

    A class of its own, so that what carries one (plan/launch/launch_plan.MeasurementInputs,
    across to the node) names its type. Built by catalog/entity.entity_values, which normalises
    what ado hands back; catalog/entity.domain_problems then checks each value against its
    field's domain. A name is typed `str | None` as pydantic accepts it; where the field's
    domain holds no None, that check refuses None, and code after it may assert it away."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    model_name: str | None
    """Model to fine-tune: a name from the shipped model map or from the actuator configuration's
    model_map."""

    model_max_length: int
    """Maximum sequence length; sequences are right padded and possibly truncated."""

    batch_size: int
    """Effective batch size, split evenly over max(1, number_gpus) devices."""

    number_gpus: int
    """Effective number of GPUs, split evenly over number_nodes; 0 trains on the CPU."""

    gpu_model: str | None = None
    """GPU model (Ray custom resource and the node label nvidia.com/gpu.prod); required when
    number_gpus > 0."""

    dataset_id: str | None = "news-tokens-16384plus-entries-4096"
    """Synthetic dataset to train on (a file under data_directory)."""

    max_steps: int = -1
    """Optimisation steps to run; -1 respects num_train_epochs."""

    num_train_epochs: float = 1.0
    """Epochs to run; ignored when max_steps > 0."""

    stop_after_seconds: float = -1.0
    """Stop at the first step end after this many seconds of training (-1: never). Omits
    train_tokens_per_second and train_tokens_per_gpu_per_second."""

    auto_stop_method: str | None = None
    """WARMUP_60S_STABLE_120S_OR_10_STEPS: stop after >= 60 s warm-up plus the longer of 120 s or
    10 steps, excluding warm-up from the metrics. STEADY_CI95_1PCT: warm-up ends when the
    step times show no trend (Mann-Kendall), then stop once the throughput's 95 % confidence
    interval is within 1 % (at least 20 measured steps), or at auto_stop_max_seconds."""

    auto_stop_max_seconds: float = 80.0
    """STEADY_CI95_1PCT's cap: stop this many seconds after the first step's start, target reached
    or not (the row's metadata says which). Ignored by the other methods."""

    gradient_checkpointing: bool = True
    """Trade a slower backward pass for memory."""

    gradient_checkpointing_use_reentrant: bool = False
    """Use the reentrant checkpoint variant."""

    gradient_accumulation_steps: int = 4
    """Micro-steps accumulated per optimisation step."""

    torch_dtype: str | None = "bfloat16"
    """dtype the weights are loaded in."""

    optim: str | None = "adamw_torch"
    """Optimizer."""

    bf16: bool = False
    """bf16 mixed precision (Ampere or newer)."""

    flash_attn: bool = True
    """Train with flash attention 2. On a CUDA device without the flash_attn package the
    measurement fails (install it, or set this false); without CUDA (number_gpus 0) training
    goes on without it and the result metadata says so."""

    distributed_backend: str | None = "FSDP"
    """Backend of multi-device runs; single-device runs use none."""

    number_nodes: int = 1
    """Nodes the GPUs are spread over, one process per GPU."""

    fms_hf_tuning_version: str | None = "2.1.2"
    """fms-hf-tuning release to train with."""

    enable_roce: bool = False
    """Use RDMA over Converged Ethernet (multi-node runs only)."""

    fast_moe: int = 0
    """Expert-parallel degree (ep_degrees); 0 is off. number_gpus and the model's num_local_experts
    must be divisible by it."""

    fast_kernels: list[str] | None = None
    """[fast_loss, fast_rms_layernorm, fast_rope_embeddings] as strings."""

    r: int = 4
    """LoRA rank."""

    lora_alpha: int = 16
    """LoRA scaling."""

    fsdp_sharding_strategy: str | None = "FULL_SHARD"
    """FSDP sharding strategy."""

    fsdp_state_dict_type: str | None = "FULL_STATE_DICT"
    """FSDP state dict type."""

    fsdp_use_orig_params: bool = True
    """Allow mixed requires_grad inside FSDP units."""

    accelerate_config_mixed_precision: str | None = "no"
    """accelerate's mixed_precision."""

    accelerate_config_fsdp_transformer_layer_cls_to_wrap: str | None = None
    """Layer class FSDP wraps; None lets accelerate use the model's own _no_split_modules."""

    dataset_text_field: str | None = None
    """Dataset column holding the text; None: the dataset's own (`output` for text datasets)."""

    dataset_image_field: str | None = None
    """Dataset column holding images (vision datasets)."""

    remove_unused_columns: bool = True
    """Drop dataset columns the model does not take."""

    dataset_kwargs_skip_prepare_dataset: bool = False
    """Let TRL skip preparing the dataset."""
