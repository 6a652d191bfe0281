"""A slice of the truth matrix (benchmarks/memory_truth.py): the predicted peak against the
training step itself, traced through transformers, PEFT and torch at full width (4 layers),
within 5 % for every family the formula counts; and the fake trace equal to the real one.
A change to plan/memory/activations.py or plan/memory/peak.py that breaks exactness fails here."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import memory_truth

from ado_actuators.sfttrainer.contract.memory_trace import PHASES, StepSpec
from ado_actuators.sfttrainer.plan.memory.trace.step import trace_step

pytestmark = pytest.mark.slow

SLICE = (
    # (family, method, checkpointing, attention, batch, length)
    ("mistralai/Mistral-7B-v0.1", "lora", "non_reentrant", "flash_attention_2", 8, 4096),
    ("meta-llama/Meta-Llama-3-8B", "none", "reentrant", "sdpa", 4, 1024),
    ("ibm-granite/granite-3.1-8b-instruct", "pt", "reentrant", "flash_attention_2", 1, 4096),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "pt", "non_reentrant", "flash_attention_2", 4, 4096),
    ("ibm-granite/granite-3.0-3b-a800m-instruct", "lora", None, "flash_attention_2", 1, 4096),
    ("bigcode/gpt_bigcode-santacoder", "lora", None, "flash_attention_2", 4, 4096),
    ("Qwen/Qwen2.5-7B", "none", None, "eager", 1, 1024),
)


def case(name: str, method: str, ckpt: str | None, attention: str, batch: int, length: int):
    config = memory_truth._depth(dict(memory_truth.load_configs()[name]), 4)
    targets = memory_truth.FAMILIES[name] if method == "lora" else ()
    spec = StepSpec(
        config, method, targets, attention=attention, checkpointing=ckpt, batch=batch, length=length
    )
    return memory_truth.Case(name, spec)


@pytest.mark.parametrize("row", SLICE, ids=[f"{r[0].split('/')[-1]}-{r[1]}" for r in SLICE])
def test_the_prediction_is_within_5_percent_of_the_traced_peak(row):
    found = memory_truth.run(case(*row))
    assert found.prediction.source == "formula"
    assert abs(found.error) <= memory_truth.TOLERANCE, memory_truth.parts(found)


@pytest.mark.parametrize(
    ("method", "modules", "attention", "checkpointing"),
    [
        ("lora", ("q_proj", "v_proj"), "sdpa", "reentrant"),
        # flash-attn 2 emulated (plan/memory/trace/flash_emulation.py): real tensors take its values path
        ("none", (), "flash_attention_2", None),
    ],
)
def test_the_fake_trace_is_the_real_one(method, modules, attention, checkpointing):
    spec = StepSpec(
        memory_truth.SMALL,
        method,
        modules,
        attention=attention,
        checkpointing=checkpointing,
        batch=2,
        length=64,
    )
    fake, real = (trace_step(dataclasses.replace(spec, fake=f)) for f in (True, False))
    assert {p: fake.total(p) for p in PHASES} == {p: real.total(p) for p in PHASES}


@pytest.mark.parametrize("method", ["none", "lora"])
def test_a_vision_step_is_traced_fake_as_it_runs_real_and_predicted_within_2_percent(method):
    """A tiny LLaVA-NeXT on the taller image: a fake step skips the model's check of its image
    tokens (a fake tensor has no values to index by) and is still the real step to the byte;
    the formula's tower and projector (plan/memory/vision.py) hold within 2 %."""
    case = next(
        c
        for c in memory_truth.vision_cases()
        if c.name.startswith("small")
        and c.spec.peft_method == method
        and c.spec.image == (768, 384)
    )
    fake, real = (trace_step(dataclasses.replace(case.spec, fake=f)) for f in (True, False))
    assert {p: fake.total(p) for p in PHASES} == {p: real.total(p) for p in PHASES}
    found = memory_truth.run(case)
    assert "vision_tower" in found.prediction.phases["forward"]
    assert abs(found.error) <= 0.02, memory_truth.parts(found)
