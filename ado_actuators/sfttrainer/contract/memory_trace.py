"""The two documents that cross the boundary between the memory verdict and the process that
traces a training step of the model's own code (plan/memory/trace/): the `StepSpec` going in
(JSON on the subprocess's stdin) and the `TracedStep` coming out (JSON on its stdout, and the
file kept under hf_home). Both sides import this module, so it imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

PARTS = ("weights", "gradients", "optimizer_state", "forward", "backward", "optimizer_temporaries")
"""Where each counted storage was made (or what it became: gradients, optimizer state)."""
PHASES = ("forward", "backward", "optimizer_step")
"""The phases of a training step, each with its own peak."""
ATTENTION = ("flash_attention_2", "sdpa", "eager")

PeftMethod = Literal["none", "lora", "pt"]
Attention = Literal["flash_attention_2", "sdpa", "eager"]
Checkpointing = Literal["reentrant", "non_reentrant"]
_ATTENTION: dict[str, Attention] = {
    "flash_attention_2": "flash_attention_2",
    "sdpa": "sdpa",
    "eager": "eager",
}


def attention_named(name: str) -> Attention:
    """`name` as the request's attention; a ValueError naming the choices for another."""
    try:
        return _ATTENTION[name]
    except KeyError:
        raise ValueError(f"attention {name!r}: one of {', '.join(ATTENTION)}") from None


ALL_LINEAR = "all-linear"
"""PEFT's target_modules word for every linear layer but the output head: it matches any model."""


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """What decides a step's tensors: the model, the method, the shapes, the code paths."""

    config: dict[str, Any]  # the model's config.json: any JSON
    peft_method: PeftMethod = "none"
    target_modules: tuple[str, ...] = ()
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    prompt_tokens: int = 8
    torch_dtype: str = "bfloat16"
    attention: Attention = "flash_attention_2"  # flash-attn emulated where it cannot run
    checkpointing: Checkpointing | None = None
    mixed_precision: bool = False  # accelerate's bf16 autocast, outputs converted to fp32
    batch: int = 1
    length: int = 64
    accumulation: int = 1
    steps: int = 2
    fake: bool = True
    image: tuple[int, int] | None = None
    """A vision-language model's step on images of this (height, width): the whole model (its
    vision tower and projector) trains on `length` tokens of which the image's are part; None:
    the language model alone on text."""
    mamba_scan: str = "fused"
    """How Mamba-2 layers run: "fused", as mamba-ssm's kernel allocates (emulated: it needs
    CUDA), or "torch", transformers' own torch_forward (plan/model/mamba.scan_path)."""

    def __post_init__(self) -> None:
        if self.peft_method not in ("none", "lora", "pt"):
            raise ValueError(f"peft_method {self.peft_method!r}: none, lora or pt")
        if self.attention not in ATTENTION:
            raise ValueError(f"attention {self.attention!r}: one of {', '.join(ATTENTION)}")
        if self.checkpointing not in (None, "reentrant", "non_reentrant"):
            raise ValueError(f"checkpointing {self.checkpointing!r}: reentrant or non_reentrant")
        if self.mamba_scan not in ("fused", "torch"):
            raise ValueError(f"mamba_scan {self.mamba_scan!r}: fused or torch")

    def as_json(self) -> dict[str, Any]:  # json.dumps's input: any JSON
        return {**dataclasses.asdict(self), "target_modules": list(self.target_modules)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepSpec:  # json.loads's output
        image = data.get("image")
        return cls(
            **{
                **data,
                "target_modules": tuple(data.get("target_modules", ())),
                "image": tuple(image) if image else None,
            }
        )


@dataclasses.dataclass(frozen=True)
class TracedStep:
    """Per phase, the live bytes by part at the phase's peak (the largest over the steps)."""

    phases: dict[str, dict[str, int]]
    rest: dict[str, int] = dataclasses.field(default_factory=dict)
    """The parts alive after the last step (the weights and the optimizer state)."""
    inventory: dict[str, Any] = dataclasses.field(default_factory=dict)  # JSON, as traced
    """The model's parameters as built (plan/memory/trace/step.inventory)."""
    assumed: tuple[str, ...] = ()
    """Values a fake tensor cannot give, assumed for the code's own checks (e.g. a padding mask
    of ones: `mask.all()` is True; balanced routing)."""
    events: tuple[tuple[int, ...], ...] = ()
    """With `record=True`: after every op, (phase index, bytes of each of PARTS)."""
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    """The releases of torch, transformers and peft whose code was traced."""
    depth: str = ""
    """How deep the traced model was (shallow copies extrapolated per layer, or full depth)."""

    def total(self, phase: str) -> int:
        return sum(self.phases[phase].values())

    @property
    def peak(self) -> int:
        return max(self.total(phase) for phase in self.phases)

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.total)

    def as_json(self) -> dict[str, Any]:  # json.dumps's input: any JSON
        """What the subprocess prints and the trace file keeps (the op-by-op events left out)."""
        return dataclasses.asdict(dataclasses.replace(self, events=()))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TracedStep:  # json.loads's output
        return cls(**{**data, "assumed": tuple(data.get("assumed", ()))})
