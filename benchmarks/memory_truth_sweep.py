"""The predicted peak against the trace of the training step over every precision, method,
checkpointing style and attention the entity can ask of a tiny Llama and a tiny Qwen2 (the
models torch's MemTracker test uses, tests/integration/test_memory_independent.py): torch_dtype
fp32/bf16 x bf16 autocast on/off x full/LoRA (q, v; dropout 0)/prompt tuning x no/reentrant/
non-reentrant checkpointing x sdpa/eager x (b1, s128) and (b4, s512). About a minute a family on
two cores; the traces are fake (plan/memory/trace/step.py), the predictions the product's
(memory_truth.predicted).

    python benchmarks/memory_truth_sweep.py            # both families
    python benchmarks/memory_truth_sweep.py llama      # one

Prints each configuration's error (predicted over traced peak, less 1) and the moment the
prediction's peak is at, then how many are within 1 % and 2 %; exits 1 if any is beyond 2 %.
"""

from __future__ import annotations

import itertools
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import memory_truth

from ado_actuators.sfttrainer.plan.memory.trace.step import trace_step

_TINY = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "tie_word_embeddings": False,
    "max_position_embeddings": 512,
}
FAMILIES = {
    "llama": dict(_TINY, model_type="llama", num_key_value_heads=4),  # tiny_model.py's shape
    "qwen2": dict(_TINY, model_type="qwen2", num_key_value_heads=2),
}
AXES = (
    ("float32", "bfloat16"),
    (False, True),
    ("none", "lora", "pt"),
    (None, "reentrant", "non_reentrant"),
    ("sdpa", "eager"),
    ((1, 128), (4, 512)),
)


def errors(config: dict) -> list[tuple[float, str]]:
    """(predicted / traced - 1, a label) of every configuration of AXES on `config`."""
    found = []
    for dtype, mixed, method, ckpt, attention, (batch, length) in itertools.product(*AXES):
        spec = memory_truth.case_spec(
            config,
            method,
            torch_dtype=dtype,
            mixed_precision=mixed,
            checkpointing=ckpt,
            attention=attention,
            batch=batch,
            length=length,
        )
        prediction = memory_truth.predicted(spec)
        error = prediction.total / trace_step(spec).peak - 1
        moment = prediction.moments.get(prediction.phase, "")
        label = (
            f"{dtype:8} {'autocast' if mixed else '-':8} {method:4} {ckpt or 'off':13} "
            f"{attention:5} b{batch} s{length}  {prediction.phase}: {moment}"
        )
        found.append((error, label))
    return found


def main(argv: list[str]) -> int:
    warnings.filterwarnings("ignore")
    worst = 0.0
    for family in argv or list(FAMILIES):
        found = errors(FAMILIES[family])
        for error, label in found:
            print(f"{family:6} {error:+.4f}  {label}", flush=True)
        within = [sum(abs(e) <= bound for e, _ in found) for bound in (0.01, 0.02)]
        print(f"{family}: {len(found)} configurations, {within[0]} within ±1 %, {within[1]} ±2 %")
        worst = max(worst, max(abs(e) for e, _ in found))
    return 0 if worst <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
