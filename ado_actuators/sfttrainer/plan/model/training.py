"""One measurement's training configuration, read once from the entity, its experiment and the
model's config.json: what the memory formula, the memory trace, the speed model and the preview
all read, each through a projection of its own (plan/memory/verdict.py, plan/memory/traced.py,
plan/speed/prediction.py). A quantity that decides memory or speed is read from the entity here
and nowhere else, under one name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from ado_actuators.sfttrainer.catalog.datasets import get_shape
from ado_actuators.sfttrainer.catalog.entity import EntityValues
from ado_actuators.sfttrainer.catalog.experiments import ExperimentDefinition, catalog_data
from ado_actuators.sfttrainer.contract.memory_trace import Attention
from ado_actuators.sfttrainer.plan.model.architecture import (
    ADAPTER_BYTES,
    DTYPE_BYTES,
    PROMPT_TUNING_VIRTUAL_TOKENS,
    ParameterCounts,
    model_length,
    virtual_tokens,
)
from ado_actuators.sfttrainer.plan.model.geometry import per_device_batch
from ado_actuators.sfttrainer.plan.model.releases import attention_for, checkpointing_for
from ado_actuators.sfttrainer.plan.model.shape import ModelShape

PeftMethod = Literal["none", "lora", "pt"]
Checkpointing = Literal["none", "reentrant", "non_reentrant"]
FlashBuild = Literal["flash-attn", "triton"]
GradientSync = Literal["last", "each"]

CHARS_PER_TOKEN = 4
"""English news text's characters per token (the chars datasets' entries are input and response
of `chars` characters each): an assumption the speed prediction's notes state."""
_TRUE_WORDS = ("yes", "true", "t", "y", "1")
_FALSE_WORDS = ("no", "false", "f", "n", "0")


@dataclasses.dataclass(frozen=True)
class FastKernels:
    """fms-hf-tuning's `--fast_kernels A B C` (tuning/config/acceleration_configs/
    fused_ops_and_kernels.py's FastKernelsConfig: fast_loss, fast_rms_layernorm,
    fast_rope_embeddings), each word parsed as its parser parses it (transformers'
    string_to_bool: "true", "True", "yes", "1" alike)."""

    fast_loss: bool = False
    fast_rms_layernorm: bool = False
    fast_rope_embeddings: bool = False

    @classmethod
    def of(cls, words: list[str] | tuple[str, ...] | None) -> FastKernels:
        flags = [_word_to_bool(word) for word in words or ()]
        return cls(*flags[:3])

    @property
    def any(self) -> bool:
        return self.fast_loss or self.fast_rms_layernorm or self.fast_rope_embeddings


def _word_to_bool(word: str) -> bool:
    lowered = str(word).lower()
    if lowered in _TRUE_WORDS:
        return True
    if lowered in _FALSE_WORDS:
        return False
    raise ValueError(f"fast_kernels: {word!r} is not a truth value (use True or False)")


@dataclasses.dataclass(frozen=True)
class Tuning:
    """What trains: every weight (method none), LoRA's adapters, or prompt tuning's virtual
    tokens."""

    method: PeftMethod = "none"
    lora_r: int = 8
    lora_alpha: int = 16
    target_modules: tuple[str, ...] = ()
    fused_lora: bool = False  # fms-acceleration's fused LoRA kernels (GPTQ-LoRA's experiment)

    def count(self, counts: ParameterCounts) -> int:
        """The parameters that train in a model of these counts."""
        every = (*counts.linears, *counts.vision_linears)  # PEFT matches the tower's names too
        linears = ((s.name, s.inputs, s.outputs, s.count) for s in every)
        return self.count_of(linears, counts.hidden_size, counts.total)

    def count_of(
        self, linears: Iterable[tuple[str, int, int, int]], hidden: int, total: int
    ) -> int:
        """The trainable parameters of a model of `total` parameters and `hidden` width whose
        linear layers are (name, inputs, outputs, count)."""
        if self.method == "lora":
            # PEFT matches a target name against the end of every module's name, so a name can
            # match several shapes (GPTBigCode's attn.c_proj and mlp.c_proj); names this cannot
            # size (e.g. a model-specific module) add nothing.
            wanted = set(self.target_modules)
            return sum(self.lora_r * (i + o) * c for name, i, o, c in linears if name in wanted)
        if self.method == "pt":
            return PROMPT_TUNING_VIRTUAL_TOKENS * hidden
        return total

    @property
    def base_frozen(self) -> bool:
        """The model's own weights get no gradient: LoRA's and prompt tuning's."""
        return self.method in ("lora", "pt")

    @property
    def adapted_modules(self) -> tuple[str, ...]:
        """The modules LoRA adapts (none for another method)."""
        return self.target_modules if self.method == "lora" else ()

    @property
    def virtual_tokens(self) -> int:
        """Prompt tuning's virtual tokens, prepended to every sample."""
        return virtual_tokens(self.method)


@dataclasses.dataclass(frozen=True)
class Parallelism:
    """Where it trains: the devices, the nodes they are spread over, and how they share work."""

    gpus: int = 1  # 0 trains on the CPU
    nodes: int = 1
    backend: str = "FSDP"  # FSDP | DDP | "None" (torch DataParallel on one node)
    fsdp_sharding_strategy: str = "FULL_SHARD"
    fast_moe: int = 0  # expert-parallel degree, 0 off
    gpu_model: str | None = None
    # when a step's gradients are reduced across devices: after its last micro-batch alone
    # (transformers' Trainer runs the others under FSDP's or DDP's no_sync, holding them whole),
    # or after each (Composer and llama-recipes under FSDP, DeepSpeed's ZeRO: public runs the
    # benchmarks price)
    gradient_sync: GradientSync = "last"

    @property
    def sharded(self) -> bool:
        """FSDP over several GPUs: the weights are sharded, and gathered for each pass."""
        return self.gpus > 1 and self.backend == "FSDP"


@dataclasses.dataclass(frozen=True)
class Batch:
    """What one device trains per optimizer step."""

    per_device_batch: int = 1  # samples per micro-batch on each device
    model_max_length: int = 1024  # every sample padded or truncated to it
    sample_tokens: int = 1024  # the tokens a sample of the dataset holds, at most the above
    gradient_accumulation_steps: int = 1


@dataclasses.dataclass(frozen=True)
class Precision:
    """The weights' dtype, the autocast over them, and the optimizer that keeps their states."""

    torch_dtype: str = "bfloat16"
    # bf16/fp16 autocast: the entity's bf16 flag, the experiment's, or accelerate's
    mixed_precision: bool = False
    autocast_dtype: str | None = None  # what autocast computes in; None: the weights' own bits
    optim: str = "adamw_torch"

    @property
    def weight_bytes(self) -> int:
        """Bytes per weight in the loaded dtype (2 for a dtype the table lacks)."""
        return DTYPE_BYTES.get(self.torch_dtype, 2)


@dataclasses.dataclass(frozen=True)
class Kernels:
    """The kernels the step runs: attention, fms-acceleration's fused ones, checkpointing."""

    flash_attention: bool = False  # the entity asks for flash-attn 2 (--use_flash_attn)
    # what runs: flash-attn 2 where asked for, else the pinned release's default for the family
    attention: Attention = "sdpa"
    fast_kernels: FastKernels = FastKernels()
    checkpointing: Checkpointing = "none"
    # whose kernels run flash attention: flash-attn's CUDA ones (what --use_flash_attn installs),
    # or the Triton port some public runs priced against used (llm-foundry's attn_impl: triton)
    flash_build: FlashBuild = "flash-attn"
    # the release's model forward checkpoints each layer's call, so an FSDP unit runs inside the
    # checkpoint (transformers before 4.52: plan/model/releases.checkpointing's "model")
    checkpointed_by_model: bool = False

    @property
    def gradient_checkpointing(self) -> bool:
        return self.checkpointing != "none"


@dataclasses.dataclass(frozen=True)
class TrainingConfiguration:
    """What is trained, how and where, for one measurement, in small parts that memory, speed,
    the trace and the launch read directly; `config` is the model's config.json (None, with
    `config_problem` saying why, where it could not be found), `shape` its shapes, read once
    from it (plan/model/shape.py): a dataclasses.replace of `config` passes `shape=None` beside
    it, or the old shape is kept. Every part has defaults, so a test or a benchmark states only
    what it varies."""

    model_name: str = ""
    weights_format: str = "Vanilla"
    tuning: Tuning = Tuning()
    parallelism: Parallelism = Parallelism()
    batch: Batch = Batch()
    precision: Precision = Precision()
    kernels: Kernels = Kernels()
    fms_hf_tuning_version: str = ""
    dataset_id: str = ""
    config: dict[str, Any] | None = None
    config_problem: str | None = None
    shape: ModelShape | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # built with a config.json but no shape (a test's, a replaced config's): read it here
        if self.shape is None and self.config is not None:
            object.__setattr__(self, "shape", ModelShape.of(self.config))

    @property
    def fsdp_upcast(self) -> bool:
        """accelerate upcasts FSDP's flat parameters to fp32 under mixed precision: FSDP runs
        wherever accelerate launches more than one rank (plan/launch/launch_plan.py)."""
        return (
            self.precision.mixed_precision
            and self.parallelism.backend == "FSDP"
            and self.parallelism.gpus > 1
        )

    @property
    def gradients_whole_between_micro_batches(self) -> bool:
        """Whether FSDP's devices hold the whole of the gradients, not their shards, between a
        step's micro-batches: FSDP over several devices, more than one micro-batch a step, the
        gradients reduced after the last alone. transformers' Trainer runs the others under
        FSDP's no_sync, which "will accumulate the full model gradients (instead of gradient
        shards) until the eventual sync" (torch's FullyShardedDataParallel.no_sync). The memory
        bound and peak hold them so, and the step time accumulates into them."""
        return (
            self.parallelism.sharded
            and self.batch.gradient_accumulation_steps > 1
            and self.parallelism.gradient_sync == "last"
        )

    @property
    def trained_weight_bytes(self) -> int:
        """Bytes of a trained weight, its gradient and each state in the parameter's dtype, as
        clipping, the optimizer and gradient accumulation pass over them: PEFT's adapters and
        prompt embeddings in fp32 (ADAPTER_BYTES), FSDP's upcast flat parameters in fp32, else
        the loaded dtype."""
        width = self.precision.weight_bytes
        if self.tuning.method != "none" or self.fsdp_upcast:
            return max(width, ADAPTER_BYTES)
        return width

    @property
    def sequence_tokens(self) -> int:
        """The positions a sample runs through the layers: its tokens and, under prompt tuning,
        the virtual tokens prepended to it (the throughput counts only the sample's)."""
        return self.batch.sample_tokens + self.tuning.virtual_tokens

    @property
    def positions_per_micro_batch(self) -> int:
        """The positions one micro-batch runs through the layers on a device."""
        return self.batch.per_device_batch * self.sequence_tokens

    @property
    def model_length(self) -> int:
        """The sequence the layers see: the sample and, under prompt tuning, its virtual tokens."""
        return model_length(self.tuning.method, self.batch.model_max_length)

    @classmethod
    def of(
        cls,
        values: EntityValues,
        definition: ExperimentDefinition,
        config: dict[str, Any] | None,
        config_problem: str | None = None,
    ) -> TrainingConfiguration:
        """From the entity's values (the experiment's fixed values applied), its experiment and
        the model's config.json."""
        version = _named(values.fms_hf_tuning_version, "fms_hf_tuning_version")
        shape = ModelShape.of(config) if config is not None else None
        model_type = shape.model_type if shape else ""
        return cls(
            model_name=_named(values.model_name, "model_name"),
            weights_format=definition.weights_format,
            tuning=_tuning(values, definition),
            parallelism=Parallelism(
                gpus=values.number_gpus,
                nodes=values.number_nodes,
                backend=str(values.distributed_backend),
                fsdp_sharding_strategy=_named(
                    values.fsdp_sharding_strategy, "fsdp_sharding_strategy"
                ),
                fast_moe=values.fast_moe,
                gpu_model=values.gpu_model,
            ),
            batch=_batch(values, shape),
            precision=_precision(values, definition),
            kernels=_kernels(
                values,
                definition,
                attention_for(version, model_type, bool(values.flash_attn)),
                checkpointing_for(version, model_type) == "model",
            ),
            fms_hf_tuning_version=version,
            dataset_id=_named(values.dataset_id, "dataset_id"),
            config=config,
            config_problem=config_problem,
            shape=shape,
        )


def _batch(values: EntityValues, shape: ModelShape | None) -> Batch:
    """The micro-batch: a vision dataset's samples on a vision model are as long as their text
    and image tokens, whatever model_max_length says (`vision_sample_tokens`)."""
    dataset = _named(values.dataset_id, "dataset_id")
    length = values.model_max_length
    vision = vision_sample_tokens(dataset, shape)
    return Batch(
        per_device_batch=per_device_batch(values),
        model_max_length=vision.total if vision else length,
        sample_tokens=vision.total if vision else sample_tokens(dataset, length),
        gradient_accumulation_steps=values.gradient_accumulation_steps,
    )


@dataclasses.dataclass(frozen=True)
class VisionSample:
    """One sample of a vision dataset as a vision-language model's language model sees it."""

    text_tokens: int  # the dataset's floor: its entries' responses alone hold that many
    image_tokens: int  # one image's, plan/model/vision.py
    tiles: int  # the tiles the vision tower encodes for it

    @property
    def total(self) -> int:
        return self.text_tokens + self.image_tokens


def vision_sample_tokens(dataset_id: str, shape: ModelShape | None) -> VisionSample | None:
    """A vision dataset's sample on a vision-language model, None for any other pairing.

    Not truncated: fms-hf-tuning 3.2.2's VisionDataCollator (tuning/data/collators.py) calls
    the processor with `return_tensors` and `padding` only (setup_dataprocessor's
    processor_kwargs), no `max_length`, so model_max_length caps nothing; the text is counted
    at the dataset's floor of `min_tokens` (cli/vision_data.py: at least that many words in
    the response alone)."""
    if shape is None or shape.vision is None:
        return None
    try:
        data = get_shape(dataset_id)
    except (KeyError, ValueError):
        return None
    if data.kind != "vision" or not data.image_width or not data.image_height:
        return None
    height, width = data.image_height, data.image_width
    return VisionSample(
        text_tokens=data.min_tokens or 0,
        image_tokens=shape.vision.image_tokens(height, width),
        tiles=shape.vision.tiles(height, width),
    )


def tower_adapted(configuration: TrainingConfiguration) -> tuple[str, ...]:
    """The vision tower's linears LoRA adapts: their names among the target modules (PEFT
    matches a target by the module's last name, and `q_proj`, `v_proj` name the tower's
    attention too)."""
    shape = configuration.shape
    if configuration.tuning.method != "lora" or shape is None or shape.vision is None:
        return ()
    names = {name for name, *_ in shape.vision.tower_linears}
    return tuple(sorted(names & set(configuration.tuning.target_modules)))


def tower_backward(configuration: TrainingConfiguration) -> bool:
    """Whether a vision-language model's tower runs a backward: full fine-tuning trains it;
    LoRA when it adapts the tower's linears, except under reentrant checkpointing: TRL's
    input-gradient hook is on the language model's embedding, so no checkpointed tower layer
    gets an input that needs a gradient, torch's reentrant checkpoint records nothing, and the
    tower's adapters get no gradient (the memory trace's granite-vision rows show it)."""
    if configuration.tuning.method == "none":
        return True
    return bool(tower_adapted(configuration)) and configuration.kernels.checkpointing != (
        "reentrant"
    )


def untrained_tower_adapters(configuration: TrainingConfiguration) -> str | None:
    """What to tell a user whose LoRA targets the tower under reentrant checkpointing."""
    adapted = tower_adapted(configuration)
    if not adapted or tower_backward(configuration):
        return None
    return (
        f"the vision tower's LoRA adapters ({', '.join(adapted)}) get no gradient under "
        f"reentrant checkpointing (the input-gradient hook is on the language model's "
        f"embedding, not the tower's): only the language model's adapters train; "
        f"gradient_checkpointing_use_reentrant false trains both"
    )


def _tuning(values: EntityValues, definition: ExperimentDefinition) -> Tuning:
    return Tuning(
        method=_peft_method(definition.peft_method),
        lora_r=values.r,
        lora_alpha=values.lora_alpha,
        target_modules=tuple(
            catalog_data().target_modules(_named(values.model_name, "model_name"))
        ),
        fused_lora=bool(definition.sft_trainer_arguments.get("fused_lora")),
    )


def _precision(values: EntityValues, definition: ExperimentDefinition) -> Precision:
    mixed = precision_of(values, definition)
    return Precision(
        torch_dtype=_named(values.torch_dtype, "torch_dtype"),
        mixed_precision=mixed is not None,
        autocast_dtype=AUTOCAST_DTYPES.get(mixed or ""),
        optim=_named(values.optim, "optim"),
    )


def _kernels(
    values: EntityValues,
    definition: ExperimentDefinition,
    attention: Attention,
    checkpointed_by_model: bool,
) -> Kernels:
    checkpointing: Checkpointing = "none"
    if values.gradient_checkpointing:
        reentrant = values.gradient_checkpointing_use_reentrant
        checkpointing = "reentrant" if reentrant else "non_reentrant"
    return Kernels(
        flash_attention=bool(values.flash_attn),
        attention=attention,
        fast_kernels=FastKernels.of(fast_kernel_words(values, definition.sft_trainer_arguments)),
        checkpointing=checkpointing,
        checkpointed_by_model=checkpointed_by_model,
    )


AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
"""The dtype autocast computes in under each mixed precision (fp8: none, the weights' own)."""


def precision_of(values: EntityValues, definition: ExperimentDefinition) -> str | None:
    """The mixed precision the trainer runs under, None for none: HF's `--bf16` (the entity's
    bf16), else an `--fp16`/`--bf16` the experiment passes (GPTQ-LoRA's `fp16 true`, parsed as
    fms-hf-tuning parses it), else accelerate's mixed_precision."""
    if values.bf16:
        return "bf16"
    for flag in ("bf16", "fp16"):
        words = definition.sft_trainer_arguments.get(flag)
        if words and _word_to_bool(words[0]):
            return flag
    accelerate = values.accelerate_config_mixed_precision
    return accelerate if accelerate and accelerate != "no" else None


def fast_kernel_words(
    values: EntityValues, sft_trainer_arguments: Mapping[str, list[str]]
) -> list[str] | None:
    """The words fms-hf-tuning is given after `--fast_kernels`: the entity's own, in place of its
    experiment's arguments' (GPTQ-LoRA passes `true true true`); None where neither asks for
    the kernels."""
    if values.fast_kernels is not None:
        return [str(word).lower() for word in values.fast_kernels]
    return sft_trainer_arguments.get("fast_kernels")


def _named(value: str | None, field: str) -> str:
    """A name whose domain holds no None (the entity's domain is checked before a configuration
    is built: engine/measurement.resolve)."""
    if value is None:
        raise ValueError(f"{field} is required: the entity gives none")
    return value


def _peft_method(name: str) -> PeftMethod:
    if name == "lora":
        return "lora"
    if name == "pt":
        return "pt"
    if name == "none":
        return "none"
    raise ValueError(f"peft_method {name!r}: none, lora or pt")


def sample_tokens(dataset_id: str, model_max_length: int) -> int:
    """Tokens per sample: the length for the tokens datasets (every entry is longer and
    truncated), an entry's estimated tokens for the chars ones when shorter."""
    try:
        shape = get_shape(dataset_id)
    except (KeyError, ValueError):
        return model_max_length
    if shape.length_unit == "chars" and shape.chars:
        return min(model_max_length, -(-2 * shape.chars // CHARS_PER_TOKEN))
    return model_max_length
