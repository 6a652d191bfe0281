"""The truth record's pairwise rows, drawn from the entity's own declarations: every pair of
values of the fields that change a step's memory appears in at least one traced row, for every
family the formula counts (a pairwise covering array over the declared domains, not their
product).

The fields and their domains come from catalog/entity.py's FIELDS and the experiments'
`peft_method` (catalog/experiments.yaml): a value added to a declared domain, or a field added to
MEMORY_FIELDS, changes the design, and tests/unit/test_memory_truth_record.py fails until
`python benchmarks/memory_truth.py --append` has traced the new rows.

What a CPU trace cannot run stands in as follows (each row keeps its entity values, so the
record says which):
- flash-attn 2 needs CUDA: its saved tensors and workspaces are emulated
  (plan/memory/trace/flash_emulation.py);
- fast_kernels (fms-acceleration's fused loss, RMSNorm and rotary kernels) are Triton kernels:
  traced and predicted without them (the unfused path);
- accelerate's fp16 and fp8 mixed precision: the trace's autocast is bf16 (the same casts,
  the same widths), and the formula is asked for the bf16 autocast it traced;
- two devices (and the FSDP sharding strategy): traced on one device, the formula asked for
  one device; FSDP's own terms are held to real two-rank gloo traces by memory_truth.fsdp_rows.
"""

from __future__ import annotations

import itertools
from typing import Any

from ado_actuators.sfttrainer.catalog.entity import FIELDS
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.memory_trace import StepSpec
from ado_actuators.sfttrainer.plan.model.releases import attention_for

MEMORY_FIELDS = (
    "torch_dtype",
    "bf16",
    "accelerate_config_mixed_precision",
    "gradient_checkpointing",
    "gradient_checkpointing_use_reentrant",
    "flash_attn",
    "fast_kernels",
    "fsdp_sharding_strategy",
    "number_gpus",
)
"""The entity fields that change a step's memory on a device, besides the experiment's method."""
DEVICES = (1, 2)
"""number_gpus' values in the design: one device, or two (FSDP)."""
FMS_HF_TUNING = "3.2.2"
"""The release this environment traces (transformers 4.55.4)."""

_LAYERED = {
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": False,
}
TINY = {
    "llama": dict(_LAYERED, model_type="llama"),
    "mistral": dict(_LAYERED, model_type="mistral"),
    "granite": dict(_LAYERED, model_type="granite"),
    "qwen2": dict(_LAYERED, model_type="qwen2"),
    "qwen3": dict(_LAYERED, model_type="qwen3", head_dim=64),
    "mixtral": dict(_LAYERED, model_type="mixtral", num_local_experts=2, num_experts_per_tok=1),
    "granitemoe": dict(
        _LAYERED, model_type="granitemoe", num_local_experts=2, num_experts_per_tok=1
    ),
    "granitemoeshared": dict(
        _LAYERED,
        model_type="granitemoeshared",
        num_local_experts=2,
        num_experts_per_tok=1,
        shared_intermediate_size=512,
    ),
    "gpt_bigcode": {
        "model_type": "gpt_bigcode",
        "vocab_size": 512,
        "n_embd": 256,
        "n_inner": 512,
        "n_layer": 2,
        "n_head": 4,
        "n_positions": 512,
        "multi_query": True,
        # sdpa with attention dropout runs torch's math path on a CPU (the scores and the
        # dropout mask materialized), which a GPU's flash and memory-efficient kernels do not:
        # no attention dropout stands in for the GPU's kernels
        "attn_pdrop": 0.0,
    },
}
"""Every family the formula counts (plan/model/architecture.COUNTED), tiny: a trace takes
seconds."""
TARGETS = {"gpt_bigcode": ("c_attn", "c_proj")}
"""LoRA's targets per family (the catalogue's q_proj and v_proj elsewhere)."""


def domains() -> dict[str, tuple[Any, ...]]:
    """Each factor's values: the family, the experiments' methods, and MEMORY_FIELDS' declared
    domains (a BINARY field: False and True; number_gpus: DEVICES)."""
    methods = sorted({d.peft_method for d in catalog_data().experiments.values()})
    found: dict[str, tuple[Any, ...]] = {"family": tuple(sorted(TINY)), "method": tuple(methods)}
    for name in MEMORY_FIELDS:
        field = FIELDS[name]
        if name == "number_gpus":
            found[name] = DEVICES
        elif field.values is not None:
            found[name] = tuple(field.values)
        else:
            found[name] = (False, True)
    return found


def pairs(row: dict[str, Any], names: list[str]) -> set[tuple[str, str, str, str]]:
    """The pairs of values `row` covers, as (field, value, field, value) with values by repr
    (fast_kernels' values are lists)."""
    return {(a, repr(row[a]), b, repr(row[b])) for a, b in itertools.combinations(names, 2)}


def design() -> list[dict[str, Any]]:
    """A greedy pairwise covering array (deterministic): each row takes, factor by factor, the
    value that covers the most pairs not yet covered with the values already chosen, seeded
    by the first uncovered pair."""
    found = domains()
    names = list(found)
    wanted = set()
    for a, b in itertools.combinations(names, 2):
        wanted |= {(a, repr(x), b, repr(y)) for x in found[a] for y in found[b]}
    rows: list[dict[str, Any]] = []
    while wanted:
        a, x, b, y = min(wanted)
        row = {
            a: next(v for v in found[a] if repr(v) == x),
            b: next(v for v in found[b] if repr(v) == y),
        }
        for name in names:
            if name not in row:
                row[name] = max(found[name], key=lambda v, n=name: _gain(row, n, v, wanted))
        wanted -= pairs(row, names)
        rows.append(row)
    return rows


def _gain(row: dict[str, Any], name: str, value: Any, wanted: set) -> int:
    return sum((k, repr(row[k]), name, repr(value)) in wanted for k in row) + sum(
        (name, repr(value), k, repr(row[k])) in wanted for k in row
    )


def step(entity: dict[str, Any]) -> StepSpec:
    """The step a design row traces on this CPU (module docstring: what stands in)."""
    family = entity["family"]
    mixed = bool(entity["bf16"]) or entity["accelerate_config_mixed_precision"] != "no"
    checkpointing = None
    if entity["gradient_checkpointing"]:
        reentrant = entity["gradient_checkpointing_use_reentrant"]
        checkpointing = "reentrant" if reentrant else "non_reentrant"
    method = entity["method"]
    return StepSpec(
        dict(TINY[family]),
        method,
        TARGETS.get(family, ("q_proj", "v_proj")) if method == "lora" else (),
        torch_dtype=entity["torch_dtype"],
        attention=attention_for(FMS_HF_TUNING, family, bool(entity["flash_attn"])),
        checkpointing=checkpointing,
        mixed_precision=mixed,
        batch=2,
        length=128,
    )
