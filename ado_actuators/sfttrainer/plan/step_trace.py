"""One training step of a model run through its own code, with the bytes of every live tensor
counted: what `benchmarks/memory_truth.py` checks the predicted peak against, and where the
parts of an architecture the hand-written counter does not know come from (plan/traced_parts.py).

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
import dataclasses
import functools
import weakref
from collections.abc import Iterator
from typing import Any

PARTS = ("weights", "gradients", "optimizer_state", "forward", "backward", "optimizer_temporaries")
PHASES = ("forward", "backward", "optimizer_step")
ATTENTION = ("flash_attention_2", "sdpa", "eager")
FLASH_EMULATED = "emulated_flash_attention_2"
"""The name the flash-attn emulation is registered under (flash-attn itself needs CUDA)."""


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """What decides a step's tensors: the model, the method, the shapes, the code paths."""

    config: dict[str, Any]
    peft_method: str = "none"  # none | lora | pt
    target_modules: tuple[str, ...] = ()
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    prompt_tokens: int = 8
    torch_dtype: str = "bfloat16"
    attention: str = "flash_attention_2"  # flash_attention_2 (emulated) | sdpa | eager
    checkpointing: str | None = None  # None | "reentrant" | "non_reentrant"
    mixed_precision: bool = False  # accelerate's bf16 autocast, outputs converted to fp32
    batch: int = 1
    length: int = 64
    accumulation: int = 1
    steps: int = 2
    fake: bool = True

    def __post_init__(self) -> None:
        assert self.peft_method in ("none", "lora", "pt"), self.peft_method
        assert self.attention in ATTENTION, self.attention
        assert self.checkpointing in (None, "reentrant", "non_reentrant"), self.checkpointing


@dataclasses.dataclass(frozen=True)
class StepTrace:
    """Per phase, the live bytes by part at the phase's peak (the largest over the steps)."""

    phases: dict[str, dict[str, int]]
    events: tuple[tuple[int, ...], ...] = ()
    """With `record=True`: after every op, (phase index, bytes of each of PARTS)."""
    assumed: tuple[str, ...] = ()
    """Values a fake tensor cannot give, assumed for the code's own checks (e.g. a padding mask
    of ones: `mask.all()` is True)."""

    def total(self, phase: str) -> int:
        return sum(self.phases[phase].values())

    @property
    def peak(self) -> int:
        return max(self.total(phase) for phase in self.phases)

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.total)


@functools.cache
def _live_bytes_class() -> type:
    """The counting dispatch mode (a class made on first use: its base needs torch)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map_only

    class LiveBytes(TorchDispatchMode):
        def __init__(self, record: bool = False) -> None:
            super().__init__()
            self.storages: dict[int, list] = {}  # id -> [weakref, bytes, part]
            self.parts = dict.fromkeys(PARTS, 0)
            self.phase, self.part = "setup", "weights"
            self.peaks: dict[str, tuple[int, dict[str, int]]] = {}
            self.record = record
            self.events: list[tuple[int, ...]] = []
            self.assumed: list[str] = []
            self.paused = 0

        def count(self, tensor: Any, part: str | None = None) -> None:
            storage = tensor.untyped_storage()
            key = id(storage)
            known = self.storages.get(key)
            if known is not None and known[0]() is storage:
                if part is not None and known[2] != part:
                    self.parts[known[2]] -= known[1]
                    self.parts[part] += known[1]
                    known[2] = part
                return
            size, part = storage.nbytes(), part or self.part
            self.storages[key] = [
                weakref.ref(storage, functools.partial(self._gone, key)),
                size,
                part,
            ]
            self.parts[part] += size

        def _gone(self, key: int, _ref: Any) -> None:
            known = self.storages.pop(key, None)
            if known is not None:
                self.parts[known[2]] -= known[1]

        def resized(self, storage: Any) -> None:
            known = self.storages.get(id(storage))
            if known is not None and known[0]() is storage:
                self.parts[known[2]] += storage.nbytes() - known[1]
                known[1] = storage.nbytes()
                self.note()

        def note(self) -> None:
            total = sum(self.parts.values())
            best = self.peaks.get(self.phase)
            if best is None or total > best[0]:
                self.peaks[self.phase] = (total, dict(self.parts))
            if self.record and self.phase in PHASES:
                self.events.append((PHASES.index(self.phase), *self.parts.values()))

        def enter(self, phase: str, part: str | None = None) -> None:
            self.phase, self.part = phase, part or phase
            self.note()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if (
                func is torch.ops.aten._local_scalar_dense.default
                and _is_fake(args[0])
                and args[0].dtype == torch.bool
            ):
                return self._assume(args[0])
            out = func(*args, **(kwargs or {}))
            if not self.paused:
                tree_map_only(torch.Tensor, self.count, out)
                self.note()
            return out

        def _assume(self, tensor: Any) -> bool:
            # a fake tensor has no value; the model's own checks of its inputs ask for one
            # (`padding_mask.all()`, true for the mask of ones fms-hf-tuning's collator gives
            # full rows). Any other value a fake step asks for fails the trace.
            self.assumed.append("a boolean check of the inputs is true")
            return True

    return LiveBytes


def _is_fake(tensor: Any) -> bool:
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

    torch.UntypedStorage.resize_ = resize_
    _ACTIVE.append(tracker)
    try:
        with tracker:
            yield tracker
    finally:
        _ACTIVE.pop()
        torch.UntypedStorage.resize_ = original


@contextlib.contextmanager
def _fake_parameters() -> Iterator[None]:
    """torch refuses to swap a fake parameter (`module.to`, which PEFT calls on each adapter)
    while its fake mode's memo holds a weak reference to it; the memo entries go first."""
    import torch

    original = torch.utils.swap_tensors

    def swap(first: Any, second: Any) -> Any:
        for tensor in (first, second):
            if _is_fake(tensor):
                memo = tensor.fake_mode.fake_tensor_converter.meta_converter.tensor_memo
                for key in [k for k, v in memo.items() if v is tensor]:
                    del memo[key]
        return original(first, second)

    torch.utils.swap_tensors = swap
    try:
        yield
    finally:
        torch.utils.swap_tensors = original


def trace_step(spec: StepSpec, record: bool = False) -> StepTrace:
    """Run `spec.steps` training steps of `spec` and count every live tensor (module docstring)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    tracker = _live_bytes_class()(record=record)
    fake = FakeTensorMode(allow_non_fake_inputs=True) if spec.fake else contextlib.nullcontext()
    with fake, _fake_parameters():
        torch.manual_seed(0)
        model = build_model(spec)
        with _counting(tracker):
            _train(model, spec, tracker)
    phases = {phase: tracker.peaks[phase][1] for phase in PHASES if phase in tracker.peaks}
    return StepTrace(
        phases=phases,
        events=tuple(tracker.events),
        assumed=tuple(sorted(set(tracker.assumed))),
    )


def model_config(config: dict[str, Any]) -> Any:
    """transformers' config object for a parsed config.json (its language model's, for a
    multimodal one: fms-hf-tuning trains the language model's weights the same way)."""
    from transformers import AutoConfig

    from ado_actuators.sfttrainer.plan.architecture import language_config

    values = dict(language_config(config))
    model_type = values.pop("model_type")
    for key in ("architectures", "auto_map", "transformers_version", "_name_or_path"):
        values.pop(key, None)
    return AutoConfig.for_model(model_type, **values)


def build_model(spec: StepSpec) -> Any:
    """The model as fms-hf-tuning's sft_trainer and TRL's SFTTrainer leave it for training."""
    import torch
    from transformers import AutoModelForCausalLM

    attention = FLASH_EMULATED if spec.attention == "flash_attention_2" else spec.attention
    if attention == FLASH_EMULATED:
        _register_flash_emulation()
    model = AutoModelForCausalLM.from_config(
        model_config(spec.config),
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


def _with_peft(model: Any, spec: StepSpec) -> Any:
    """TRL 0.19's SFTTrainer._prepare_peft_model: under reentrant checkpointing the embedding's
    output is made to require grad (_enable_gradient_checkpointing), then get_peft_model."""
    import peft

    if spec.checkpointing == "reentrant":
        model.enable_input_require_grads()
    if spec.peft_method == "lora":
        config = peft.LoraConfig(
            r=spec.lora_r,
            lora_alpha=spec.lora_alpha,
            lora_dropout=spec.lora_dropout,
            target_modules=list(spec.target_modules) or None,
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


def _optimizer(model: Any) -> Any:
    """transformers' Trainer.create_optimizer for adamw_torch: a decay group and a no-decay
    group (norms, biases), weight decay 0 (the experiments' constant), foreach as on CUDA."""
    import torch
    from transformers.trainer_pt_utils import get_parameter_names

    patterns = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
    decay = set(get_parameter_names(model, [torch.nn.LayerNorm], patterns))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in named if n in decay], "weight_decay": 0.0},
        {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, foreach=True)


def _batch(spec: StepSpec, vocab: int) -> dict[str, Any]:
    """What fms-hf-tuning's collator gives for samples longer than max_seq_length: full rows,
    a mask of ones, labels (the prompt's positions -100), and the Trainer's token count."""
    import torch

    ids = torch.randint(0, vocab, (spec.batch, spec.length))
    labels = ids.clone()
    labels[:, : spec.length // 4] = -100
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "labels": labels,
        "num_items_in_batch": labels.ne(-100).sum(),
    }


def _train(model: Any, spec: StepSpec, tracker: Any) -> None:
    """transformers' Trainer inner loop (training_step, clip, step, zero_grad), counted."""
    import torch

    optimizer = _optimizer(model)
    for tensor in (*model.parameters(), *model.buffers()):
        tracker.count(tensor, "weights")
    trainable = [p for p in model.parameters() if p.requires_grad]
    for parameter in trainable:
        parameter.register_post_accumulate_grad_hook(lambda p: tracker.count(p.grad, "gradients"))
    vocab = model.config.vocab_size
    for _ in range(spec.steps):
        for _ in range(spec.accumulation):
            tracker.enter("forward")
            loss = _forward(model, spec, vocab)
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


def _forward(model: Any, spec: StepSpec, vocab: int) -> Any:
    """Trainer.compute_loss and TRL 0.19.1 SFTTrainer.compute_loss: the model's own loss, then
    the token count and token accuracy TRL logs (a contiguous copy of the logits, argmax)."""
    import torch

    inputs = _batch(spec, vocab)
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
    """flash-attn 2 needs CUDA; its memory is its contract, emulated here. transformers 4.55's
    flash_attention_forward hands it q, k, v as (batch, seq, heads, dim) views;
    flash_attn_interface.FlashAttnFunc saves q, k, v, out, softmax_lse (fp32, batch x heads x
    seq) and rng_state; its backward allocates dq, dk, dv (empty_like) and, in flash_api.cpp
    mha_bwd, softmax_d (fp32, seq rounded to 128), dq_accum (fp32, seq rounded to 128, dim to
    32) and, for grouped-query heads, dk and dv expanded to every head."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(FLASH_EMULATED, _flash_attention_forward)
    AttentionMaskInterface.register(FLASH_EMULATED, flash_attention_mask)


def _flash_attention_forward(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any
) -> tuple[Any, None]:
    import torch

    query, key, value = (t.transpose(1, 2) for t in (query, key, value))
    if query.dtype == torch.float32:  # transformers' fa_peft_integration_check
        dtype = next(m for m in module.modules() if isinstance(m, torch.nn.Linear)).weight.dtype
        query, key, value = (t.to(dtype) for t in (query, key, value))
    scale = kwargs.get("scaling")
    return _flash_function().apply(query, key, value, scale), None


def _round(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


@functools.cache
def _flash_function() -> type:
    import torch

    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, scale):
            batch, length, heads, _ = q.shape
            out = torch.empty_like(q, memory_format=torch.contiguous_format)
            lse = q.new_empty((batch, heads, length), dtype=torch.float32)
            rng_state = torch.empty(2, dtype=torch.int64)
            if not _is_fake(q):
                with _paused():
                    out.copy_(_attention(q, k, v, scale))
            ctx.scale = scale
            ctx.save_for_backward(q, k, v, out, lse, rng_state)
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, _out, _lse, _rng = ctx.saved_tensors
            batch, length, heads, dim = q.shape
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            f32 = {"dtype": torch.float32}
            workspace = [
                q.new_empty((batch, heads, _round(length, 128)), **f32),  # softmax_d
                q.new_empty((batch, heads, _round(length, 128), _round(dim, 32)), **f32),
            ]
            if k.shape[2] != heads:  # dk, dv expanded to every query head
                workspace += [q.new_empty(q.shape), q.new_empty(q.shape)]
            if not _is_fake(q):
                with _paused(), torch.enable_grad():
                    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                    _attention(*leaves, ctx.scale).backward(dout)
                    for grad, leaf in zip((dq, dk, dv), leaves, strict=True):
                        grad.copy_(leaf.grad)
            del workspace
            return dq, dk, dv, None

    return FlashAttention


def _attention(q: Any, k: Any, v: Any, scale: float | None) -> Any:
    """Causal attention's values on (batch, seq, heads, dim) tensors (real tensors only)."""
    import torch

    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        is_causal=True,
        scale=scale,
        enable_gqa=k.shape[2] != q.shape[2],
    )
    return out.transpose(1, 2)


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
