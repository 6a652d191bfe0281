"""The FLOP convention behind model_tflops_per_device and model_flops_utilization. Pure.

Model FLOPs (not hardware FLOPs): the arithmetic the model needs per trained token, whatever
the implementation does on top (recomputation under gradient checkpointing, padding, kernels
that skip masked blocks). For a model with N matmul parameters (every parameter except
embedding tables, which are looked up; a table tied to the LM head counts), T of them
trainable, L attention layers of width A (query heads x head dimension), and a sequence of
s tokens, per token:

    forward                       2N       + 4 L A s   (QK^T and AV, full matrices)
    backward, activation grads    2N       + 8 L A s   (through every layer, frozen or not)
    backward, weight grads        2T
    ---------------------------------------------------
    total                         4N + 2T  + 12 L A s

Full fine-tuning trains every matmul weight (T = N): 6N + 12 L A s, PaLM's formula (Chowdhery
et al. 2022, appendix B). LoRA trains only the adapters, so its backward skips the frozen
weights' gradients: 4N + 2T with T the adapters' (their forward is in N). Prompt tuning's
trainable table is an embedding (T = 0): 4N. The attention term does not halve for causal
masking (as in PaLM). Since s varies, s is the token-weighted mean sequence length of the
measured window, sum(s^2) / sum(s), which makes sum over sequences of 12 L A s^2 exact.
Tokens are dataset tokens (the spec's exact count); prompt tuning's virtual tokens and the
EOS fms appends are not counted. No per-token figure is given for mixture-of-experts models
(active parameters differ per token).

A vision-language model's tower and projector (N_v matmul parameters, T_v trainable, L_v
layers of width A_v) work per tile of an image, not per token: each of a tile's P positions
(its patches, and a CLS token) runs them, attending over the tile's P. Per tile:

    P (2 N_v + 4 L_v A_v P)                      the tower frozen (T_v = 0): forward only
    P (4 N_v + 2 T_v + 12 L_v A_v P)             a trained tower: forward and backward

and a row's figure per token adds the tiles of its measured window over its tokens. (LoRA on
the tower under reentrant checkpointing trains nothing there, plan/model/training.py's
tower_backward, yet counts as trained here: the convention reads what requires a gradient.)
"""

from __future__ import annotations

from ado_actuators.sfttrainer.contract.trainer_io import ImageTower, ModelParameters


def flops_per_token(params: ModelParameters, mean_sequence_length: float) -> float | None:
    """None where the convention does not apply (see the module docstring)."""
    if params.mixture_of_experts or params.layers is None or params.attention_width is None:
        return None
    dense = 4 * params.matmul + 2 * params.trainable_matmul
    attention = 12 * params.layers * params.attention_width * mean_sequence_length
    return float(dense + attention)


def flops_per_tile(tower: ImageTower) -> float:
    """The tower's and projector's FLOPs for one tile (module docstring)."""
    positions = tower.tile_positions
    attention = tower.layers * tower.attention_width * positions
    if not tower.trainable_matmul:
        return float(positions * (2 * tower.matmul + 4 * attention))
    return float(positions * (4 * tower.matmul + 2 * tower.trainable_matmul + 12 * attention))


def why_no_flops(params: ModelParameters | None) -> str:
    if params is None:
        return "the trainer did not report the model's parameters"
    if params.mixture_of_experts:
        return "mixture-of-experts model: the per-token FLOP convention does not apply"
    return "the model's attention shape is unknown"


def token_weighted_sequence_length(sum_squares: int, sum_lengths: int) -> float:
    return sum_squares / sum_lengths if sum_lengths else 0.0
