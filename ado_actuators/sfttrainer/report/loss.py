"""A configuration's loss as the report reads it back from ado's rows, and whether two
configurations started from the same loss. Pure.

Why a row is passed over: its training loss was not finite, or rose across its window
(contract/loss.py, metrics/loss.py). Such a row is still valid (is_valid keeps the spec's
meaning: it ran), but its speed answers nothing: the answers never name it fastest or tied.

Loss parity. Matched configurations measured on one dataset with one seed train the same first
batch from the same weights, so their first-step losses (`train_loss_first_step`: before any
update) differ only by how the two runs rounded. The tolerance, derived:

- Each value the forward produces is rounded to the precision it is computed in, and two runs
  that sum in other orders or groupings (other kernels, GPUs, library releases, attention
  implementations) may round it to neighbouring values: one unit in the last place, a relative
  EPSILON of that precision. bfloat16 keeps 8 significant bits (2^-7 = 0.78 %), float16 11
  (2^-10 = 0.098 %), fp8 e4m3 4 (2^-3). float32 rows get TF32's 2^-10: cuBLAS runs float32
  matmuls in TF32 on Ampere and newer wherever torch.backends.cuda.matmul.allow_tf32 or
  NVIDIA_TF32_OVERRIDE lets it, and a row does not record which; it also covers float32's own
  reduction-order noise, about sqrt(K) 2^-24 for sums of K terms (Higham and Mary, SIAM J. Sci.
  Comput. 41(5), 2019), some 4e-6 for K = 4096.
- The first-step loss is the mean of hundreds to thousands of per-token losses, each within a
  few such units of its counterpart; rounding differences of either sign cancel in the mean.
  Two first-step losses more than one EPSILON apart, relative, differ by more than rounding.
  (The losses are the trainer's own float32 figures, trainer/tokens.py, not Hugging Face's
  log, which rounds to 4 decimals.)

Checked against what kernel authors hold their own kernels to: Liger-Kernel's convergence
tests require HF's stock forward and Liger's fused kernels (RMSNorm, RoPE, SwiGLU, fused
linear cross-entropy) to agree on every one of 32 training steps within 1e-3 + 1e-2 relative
in bfloat16 and 1e-8 + 2e-5 relative in float32 (linkedin/Liger-Kernel,
test/convergence/bf16/test_mini_models.py at c1f0b84, fp32/test_mini_models.py at b1877f8);
32 steps of updates compound what one forward differs by, so one forward differs by less.
torch.testing.assert_close's default relative tolerances are of the same size per element:
1.6e-2 for bfloat16, 1e-3 for float16.

The precision is the coarsest the row computes in: `torch_dtype` (the weights), `bf16` (HF's
mixed precision) and `accelerate_config_mixed_precision`. A difference smaller than the
tolerance cannot be told from rounding: a change that moves the first-step loss by less (one
extra EOS token per long sequence, say) is not seen here.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping

from ado_actuators.sfttrainer.catalog.entity import FIELDS
from ado_actuators.sfttrainer.contract import loss as names

EPSILON = {
    "fp8": 2.0**-3,
    "bfloat16": 2.0**-7,
    "float16": 2.0**-10,
    "float32": 2.0**-10,  # TF32: see the module's docstring
}
_MIXED = {"bf16": "bfloat16", "fp16": "float16", "fp8": "fp8"}


@dataclasses.dataclass(frozen=True)
class RowLoss:
    """The loss properties of a configuration's valid measurements."""

    first_steps: tuple[float, ...] = ()
    # False only where a measurement recorded train_loss_finite = 0 (rows stored before the
    # loss properties existed, or too short to judge a rise, are taken as they are)
    finite: bool = True
    rose: bool = False

    @property
    def first_step(self) -> float | None:
        return statistics.fmean(self.first_steps) if self.first_steps else None

    @property
    def problem(self) -> str | None:
        """Why the row's speed answers nothing, or None."""
        if not self.finite:
            return f"its training loss was not finite ({names.FINITE} = 0)"
        if self.rose:
            return f"its training loss rose across the measured window ({names.ROSE} = 1)"
        return None


def row_loss(columns: Mapping[str, list[float]]) -> RowLoss:
    """From each loss column's numbers over the configuration's valid measurements (every name
    of contract/loss.py, empty where the rows have none): finite only if every measurement
    was, risen if any one rose."""
    return RowLoss(
        first_steps=tuple(v for v in columns[names.FIRST_STEP] if math.isfinite(v)),
        finite=all(v >= 1 for v in columns[names.FINITE]),
        rose=any(v >= 1 for v in columns[names.ROSE]),
    )


def compute_dtype(identity: Iterable[tuple[str, str]]) -> str:
    """The coarsest precision a configuration computes in (EPSILON's keys)."""
    fields = dict(identity)
    found = {str(fields.get("torch_dtype") or FIELDS["torch_dtype"].default)}
    if str(fields.get("bf16")).lower() in ("true", "1"):
        found.add("bfloat16")
    if mixed := _MIXED.get(str(fields.get("accelerate_config_mixed_precision"))):
        found.add(mixed)
    # a torch_dtype the table does not know ("auto": the checkpoint's, usually bfloat16)
    known = sorted(d for d in found if d in EPSILON) or [str(FIELDS["torch_dtype"].default)]
    return max(known, key=EPSILON.__getitem__)


@dataclasses.dataclass(frozen=True)
class Parity:
    here: float
    there: float
    dtype: str

    @property
    def tolerance(self) -> float:
        """How far apart two first-step losses may be by rounding alone (absolute)."""
        return EPSILON[self.dtype] * max(abs(self.here), abs(self.there))

    @property
    def holds(self) -> bool:
        return abs(self.here - self.there) <= self.tolerance

    def text(self) -> str:
        # only said of losses apart, so the larger is not 0
        relative = abs(self.here - self.there) / max(abs(self.here), abs(self.there))
        return (
            f"first-step loss {self.here:.4f} here, {self.there:.4f} there: {relative:.2%} apart, "
            f"beyond what rounding explains (±{self.tolerance:.4f}: one unit in the last place of "
            f"{self.dtype}, {EPSILON[self.dtype]:.3g} relative); the two runs did not train the "
            "same thing"
        )


def parity(
    here: RowLoss, there: RowLoss, identities: Iterable[Iterable[tuple[str, str]]]
) -> Parity | None:
    """None unless both have a first-step loss; `identities`: both configurations'."""
    if here.first_step is None or there.first_step is None:
        return None
    dtype = max((compute_dtype(i) for i in identities), key=EPSILON.__getitem__)
    return Parity(here.first_step, there.first_step, dtype)
