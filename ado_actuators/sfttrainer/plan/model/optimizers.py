"""What each optimizer the entity's `optim` lists keeps per trainable parameter, and where: the
state tensors it creates, in which dtype, the temporaries its step allocates, and whether the
state lives in paged (unified) memory. Read by the bound (plan/memory/bound.py), the predicted
peak (plan/memory/peak.py) and the step time's update (plan/speed/step_time.py).

The names are transformers' `OptimizerNames`, mapped to classes by
`Trainer.get_optimizer_cls_and_kwargs` (transformers/trainer.py): torch's optimizers create their
state with `zeros_like(param)`, so it takes the parameter's dtype; bitsandbytes' 32-bit ones keep
fp32 state and its 8-bit ones one byte per element (`Optimizer2State.init_state`, `optim_bits`;
tensors under 4,096 elements stay 32-bit, which only adds); paged ones allocate that state with
`cudaMallocManaged`, outside torch's caching allocator, and the driver moves its pages to the host
when the device runs short (bitsandbytes' docs, "Paged optimizers").
"""

from __future__ import annotations

import dataclasses

TORCH = "torch.optim ({cls}): state created zeros_like(param), in the parameter's dtype"
BNB_32 = "bitsandbytes {cls}, optim_bits=32: fp32 state whatever the parameter's dtype"
BNB_8 = "bitsandbytes {cls}, optim_bits=8: one byte per element (blockwise quantized)"
PAGED = "; paged: cudaMallocManaged, outside torch's allocator, paged to the host under pressure"


@dataclasses.dataclass(frozen=True)
class OptimizerState:
    """Per trainable parameter: `in_param_dtype` state tensors in the parameter's dtype and
    `fixed_bytes` of state at a dtype of the optimizer's own; `temporaries` parameter-sized
    tensors torch's foreach step allocates at once beside them."""

    in_param_dtype: int = 0
    fixed_bytes: float = 0.0
    temporaries: int = 0
    update_passes: int | None = None  # torch's foreach step; None: one fused kernel (see below)
    paged: bool = False
    gradients_stored: bool = True  # False: updated inside the backward, layer by layer
    unstated: str | None = None  # why its state cannot be counted from the entity's fields
    source: str = ""
    step: str = "optimizer step"  # the step's moment, as the prediction names it

    def state_bytes(self, trainable: float, width: int) -> float:
        """Bytes of state for `trainable` parameters of `width` bytes each."""
        return trainable * (self.in_param_dtype * width + self.fixed_bytes)

    def update_traffic(self, width: int) -> float:
        """Bytes per parameter one fused update moves: the weight read and written, its
        gradient read, every state read and written."""
        return 3 * width + 2 * (self.in_param_dtype * width + self.fixed_bytes)

    def step_traffic(self, width: int) -> float:
        """Bytes per parameter the step's kernels move: torch's foreach step makes one pass per
        op over parameter-sized tensors (`update_passes`, each a read or a write of one), a
        fused kernel (bitsandbytes', torch's fused AdamW) touches each tensor once
        (`update_traffic`); an unstated optimizer's as foreach AdamW's."""
        state = self if not self.unstated else FOREACH_ADAMW
        if state.update_passes is None:
            return state.update_traffic(width)
        return state.update_passes * width

    def temporary_share(self) -> float:
        """The foreach temporaries as a share of the state in the parameter's dtype (AdamW's
        `_foreach_sqrt(exp_avg_sq)`: one of its two states)."""
        return self.temporaries / self.in_param_dtype if self.in_param_dtype else 0.0


# The table below is built at import, before mutmut activates a mutant: its builders' mutants
# could never be told apart, so they are not made; the table's entries are tested one by one.
def _torch(
    cls: str,
    states: int,
    temporaries: int = 0,  # pragma: no mutate
    passes: int | None = None,  # pragma: no mutate
) -> OptimizerState:  # pragma: no mutate
    source = TORCH.format(cls=cls)  # pragma: no mutate
    return OptimizerState(  # pragma: no mutate
        states, temporaries=temporaries, update_passes=passes, source=source
    )


# Passes of torch's foreach steps (torch/optim/*.py, `_multi_tensor_*`, torch 2.13) at what
# transformers' Trainer passes (weight decay 0, momentum 0, not centered), each a read or a
# write of one parameter-sized tensor. AdamW: lerp_(exp_avg, grad) 3, mul_(exp_avg_sq) 2,
# addcmul_(exp_avg_sq, grad, grad) 3, sqrt 2, div_ 2, add_(eps) 2, addcdiv_(param, exp_avg,
# denominator) 4. Adagrad: addcmul_ 3, sqrt 2, add_ 2, mul(grad) 2, addcdiv_ 4. RMSprop:
# mul_ 2, addcmul_ 3, sqrt 2, add_ 2, addcdiv_ 4. SGD: add_(param, grad) 3.
ADAMW_PASSES = 18
FOREACH_ADAMW = OptimizerState(
    2,
    temporaries=1,
    update_passes=ADAMW_PASSES,
    source=TORCH.format(cls="AdamW, foreach"),
    step="foreach AdamW",
)


def _bnb(
    cls: str,
    states: int,
    bits: int,
    paged: bool = False,  # pragma: no mutate
) -> OptimizerState:
    text = (BNB_32 if bits == 32 else BNB_8).format(cls=cls)  # pragma: no mutate
    text += PAGED if paged else ""  # pragma: no mutate
    size = states * bits / 8  # pragma: no mutate
    return OptimizerState(fixed_bytes=size, paged=paged, source=text)  # pragma: no mutate


_GALORE = (
    "GaLore projects each targeted matrix's gradient to rank `rank` (optim_args) over the "
    "modules optim_target_modules names; the entity states neither"
)
_LAYERWISE = "; layer-wise: each parameter is updated in its backward hook"

OPTIMIZERS: dict[str, OptimizerState] = {
    # AdamW: exp_avg and exp_avg_sq; the foreach step's sqrt of exp_avg_sq is one more
    "adamw_torch": FOREACH_ADAMW,
    "adamw_hf": FOREACH_ADAMW,
    "adamw_torch_xla": FOREACH_ADAMW,
    "adamw_torch_npu_fused": FOREACH_ADAMW,
    "adamw_torch_fused": _torch("AdamW, fused: one kernel, no temporaries", 2),
    "adamw_apex_fused": _torch("apex FusedAdam: multi-tensor kernel, no temporaries", 2),
    "adamw_anyprecision": OptimizerState(
        fixed_bytes=8,
        source="torchdistx AnyPrecisionAdamW: momentum_dtype and variance_dtype float32 "
        "(transformers' defaults)",
    ),
    "adamw_torch_4bit": OptimizerState(
        fixed_bytes=1, source="torchao AdamW4bit: two 4-bit states (scales left out: smaller)"
    ),
    "ademamix": _bnb("AdEMAMix", 3, 32),
    "ademamix_8bit": _bnb("AdEMAMix", 3, 8),
    "sgd": _torch("SGD, momentum 0 (transformers' default): no state", 0, passes=3),
    "adagrad": _torch("Adagrad: state_sum", 1, temporaries=1, passes=13),
    "adamw_bnb_8bit": _bnb("AdamW", 2, 8),
    "adamw_8bit": _bnb("AdamW", 2, 8),
    "lion_8bit": _bnb("Lion", 1, 8),
    "lion_32bit": _bnb("Lion", 1, 32),
    "paged_adamw_32bit": _bnb("PagedAdamW", 2, 32, paged=True),
    "paged_adamw_8bit": _bnb("PagedAdamW", 2, 8, paged=True),
    "paged_ademamix_32bit": _bnb("PagedAdEMAMix", 3, 32, paged=True),
    "paged_ademamix_8bit": _bnb("PagedAdEMAMix", 3, 8, paged=True),
    "paged_lion_32bit": _bnb("PagedLion", 1, 32, paged=True),
    "paged_lion_8bit": _bnb("PagedLion", 1, 8, paged=True),
    "rmsprop": _torch("RMSprop: square_avg", 1, temporaries=1, passes=13),
    "rmsprop_bnb": _bnb("RMSprop", 1, 32),
    "rmsprop_bnb_8bit": _bnb("RMSprop", 1, 8),
    "rmsprop_bnb_32bit": _bnb("RMSprop", 1, 32),
    "galore_adamw": OptimizerState(unstated=_GALORE),
    "galore_adamw_8bit": OptimizerState(unstated=_GALORE),
    "galore_adafactor": OptimizerState(unstated=_GALORE),
    "galore_adamw_layerwise": OptimizerState(unstated=_GALORE, gradients_stored=False),
    "galore_adamw_8bit_layerwise": OptimizerState(unstated=_GALORE, gradients_stored=False),
    "galore_adafactor_layerwise": OptimizerState(unstated=_GALORE, gradients_stored=False),
    "adafactor": OptimizerState(
        source="transformers' Adafactor: beta1 None, no first moment; a matrix's second moment "
        "factored into a row and a column vector (a few bytes per row, left out)"
    ),
    "lomo": OptimizerState(
        gradients_stored=False, source="LOMO: no state" + _LAYERWISE + " (fused backward)"
    ),
    "adalomo": OptimizerState(
        gradients_stored=False,
        source="AdaLomo: factored second moment (rows and columns, left out)" + _LAYERWISE,
    ),
    "grokadamw": _torch("GrokAdamW: exp_avg, exp_avg_sq, grok_ema", 3),
    "schedule_free_adamw": _torch("AdamWScheduleFree: z, exp_avg_sq", 2),
    "schedule_free_sgd": _torch("SGDScheduleFree: z", 1),
}


def optimizer_state(optim: str) -> OptimizerState:
    """What `optim` keeps; one this table does not know is unstated, with the reason."""
    return OPTIMIZERS.get(optim) or OptimizerState(
        unstated=f"{optim} is not in plan/model/optimizers.py's table"
    )
