"""How much memory the logits and the loss take, as a transformers release computes them.

A causal LM's loss is the largest single allocation of a fine-tuning step at long sequences
and large vocabularies ([tokens, vocab] tensors), and how many such tensors are alive at once
changed between transformers releases: where the logits are upcast to fp32 (in the model, in
the loss, or nowhere), and whether the loss shifts the logits (a copy) or the labels. This
module reads those two facts from a release's own source (`read_loss_code`, pure), and keeps
what it read from each release an fms-hf-tuning version pins in `packages/transformers-loss.yaml`
(written from the releases' wheels by `tests/unit/test_transformers_releases.py`, which fails
when the file and the releases disagree). Nothing here imports transformers.
"""

from __future__ import annotations

import dataclasses
import re

from packaging.version import Version

from ado_actuators.sfttrainer.plan.model.families.registry import FAMILIES
from ado_actuators.sfttrainer.plan.model.releases import (
    checkpointing,
    pinned_release,
    record,
    transformers_release,
)

FAMILY_MODULES = {model_type: family.modeling_folder for model_type, family in FAMILIES.items()}
"""config.json's model_type -> the folder of transformers/models/ holding its modeling file, for
every family counted by hand (plan/model/families/)."""


@dataclasses.dataclass(frozen=True)
class LossCode:
    """What a release's causal-LM loss does to the logits (read from its source).

    Each method gives bytes per [token, vocab] element at one moment of the step, for the
    model's dtype width `dtype_bytes`; `autocast`: under 16-bit mixed precision; `fused`: None,
    "in_place" (a kernel that writes the gradient into its input: no log_softmax tensors) or
    "chunked" (a fused linear + cross-entropy that never holds the full logits)."""

    upcast: str  # "model": the model returns fp32 logits; "loss": the loss upcasts; "none"
    shifts: str  # "logits": a shifted contiguous copy of the logits; "labels": no copy

    def __post_init__(self) -> None:
        # _widths reads any other upcast as "none" and any other shift as "labels": a misspelt
        # record would pass for the smaller reading
        assert self.upcast in ("model", "loss", "none") and self.shifts in ("logits", "labels")

    def _widths(self, dtype_bytes: int) -> tuple[int, int, int, int]:
        """(the model's logits, the loss's fp32 upcast, the width cross-entropy reads, the
        shifted copy), bytes per [token, vocab] element."""
        fp32 = 4
        model = fp32 if self.upcast == "model" else dtype_bytes
        # `logits.float()` of fp32 logits is the tensor itself: no copy
        upcast = fp32 if self.upcast == "loss" and dtype_bytes != fp32 else 0
        loss_width = fp32 if self.upcast != "none" else dtype_bytes
        shifted = loss_width if self.shifts == "logits" else 0
        return model, upcast, loss_width, shifted

    def _before(self, dtype_bytes: int) -> int:
        """What exists when cross-entropy starts: the model's logits (dtype, or fp32 when
        upcast in the model, the dtype copy then freed), the loss's upcast, the shifted copy."""
        model, upcast, _, shifted = self._widths(dtype_bytes)
        return model + upcast + shifted

    def _saved(self, dtype_bytes: int, autocast: bool) -> int:
        """What cross-entropy keeps for backward: its log_softmax output (its input's width),
        joined under autocast by the fp32 copy nll_loss takes of a low-precision one."""
        loss_width = self._widths(dtype_bytes)[2]
        return loss_width + (4 if autocast and self.upcast == "none" else 0)

    def kept_bytes(self, dtype_bytes: int, fused: str | None, autocast: bool) -> float:
        """What the forward leaves for the loss's backward; a fused loss keeps no [token,
        vocab] tensor."""
        return 0.0 if fused is not None else float(self._saved(dtype_bytes, autocast))

    def inside_bytes(self, dtype_bytes: int, fused: str | None, autocast: bool) -> float:
        """Inside the model's forward: what cross-entropy starts with, beside what it keeps."""
        if fused == "chunked":
            return 0.0
        return float(self._before(dtype_bytes) + self.kept_bytes(dtype_bytes, fused, autocast))

    def returned_bytes(
        self, dtype_bytes: int, fused: str | None, autocast: bool, copy: bool
    ) -> float:
        """After the model returns: under mixed precision accelerate's fp32 conversion of the
        logits beside them; with `copy` (TRL's token accuracy, `trl_copies_logits`), a
        contiguous copy of the returned logits beside them. Both beside the kept log_softmax."""
        if fused is not None:
            return 0.0
        model = self._widths(dtype_bytes)[0]
        saved = self._saved(dtype_bytes, autocast)
        returned = 4 if autocast else model
        peaks = [model + saved]
        if autocast:
            peaks.append(model + saved + returned)
        if copy:
            peaks.append(returned + saved + returned)
        return float(max(peaks))

    def backward_bytes(self, dtype_bytes: int, fused: str | None) -> float:
        """At the loss's backward: nll's gradient, the kept log_softmax and its gradient, all of
        cross-entropy's input width. Under autocast a 16-bit log_softmax and nll's fp32 copy
        of it (`_saved`: 2 + 4) are no more than these three (3 x 2). An in-place kernel writes
        the gradient into what cross-entropy started with."""
        if fused == "chunked":
            return 0.0
        if fused == "in_place":
            return float(self._before(dtype_bytes))
        return float(3 * self._widths(dtype_bytes)[2])


def read_loss_code(modeling_source: str, loss_source: str | None) -> LossCode:
    """The LossCode of a release, from its models/<family>/modeling_<family>.py and its
    loss/loss_utils.py (None: the release has none, before 4.46).

    Only the causal-LM class's forward is read. A model that calls `self.loss_function`
    computes its loss in ForCausalLMLoss; otherwise the forward computes it inline. An upcast
    that only runs without labels (inference) does not count.
    """
    forward = _causal_lm_forward(modeling_source)
    if "self.loss_function(" in forward:
        if loss_source is None:
            raise ValueError("the model calls self.loss_function, but no loss_utils.py was given")
        loss = _function(loss_source, "ForCausalLMLoss")
        upcast = "loss" if re.search(r"logits\s*=\s*logits\.float\(\)", loss) else "none"
        if _upcasts_with_labels(forward):
            upcast = "model"
        return LossCode(upcast=upcast, shifts=_shifted(loss))
    upcast = "model" if _upcasts_with_labels(forward) else "none"
    return LossCode(upcast=upcast, shifts=_shifted(forward))


CHECKPOINTING = ("layer", "model", "none")  # what plan/model/releases.checkpointing answers


def read_checkpointing(modeling_source: str) -> str:
    """How the release's decoder layers are checkpointed: "layer", by the layer itself (a class
    built on GradientCheckpointingLayer, 4.52 on: under FSDP the checkpoint runs inside the
    layer's unit); "model", by the model's forward calling `self._gradient_checkpointing_func`
    on each layer (before 4.52: under FSDP the unit runs inside the checkpoint, and reentrant
    recomputation hands it a detached input); "none": not at all (transformers 4.55's
    GPTBigCodeBlock is a plain nn.Module its model calls directly: gradient_checkpointing_enable()
    sets a flag nothing reads, and every layer keeps its activations)."""
    if re.search(r"^class \w+\([^)]*\bGradientCheckpointingLayer\b", modeling_source, re.M):
        return "layer"
    if "self._gradient_checkpointing_func(" in modeling_source:
        return "model"
    return "none"


ATTENTION = ("sdpa", "eager")


def read_attention(modeling_source: str) -> str:
    """The attention a release runs for a family when none is asked for (fms-hf-tuning passes
    `attn_implementation` only under `use_flash_attn`): "sdpa" where the family's
    PreTrainedModel declares `_supports_sdpa = True` (transformers then picks sdpa whenever
    torch has it, every pinned torch), else "eager"."""
    return (
        "sdpa" if re.search(r"^\s+_supports_sdpa\s*=\s*True\b", modeling_source, re.M) else "eager"
    )


def _shifted(code: str) -> str:
    """ "logits" where the loss slices the logits one position short (a copy follows), else
    the labels are shifted (padded) instead."""
    return "logits" if re.search(r"logits\[\.\.\., *:-1, *:\]", code) else "labels"


def _function(source: str, name: str) -> str:
    found = re.search(rf"^def {name}\(.*?(?=^(?:def |class |@)|^\w+ = |\Z)", source, re.S | re.M)
    if not found:
        raise ValueError(f"no function {name} in the source")
    return found.group(0)


def _causal_lm_forward(source: str) -> str:
    found = re.search(
        r"^class \w+ForCausalLM\(\w*PreTrainedModel\b.*?(?=^class |\Z)", source, re.S | re.M
    )
    if not found:
        raise ValueError("no *ForCausalLM class in the modeling source")
    body = found.group(0)
    forward = re.search(r"^    def forward\(.*?(?=^    def |\Z)", body, re.S | re.M)
    if not forward:
        raise ValueError("the *ForCausalLM class has no forward")
    return forward.group(0)


def _upcasts_with_labels(forward: str) -> bool:
    """An fp32 upcast of the logits on the training path: `.float()` on the lm_head call or on
    `logits`, outside the branches taken only without labels (inference)."""
    training_path = re.sub(r"^( *)if labels is None:\n(?:\1 +.*\n|\n)+", "", forward, flags=re.M)
    return bool(
        re.search(r"lm_head\([^\n]*\)\.float\(\)|logits\s*=\s*logits\.float\(\)", training_path)
    )


def loss_code(transformers_version: str | None, model_type: str) -> LossCode | None:
    """What the release read, for a model family; None when the release or family is not in
    the record, or no release is named (the prediction then says so rather than guessing)."""
    family = record()["releases"].get(transformers_version, {}).get(model_type)
    return LossCode(upcast=family["upcast"], shifts=family["shifts"]) if family else None


def checkpoints(transformers_version: str, model_type: str) -> bool:
    """Whether the release's layers of a family honour gradient checkpointing."""
    return checkpointing(transformers_version, model_type) != "none"


TRL_TOKEN_ACCURACY = Version("0.15.0")
"""TRL's SFTTrainer copies the logits (`outputs.logits[..., :-1, :].contiguous()`) in its
compute_loss to log its token accuracy from 0.15.0 on (trl v0.15.0, trl/trainer/sft_trainer.py;
0.14.0's SFTTrainer has no compute_loss). tests/unit/test_transformers_releases.py reads it
from the wheel of every release a version pins and of these two."""


def trl_copies_logits(trl_release: str) -> bool:
    """Whether a TRL release's SFTTrainer copies the returned logits in its compute_loss."""
    return Version(trl_release) >= TRL_TOKEN_ACCURACY


def copies_logits(fms_hf_tuning_version: str) -> bool:
    """Whether the TRL the version pins copies the logits in its compute_loss."""
    release = pinned_release(fms_hf_tuning_version, "trl")
    return release is not None and trl_copies_logits(release)


def loss_code_for(fms_hf_tuning_version: str, model_type: str) -> LossCode | None:
    """The LossCode of the release an fms-hf-tuning version trains with, for a model family."""
    return loss_code(transformers_release(fms_hf_tuning_version), model_type)
