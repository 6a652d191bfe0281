"""One training step of a model run through its own code, with the bytes of every live tensor
counted: what `benchmarks/memory_truth.py` checks the predicted peak against, and where the
parts of an architecture the hand-written counter does not know come from (plan/memory/traced.py).

The step is the one fms-hf-tuning 3.x trains (tuning/sft_trainer.py -> TRL's SFTTrainer ->
transformers' Trainer -> accelerate): the model built from its config.json in the training dtype
with `use_cache=False`; PEFT's LoRA (fp32 adapters, PEFT's autocast_adapter_dtype) or prompt
tuning; TRL's input-gradient hook before PEFT when checkpointing is reentrant, then
transformers' gradient checkpointing; the forward with labels (transformers' own loss), TRL's
token-accuracy copy of the logits, backward, gradient clipping, torch's AdamW (foreach, the
Trainer's decay and no-decay groups), and `zero_grad(set_to_none=True)`.

Every tensor an operator returns is counted by its storage until the storage is freed: a
`TorchDispatchMode` sees each op, a weak reference to each storage sees it go. Each storage
carries a part (weights, gradients, optimizer_state, forward, backward, optimizer_temporaries:
where it was created, re-tagged when it becomes a gradient or optimizer state), and each phase
(forward, backward, optimizer_step) keeps its peak with the parts at that moment. Under
`FakeTensorMode` (`fake=True`) no tensor holds memory: the sizes are exact, the values absent,
so a 70B model's step is counted on a laptop. torch, transformers and peft are imported inside
the functions: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from ado_actuators.sfttrainer.contract.memory_trace import ALL_LINEAR, PHASES, StepSpec, TracedStep
from ado_actuators.sfttrainer.plan.memory.trace.objects import Module, Tensor

FLASH_EMULATED = "emulated_flash_attention_2"
"""The name the flash-attn emulation is registered under (flash-attn itself needs CUDA)."""


def _live_bytes_class() -> type:
    """The counting dispatch mode (plan/memory/trace/live_bytes.py imports torch: imported here, lazily)."""
    from ado_actuators.sfttrainer.plan.memory.trace.live_bytes import LiveBytes

    return LiveBytes


def _is_fake(tensor: Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)


_ACTIVE: list[Any] = []
"""The tracker of the step being traced (the flash-attn emulation pauses it while it computes
values flash-attn's kernel computes in place)."""


@contextlib.contextmanager
def _counting(tracker: Any) -> Iterator[Any]:
    """The tracker on, and storage resizes (FSDP frees and refills its flat parameters by
    resizing, which no dispatch sees) counted."""
    import torch

    original = torch.UntypedStorage.resize_

    def resize_(storage: Any, size: int) -> Any:
        result = original(storage, size)
        tracker.resized(storage)
        return result

    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign, assignment]  # for the trace
    _ACTIVE.append(tracker)
    try:
        with tracker:
            yield tracker
    finally:
        _ACTIVE.pop()
        torch.UntypedStorage.resize_ = original  # type: ignore[method-assign]  # restored


@contextlib.contextmanager
def _fake_parameters() -> Iterator[None]:
    """torch refuses to swap a fake parameter (`module.to`, which PEFT calls on each adapter)
    while its fake mode's memo holds a weak reference to it; the memo entries go first."""
    import torch

    original = torch.utils.swap_tensors

    def swap(first: Tensor, second: Tensor) -> Any:
        for tensor in (first, second):
            if _is_fake(tensor):
                memo = tensor.fake_mode.fake_tensor_converter.meta_converter.tensor_memo
                for key in [k for k, v in memo.items() if v is tensor]:
                    del memo[key]
        return original(first, second)  # type: ignore[no-untyped-call]  # untyped in torch

    torch.utils.swap_tensors = swap
    try:
        yield
    finally:
        torch.utils.swap_tensors = original


@contextlib.contextmanager
def _cuda_dropout() -> Iterator[None]:
    """Dropout as CUDA runs it: ATen's `dropout` takes `native_dropout` (a one-byte mask kept
    for backward) on CUDA, and on CPU multiplies by a noise tensor of the input's dtype
    (at::dropout, Dropout.cpp's is_fused_kernel_acceptable). LoRA's dropout keeps the mask."""
    import torch

    original = torch.nn.functional.dropout

    def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if training and 0 < p < 1 and not inplace and input.numel():
            return torch.native_dropout(input, p, True)[0]
        return original(input, p, training, inplace)

    torch.nn.functional.dropout = dropout
    try:
        yield
    finally:
        torch.nn.functional.dropout = original


@contextlib.contextmanager
def _mamba_kernels(assumed: list[str]) -> Iterator[None]:
    """Mamba-2 layers train through mamba_ssm's fused kernel on a GPU: its memory, emulated
    (plan/memory/trace/mamba_emulation.py, imported here: it imports torch)."""
    from ado_actuators.sfttrainer.plan.memory.trace import mamba_emulation

    replaced = mamba_emulation.install(assumed)
    try:
        yield
    finally:
        mamba_emulation.uninstall(replaced)


@contextlib.contextmanager
def _placeholder_mask_unchecked(spec: StepSpec) -> Iterator[None]:
    """LLaVA-NeXT checks that the image tokens match the image's features by indexing the
    embeddings with the mask (`inputs_embeds[mask].numel()`), a copy of their size freed at
    once, and under prompt tuning (PEFT passes embeddings, no ids) finds the image's tokens by
    comparing embeddings: a fake tensor has no values for either, so a fake step skips the
    check (the batch is built to pass it) and makes the mask from the ids it was given."""
    import torch
    from transformers.models.llava_next import modeling_llava_next

    model = modeling_llava_next.LlavaNextModel
    original = model.get_placeholder_mask

    def unchecked(
        self: Any, input_ids: Tensor | None, inputs_embeds: Tensor, image_features: Tensor
    ) -> Any:
        token = self.config.image_token_id
        ids = _image_ids(spec, token)
        virtual = inputs_embeds.shape[1] - spec.length  # prompt tuning's, before the sample
        ids = torch.cat([torch.full((spec.batch, virtual), 0), ids], dim=1) if virtual else ids
        mask = (ids == token).unsqueeze(-1)
        return mask.expand_as(inputs_embeds).to(inputs_embeds.device)

    setattr(model, "get_placeholder_mask", unchecked)  # noqa: B010  # mypy: a method
    try:
        yield
    finally:
        setattr(model, "get_placeholder_mask", original)  # noqa: B010


@contextlib.contextmanager
def _no_change() -> Iterator[None]:
    """Mamba-2 layers through transformers' own torch_forward (no mamba-ssm to emulate)."""
    yield


def trace_step(
    spec: StepSpec, record: bool = False, wrap: Callable[[Any], Any] | None = None
) -> TracedStep:
    """Run `spec.steps` training steps of `spec` and count every live tensor (module docstring).
    `wrap` turns the model into what the distributed plan trains (benchmarks/memory_truth.py
    wraps it in FSDP on gloo ranks), counted from the wrapping on."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    tracker = _live_bytes_class()(record=record, fake=spec.fake)
    fake = FakeTensorMode(allow_non_fake_inputs=True) if spec.fake else contextlib.nullcontext()
    kernels = _mamba_kernels(tracker.assumed) if spec.mamba_scan == "fused" else _no_change()
    checks = _placeholder_mask_unchecked(spec) if spec.fake and _on_images(spec) else _no_change()
    with fake, _fake_parameters(), _cuda_dropout(), kernels, checks:
        torch.manual_seed(0)
        model = build_model(spec)
        found = inventory(model)
        with _counting(tracker):
            _train(wrap(model) if wrap else model, spec, tracker)
    phases = {phase: tracker.peaks[phase][1] for phase in PHASES if phase in tracker.peaks}
    return TracedStep(
        phases=phases,
        events=tuple(tracker.events),
        assumed=tuple(sorted(set(tracker.assumed))),
        rest=tracker.rest,
        inventory=found,
    )


def inventory(model: Module) -> dict[str, Any]:
    """The parameters of a built model, as plan/model/architecture.ParameterCounts counts them: the
    input embeddings, an untied LM head, the norms, the decoder layers (the model's largest
    ModuleList), and every nn.Linear by the name LoRA's target_modules match (its last path
    component), with its shape and how often it occurs. Trainable: what the method trains."""
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    embedding = base.get_input_embeddings().weight
    head = base.get_output_embeddings()
    tied = head is None or head.weight is embedding
    layers: torch.nn.ModuleList | list[Any] = max(
        (m for m in base.modules() if isinstance(m, torch.nn.ModuleList)), key=len, default=[]
    )
    linears: dict[tuple[str, int, int], int] = {}
    for name, module in base.named_modules():
        if isinstance(module, torch.nn.Linear) and "lora_" not in name:
            key = (name.rsplit(".", 1)[-1], module.in_features, module.out_features)
            linears[key] = linears.get(key, 0) + 1
    norms = sum(
        p.numel()
        for m in base.modules()
        if "norm" in type(m).__name__.lower()
        for p in m.parameters(recurse=False)
    )
    return {
        "total": sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n),
        "embedding": embedding.numel(),
        "lm_head": 0 if tied else head.weight.numel(),
        "norms": norms,
        "layers": len(layers),
        "hidden": embedding.shape[-1],
        "linears": [[n, i, o, c] for (n, i, o, c) in ((*k, v) for k, v in linears.items())],
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "model_type": base.config.model_type,
    }


def model_config(config: dict[str, Any], whole: bool = False) -> Any:
    """transformers' config object for a parsed config.json: its language model's, for a
    multimodal one (its text step trains the language model's weights the same way), unless
    `whole` (a step on images: the vision tower and projector too)."""
    from transformers import AutoConfig

    from ado_actuators.sfttrainer.plan.model.shape import language_config

    values = dict(config if whole else language_config(config))
    model_type = values.pop("model_type")
    for key in ("architectures", "auto_map", "transformers_version", "_name_or_path"):
        values.pop(key, None)
    return AutoConfig.for_model(model_type, **values)


def build_model(spec: StepSpec) -> Module:
    """The model as fms-hf-tuning's sft_trainer and TRL's SFTTrainer leave it for training."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    attention = FLASH_EMULATED if spec.attention == "flash_attention_2" else spec.attention
    if attention == FLASH_EMULATED:
        _register_flash_emulation()
    # fms-hf-tuning 3.x loads a vision-language model with AutoModelForVision2Seq
    # (tuning/sft_trainer.py), whose from_config takes no dtype; ImageTextToText maps llava_next
    # to the same class. The vision tower takes the language model's attention.
    auto = AutoModelForImageTextToText if _on_images(spec) else AutoModelForCausalLM
    model = auto.from_config(  # type: ignore[no-untyped-call]  # transformers'
        model_config(spec.config, whole=_on_images(spec)),
        torch_dtype=getattr(torch, spec.torch_dtype),
        attn_implementation=attention,
    )
    model.config.use_cache = False
    if spec.peft_method != "none":
        model = _with_peft(model, spec)
    if spec.checkpointing:
        # transformers' Trainer, at the start of train()
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": spec.checkpointing == "reentrant"}
        )
    model.train()
    return model


def _with_peft(model: Module, spec: StepSpec) -> Module:
    """TRL 0.19's SFTTrainer._prepare_peft_model: under reentrant checkpointing the embedding's
    output is made to require grad (_enable_gradient_checkpointing), then get_peft_model."""
    import peft

    if spec.checkpointing == "reentrant":
        model.enable_input_require_grads()
    config: peft.PeftConfig
    if spec.peft_method == "lora":
        config = peft.LoraConfig(
            r=spec.lora_r,
            lora_alpha=spec.lora_alpha,
            lora_dropout=spec.lora_dropout,
            target_modules=lora_targets(model, spec.target_modules),
            task_type="CAUSAL_LM",
        )
    else:
        # fms-hf-tuning initialises from a text (its tokenizer's ids); a random start holds
        # the same tensors
        config = peft.PromptTuningConfig(
            task_type="CAUSAL_LM",
            num_virtual_tokens=spec.prompt_tokens,
            prompt_tuning_init="RANDOM",
        )
    return peft.get_peft_model(model, config)


def lora_targets(model: Module, requested: tuple[str, ...]) -> Any:
    """LoRA's target_modules for `model` as PEFT takes them: None for PEFT's default, the word
    "all-linear" as PEFT spells it, else the requested names. Names that match none of the
    model's linear layers raise ValueError: PEFT refuses them, so the job would not train
    (plan/model/lora_targets.py answers such a configuration invalid before any trace)."""
    import torch

    if not requested:
        return None
    if ALL_LINEAR in requested:
        return ALL_LINEAR
    names = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
    }
    if names & {target.rsplit(".", 1)[-1] for target in requested}:
        return list(requested)
    raise ValueError(
        f"LoRA's target_modules {', '.join(requested)} name no linear layer of this "
        f"{model.config.model_type} model (its linear layers: {', '.join(sorted(names))})"
    )


def _optimizer(model: Module) -> Any:
    """transformers' Trainer.create_optimizer for adamw_torch: a decay group and a no-decay
    group (norms, biases), weight decay 0 (the experiments' constant), foreach as on CUDA."""
    import torch
    from transformers.trainer_pt_utils import get_parameter_names

    patterns = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
    decay = set(get_parameter_names(model, [torch.nn.LayerNorm], patterns))  # type: ignore[no-untyped-call]  # transformers'
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in named if n in decay], "weight_decay": 0.0},
        {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, foreach=True)


def _on_images(spec: StepSpec) -> bool:
    """The step trains a vision-language model on images (StepSpec.image)."""
    from ado_actuators.sfttrainer.plan.model.vision import VisionShape

    return spec.image is not None and VisionShape.of(spec.config) is not None


def _batch(spec: StepSpec, config: Any) -> dict[str, Any]:
    """What fms-hf-tuning's collator gives for samples longer than max_seq_length: full rows,
    a mask of ones, labels (the prompt's positions -100), and the Trainer's token count; on
    images, the processor's tiles and each sample's image tokens after its first token."""
    import torch

    if _on_images(spec):
        return _image_batch(spec, config)
    vocab = config.vocab_size
    ids = torch.randint(0, vocab, (spec.batch, spec.length))
    return _with_labels(ids)


def _with_labels(ids: Tensor) -> dict[str, Any]:
    import torch

    labels = ids.clone()
    labels[:, : ids.shape[1] // 4] = -100
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": labels,
        "num_items_in_batch": labels.ne(-100).sum(),
    }


def _image_batch(spec: StepSpec, config: Any) -> dict[str, Any]:
    """LlavaNextProcessor's output for `spec.batch` samples of one image each: pixel_values of
    the image's tiles (fp32, as the image processor returns them), its (height, width), and
    `length` ids holding the image's tokens."""
    import torch

    vision, (height, width) = _vision(spec)
    side = vision.image_size
    return {
        **_with_labels(_image_ids(spec, config.image_token_id)),
        "pixel_values": torch.zeros(spec.batch, vision.tiles(height, width), 3, side, side),
        "image_sizes": [[height, width]] * spec.batch,
    }


def _vision(spec: StepSpec) -> tuple[Any, tuple[int, int]]:
    """The vision shape of a step on images, and the image's (height, width)."""
    from ado_actuators.sfttrainer.plan.model.vision import VisionShape

    vision = VisionShape.of(spec.config)
    assert vision is not None and spec.image is not None  # _on_images
    return vision, spec.image


def _image_ids(spec: StepSpec, image_token_id: int) -> Tensor:
    """Each sample's ids: a first token, the image's tokens, text to `length`. Built from
    constants, whose values a fake step keeps (the model reads them to place the image's
    features)."""
    import torch

    vision, (height, width) = _vision(spec)
    image_tokens = vision.image_tokens(height, width)
    if spec.length <= image_tokens:
        raise ValueError(f"length {spec.length}: more than the image's {image_tokens} tokens")
    rows = spec.batch
    return torch.cat(
        [
            torch.full((rows, 1), 1),
            torch.full((rows, image_tokens), image_token_id),
            torch.full((rows, spec.length - 1 - image_tokens), 2),
        ],
        dim=1,
    )


def _train(model: Module, spec: StepSpec, tracker: Any) -> None:
    """transformers' Trainer inner loop (training_step, clip, step, zero_grad), counted."""
    import torch

    optimizer = _optimizer(model)
    for tensor in (*model.parameters(), *model.buffers()):
        tracker.count(tensor, "weights")
    trainable = [p for p in model.parameters() if p.requires_grad]
    for parameter in trainable:
        parameter.register_post_accumulate_grad_hook(lambda p: tracker.count(p.grad, "gradients"))
    config = model.config
    for _ in range(spec.steps):
        for _ in range(spec.accumulation):
            tracker.enter("forward")
            loss = _forward(model, spec, config)
            tracker.enter("backward")
            loss.backward()
            del loss
        tracker.enter("optimizer_step", "optimizer_temporaries")
        torch.nn.utils.clip_grad_norm_(trainable, 1.0, foreach=True)
        optimizer.step()
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    tracker.count(value, "optimizer_state")
        model.zero_grad(set_to_none=True)
        tracker.enter("between_steps", "weights")
    tracker.rest = dict(tracker.parts)  # while the optimizer (and its state) is alive


def _forward(model: Module, spec: StepSpec, config: Any) -> Tensor:
    """Trainer.compute_loss and TRL 0.19.1 SFTTrainer.compute_loss: the model's own loss, then
    the token count and token accuracy TRL logs (a contiguous copy of the logits, argmax)."""
    import torch

    inputs = _batch(spec, config)
    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if spec.mixed_precision
        else contextlib.nullcontext()
    )
    with autocast:
        outputs = model(**inputs)
    if spec.mixed_precision:
        from accelerate.utils import convert_to_fp32

        outputs = convert_to_fp32(outputs)  # accelerate's convert_outputs_to_fp32
    loss, logits = outputs["loss"], outputs.logits
    if spec.peft_method == "pt":
        # the actuator's trainer drops the virtual tokens' logits (trainer/adapt.py)
        logits = logits[:, logits.shape[1] - spec.length :, :]
    # (TRL's .item() calls read values and allocate nothing: left out)
    inputs["attention_mask"].sum()
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = inputs["labels"][..., 1:].contiguous()
    predictions = shift_logits.argmax(dim=-1)
    mask = shift_labels != -100
    correct = ((predictions == shift_labels) & mask).sum()
    correct.sum() / mask.sum()
    return loss


@functools.cache
def _register_flash_emulation() -> None:
    """flash-attn 2's memory, emulated on CPU (plan/memory/trace/flash_emulation.py, imported lazily)."""
    from ado_actuators.sfttrainer.plan.memory.trace import flash_emulation

    flash_emulation.register(FLASH_EMULATED, _paused)


@contextlib.contextmanager
def _paused() -> Iterator[None]:
    """What the emulation computes in place of flash-attn's kernel is not counted."""
    if not _ACTIVE:
        yield
        return
    _ACTIVE[-1].paused += 1
    try:
        yield
    finally:
        _ACTIVE[-1].paused -= 1
