"""Every entity field the SFTTrainer experiments accept, declared once.

Defaults are the spec's documented defaults, with the Python types that ado-core stored for
them in existing sample stores (ado embeds every non-default value in the experiment id, so
`-1` vs `-1.0` or `"FSDP"` vs `None` would silently split memoised results).
The experiments (catalog/experiments.py) and the resolved values of one measurement
(`EntityValues`, the checked-in catalog/entity_values.py that catalog/entity_codegen.py writes)
are both generated from `FIELDS`.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from typing import Any

from ado_actuators.sfttrainer.catalog import datasets

# generated from FIELDS below (catalog/entity_codegen.py), so a type checker sees every field
from ado_actuators.sfttrainer.catalog.entity_values import EntityValues as EntityValues
from ado_actuators.sfttrainer.catalog.names import close_names, did_you_mean
from ado_actuators.sfttrainer.stopping import methods, steady


class Domain(enum.StrEnum):
    CATEGORICAL = "CATEGORICAL_VARIABLE_TYPE"
    OPEN_CATEGORICAL = "OPEN_CATEGORICAL_VARIABLE_TYPE"
    DISCRETE = "DISCRETE_VARIABLE_TYPE"
    BINARY = "BINARY_VARIABLE_TYPE"


FieldValue = bool | int | float | str | list[str] | None
"""A value an entity field takes: BINARY fields a bool, DISCRETE ones an int or a float, the
others a name, fast_kernels a list of them (catalog/entity_codegen.annotation)."""


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    help: str
    domain: Domain
    values: tuple[FieldValue, ...] | None = None  # CATEGORICAL / OPEN_CATEGORICAL (known values)
    range: tuple[float, float] | None = None  # DISCRETE: [low, high) with interval 1
    default: FieldValue = None
    required: bool = False
    fms_flag: str | None = None  # passed verbatim to sft_trainer as `--flag value`

    def normalise(self, value: Any) -> Any:  # what ado hands back is untyped; pydantic checks it
        """ado hands BINARY values back as 0/1 and `None` sometimes as the string 'None'."""
        if self.domain is Domain.BINARY:
            return bool(value)
        if value == "None" and None in (self.values or ()):
            return None
        if self.domain is Domain.DISCRETE and isinstance(value, float) and value.is_integer():
            return value if isinstance(self.default, float) else int(value)
        return value


FMS_HF_TUNING_VERSIONS = (
    "2.0.1",
    "2.1.0",
    "2.1.1",
    "2.1.2",
    "2.2.1",
    "2.3.1",
    "2.4.0",
    "2.5.0",
    "2.6.0",
    "2.7.1",
    "2.8.2",
    "3.0.0",
    "3.0.0.1",
    "3.1.0",
    "3.2.2",
)

GPU_MODELS = (
    None,
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-A100-80GB-PCIe",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-H100-PCIe",
    "Tesla-V100-PCIE-16GB",
    "Tesla-T4",
    "L40S",
)

OPTIMIZERS = (
    "adamw_hf",
    "adamw_torch",
    "adamw_torch_fused",
    "adamw_torch_xla",
    "adamw_torch_npu_fused",
    "adamw_apex_fused",
    "adafactor",
    "adamw_anyprecision",
    "adamw_torch_4bit",
    "ademamix",
    "sgd",
    "adagrad",
    "adamw_bnb_8bit",
    "adamw_8bit",
    "ademamix_8bit",
    "lion_8bit",
    "lion_32bit",
    "paged_adamw_32bit",
    "paged_adamw_8bit",
    "paged_ademamix_32bit",
    "paged_ademamix_8bit",
    "paged_lion_32bit",
    "paged_lion_8bit",
    "rmsprop",
    "rmsprop_bnb",
    "rmsprop_bnb_8bit",
    "rmsprop_bnb_32bit",
    "galore_adamw",
    "galore_adamw_8bit",
    "galore_adafactor",
    "galore_adamw_layerwise",
    "galore_adamw_8bit_layerwise",
    "galore_adafactor_layerwise",
    "lomo",
    "adalomo",
    "grokadamw",
    "schedule_free_adamw",
    "schedule_free_sgd",
)

AUTO_STOP_METHODS = (None, *methods.AUTO_STOP_METHODS)

FAST_KERNEL_SETTINGS = (
    None,
    *(list(combo) for combo in itertools.product(("True", "False"), repeat=3)),
)


def _fields(*fields: Field) -> dict[str, Field]:
    return {f.name: f for f in fields}


FIELDS: dict[str, Field] = _fields(
    # --- required -------------------------------------------------------------------------
    Field(
        "model_name",
        "Model to fine-tune: a name from the shipped model map or from the "
        "actuator configuration's model_map.",
        Domain.OPEN_CATEGORICAL,
        required=True,
    ),
    Field(
        "model_max_length",
        "Maximum sequence length; sequences are right padded and possibly truncated.",
        Domain.DISCRETE,
        range=(1, 131073),
        required=True,
    ),
    Field(
        "batch_size",
        "Effective batch size, split evenly over max(1, number_gpus) devices.",
        Domain.DISCRETE,
        range=(1, 4097),
        required=True,
    ),
    Field(
        "number_gpus",
        "Effective number of GPUs, split evenly over number_nodes; 0 trains on the CPU.",
        Domain.DISCRETE,
        range=(0, 33),
        required=True,
    ),
    # --- optional ---------------------------------------------------------------------------
    Field(
        "gpu_model",
        "GPU model (Ray custom resource and the node label "
        "nvidia.com/gpu.prod); required when number_gpus > 0.",
        Domain.OPEN_CATEGORICAL,
        values=GPU_MODELS,
    ),
    Field(
        "dataset_id",
        "Synthetic dataset to train on (a file under data_directory).",
        Domain.CATEGORICAL,
        values=datasets.DATASET_IDS,
        default=datasets.DEFAULT_DATASET_ID,
    ),
    Field(
        "max_steps",
        "Optimisation steps to run; -1 respects num_train_epochs.",
        Domain.DISCRETE,
        range=(-1, 10001),
        default=-1,
        fms_flag="--max_steps",
    ),
    Field(
        "num_train_epochs",
        "Epochs to run; ignored when max_steps > 0.",
        Domain.DISCRETE,
        range=(1.0, 10001.0),
        default=1.0,
        fms_flag="--num_train_epochs",
    ),
    Field(
        "stop_after_seconds",
        "Stop at the first step end after this many seconds of "
        "training (-1: never). Omits train_tokens_per_second and "
        "train_tokens_per_gpu_per_second.",
        Domain.DISCRETE,
        range=(-1.0, 1000001.0),
        default=-1.0,
    ),
    Field(
        "auto_stop_method",
        "WARMUP_60S_STABLE_120S_OR_10_STEPS: stop after >= 60 s warm-up "
        "plus the longer of 120 s or 10 steps, excluding warm-up from the metrics. "
        "STEADY_CI95_1PCT: warm-up ends when the step times show no trend (Mann-Kendall), then "
        "stop once the throughput's 95 % confidence interval is within 1 % (at least 20 "
        "measured steps), or at auto_stop_max_seconds.",
        Domain.CATEGORICAL,
        values=AUTO_STOP_METHODS,
    ),
    Field(
        "auto_stop_max_seconds",
        "STEADY_CI95_1PCT's cap: stop this many seconds after the "
        "first step's start, target reached or not (the row's metadata says which). Ignored "
        "by the other methods.",
        Domain.DISCRETE,
        range=(1.0, 86401.0),
        default=steady.DEFAULT_MAX_SECONDS,
    ),
    Field(
        "gradient_checkpointing",
        "Trade a slower backward pass for memory.",
        Domain.BINARY,
        default=True,
        fms_flag="--gradient_checkpointing",
    ),
    Field(
        "gradient_checkpointing_use_reentrant",
        "Use the reentrant checkpoint variant.",
        Domain.BINARY,
        default=False,
    ),
    Field(
        "gradient_accumulation_steps",
        "Micro-steps accumulated per optimisation step.",
        Domain.DISCRETE,
        range=(1, 33),
        default=4,
        fms_flag="--gradient_accumulation_steps",
    ),
    Field(
        "torch_dtype",
        "dtype the weights are loaded in.",
        Domain.CATEGORICAL,
        values=("bfloat16", "float16", "float32"),
        default="bfloat16",
        fms_flag="--torch_dtype",
    ),
    Field(
        "optim",
        "Optimizer.",
        Domain.CATEGORICAL,
        values=OPTIMIZERS,
        default="adamw_torch",
        fms_flag="--optim",
    ),
    Field(
        "bf16",
        "bf16 mixed precision (Ampere or newer).",
        Domain.BINARY,
        default=False,
        fms_flag="--bf16",
    ),
    Field(
        "flash_attn",
        "Train with flash attention 2. On a CUDA device without the flash_attn "
        "package the measurement fails (install it, or set this false); without CUDA "
        "(number_gpus 0) training goes on without it and the result metadata says so.",
        Domain.BINARY,
        default=True,
        fms_flag="--use_flash_attn",
    ),
    Field(
        "distributed_backend",
        "Backend of multi-device runs; single-device runs use none.",
        Domain.CATEGORICAL,
        values=("FSDP", "DDP", "None"),
        default="FSDP",
    ),
    Field(
        "number_nodes",
        "Nodes the GPUs are spread over, one process per GPU.",
        Domain.DISCRETE,
        range=(1, 9),
        default=1,
    ),
    Field(
        "fms_hf_tuning_version",
        "fms-hf-tuning release to train with.",
        Domain.CATEGORICAL,
        values=FMS_HF_TUNING_VERSIONS,
        default="2.1.2",
    ),
    Field(
        "enable_roce",
        "Use RDMA over Converged Ethernet (multi-node runs only).",
        Domain.BINARY,
        default=False,
    ),
    Field(
        "fast_moe",
        "Expert-parallel degree (ep_degrees); 0 is off. number_gpus and the "
        "model's num_local_experts must be divisible by it.",
        Domain.DISCRETE,
        range=(0, 33),
        default=0,
    ),
    Field(
        "fast_kernels",
        "[fast_loss, fast_rms_layernorm, fast_rope_embeddings] as strings.",
        Domain.CATEGORICAL,
        values=FAST_KERNEL_SETTINGS,
    ),
    Field("r", "LoRA rank.", Domain.DISCRETE, range=(1, 33), default=4, fms_flag="--r"),
    Field(
        "lora_alpha",
        "LoRA scaling.",
        Domain.DISCRETE,
        range=(1, 33),
        default=16,
        fms_flag="--lora_alpha",
    ),
    Field(
        "fsdp_sharding_strategy",
        "FSDP sharding strategy.",
        Domain.CATEGORICAL,
        values=("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"),
        default="FULL_SHARD",
    ),
    Field(
        "fsdp_state_dict_type",
        "FSDP state dict type.",
        Domain.CATEGORICAL,
        values=("FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"),
        default="FULL_STATE_DICT",
    ),
    Field(
        "fsdp_use_orig_params",
        "Allow mixed requires_grad inside FSDP units.",
        Domain.BINARY,
        default=True,
    ),
    Field(
        "accelerate_config_mixed_precision",
        "accelerate's mixed_precision.",
        Domain.CATEGORICAL,
        values=("no", "fp16", "bf16", "fp8"),
        default="no",
    ),
    Field(
        "accelerate_config_fsdp_transformer_layer_cls_to_wrap",
        "Layer class FSDP wraps; None lets accelerate use the model's own _no_split_modules.",
        Domain.OPEN_CATEGORICAL,
        values=(
            None,
            "GraniteDecoderLayer",
            "LlamaDecoderLayer",
            "MistralDecoderLayer",
            "MixtralDecoderLayer",
            "GPTBigCodeBlock",
            "GPTJBlock",
            "T5Block",
            "BertLayer",
        ),
    ),
    Field(
        "dataset_text_field",
        "Dataset column holding the text; None: the dataset's own (`output` for text datasets).",
        Domain.OPEN_CATEGORICAL,
        values=(None, "output", "messages"),
    ),
    Field(
        "dataset_image_field",
        "Dataset column holding images (vision datasets).",
        Domain.OPEN_CATEGORICAL,
        values=(None, "images"),
    ),
    Field(
        "remove_unused_columns",
        "Drop dataset columns the model does not take.",
        Domain.BINARY,
        default=True,
        fms_flag="--remove_unused_columns",
    ),
    Field(
        "dataset_kwargs_skip_prepare_dataset",
        "Let TRL skip preparing the dataset.",
        Domain.BINARY,
        default=False,
    ),
)

REQUIRED = tuple(name for name, f in FIELDS.items() if f.required)


def entity_values(
    values: dict[str, Any],  # ado's entity and parameterization, untyped until validated here
    overrides: dict[str, FieldValue] | None = None,
) -> EntityValues:
    """Build `EntityValues` from what ado passes (entity + parameterization), normalised.

    `overrides` are experiment-specific defaults (e.g. GPTQ's float16) applied first.
    """
    merged = {**(overrides or {}), **values}
    known = {k: FIELDS[k].normalise(v) for k, v in merged.items() if k in FIELDS}
    return EntityValues(**known)


def fields_command(experiment: str) -> str:
    """The command that lists `experiment`'s fields, as it runs (the actuator's name too)."""
    return f"`ado describe experiment SFTTrainer.{experiment}` lists the fields"


def unknown_fields(names: list[Any], where: str, experiment: str) -> str:
    """The one line that answers names which are no entity field, wherever they are met (a
    space's entitySpace or parameterization, an entity): each name with the field it was
    likely meant as, and the command that lists the fields, as it runs."""
    named = ", ".join(f"{name!r}{did_you_mean(name, FIELDS)}" for name in names)
    noun = "an unknown field" if len(names) == 1 else "unknown fields"
    return f"{where} names {noun} {named}: {fields_command(experiment)}"


def misspelt_fields(given: set[str]) -> list[str]:
    """The names of `given` that are no entity field and whose closest field (the one the
    hint names) `given` lacks: a typo (`batch_sise` for `batch_size`), which ado-core drops
    from what it hands the actuator (the field's default is measured instead, or "no value
    for required property" said). A name close to no field, or to a field also given, may be
    another actuator's property: it is let through."""
    return sorted(
        name
        for name in given - FIELDS.keys()
        if any(close not in given for close in close_names(name, FIELDS))
    )


# Lower bounds the spec's validity rules answer with is_valid = 0 instead (catalog/validity.py).
_BOUNDS_LEFT_TO_VALIDITY = {"batch_size", "number_nodes"}


def domain_problems(values: EntityValues) -> list[str]:
    """Values of `values` outside the domain their field declares.

    ado checks a space against the experiments' domains, but parameterizations, hand-made
    entities and other clients reach the actuator too: such a value must end in an error
    naming the field, not in a crash of the planner or the trainer.
    """
    problems = []
    for name, field in FIELDS.items():
        value = getattr(values, name)
        if field.domain is Domain.DISCRETE:
            assert field.range is not None, name  # every DISCRETE field declares its range
            low, high = field.range
            if name in _BOUNDS_LEFT_TO_VALIDITY:
                low = float("-inf")
            if not low <= value < high:
                problems.append(
                    f"{name} {value!r} is outside its domain [{field.range[0]:g}, "
                    f"{field.range[1] - 1:g}]"
                )
        elif field.domain is Domain.CATEGORICAL and value not in (known := field.values or ()):
            listed = [v for v in known if v is not None]
            # the likely fix before the list, which can be long
            hint = did_you_mean(value, map(str, listed))
            shown = ", ".join(map(repr, listed))
            problems.append(f"{name} {value!r} is not one of its values{hint}: {shown}")
        elif isinstance(value, str) and (not value.isprintable() or not value.strip()):
            problems.append(f"{name} {value!r} must be a non-empty name without control characters")
    return problems
