"""An architecture the hand-written counter does not know gets its verdict from a trace of its
own code: transformers builds it from config.json, a subprocess trains one step under
FakeTensorMode, and the parts are kept under hf_home (plan/memory/traced.py)."""

from __future__ import annotations

import json
import subprocess

import pytest
from training_configuration import configuration_of

from ado_actuators.sfttrainer.catalog.entity import entity_values
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.contract.memory_trace import StepSpec
from ado_actuators.sfttrainer.plan.memory import traced as traced_parts
from ado_actuators.sfttrainer.plan.memory.trace.step import trace_step
from ado_actuators.sfttrainer.plan.memory.verdict import assess, traces_directory

pytestmark = pytest.mark.slow

# Gemma 2 at a small width (its config.json's keys; the counter knows no Gemma)
GEMMA2 = dict(
    model_type="gemma2",
    vocab_size=2048,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    pad_token_id=0,
)
LORA = catalog_data().experiment("finetune_lora_benchmark-v1.0.0")


def values(**kw):
    return entity_values(
        {
            "model_name": "gemma",
            "model_max_length": 128,
            "batch_size": 2,
            "number_gpus": 1,
            "gpu_model": "NVIDIA-A10G",
            **kw,
        }
    )


def test_an_architecture_not_counted_by_hand_is_traced_once_and_kept(tmp_path, monkeypatch):
    model = tmp_path / "gemma"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(GEMMA2))
    hf_home = str(tmp_path / "hf")
    found = assess(
        configuration_of(values(), LORA, str(model), hf_home), hf_home=hf_home, enabled=True
    )
    assert found.skipped is None and found.prediction is not None
    assert found.prediction.source == "trace" and found.bound is not None
    metadata = found.prediction_metadata()
    assert metadata["parts_from"] == "trace" and metadata["predicted"] is True
    assert any(note.startswith("parts from a trace") for note in metadata["notes"])
    kept = list(traces_directory(hf_home).glob("*.json"))
    assert len(kept) == 1
    # asked again in a fresh process: read from the file, no subprocess
    traced_parts._MEMORY.clear()

    def no_subprocess(*args, **kwargs):
        raise AssertionError("traced again")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    again = assess(
        configuration_of(values(), LORA, str(model), hf_home), hf_home=hf_home, enabled=True
    )
    assert again.prediction.total == found.prediction.total


def test_the_subprocess_trace_is_the_in_process_trace_with_the_state_at_rest(tmp_path):
    one = values(gradient_accumulation_steps=1)
    found = assess(
        configuration_of(one, LORA, _model(tmp_path), str(tmp_path)),
        hf_home=str(tmp_path),
        enabled=True,
    )
    direct = trace_step(
        StepSpec(
            GEMMA2,
            peft_method="lora",
            target_modules=tuple(catalog_data().target_modules("gemma")),
            lora_alpha=16,
            lora_r=4,
            checkpointing="non_reentrant",
            batch=2,
            length=128,
            steps=2,
        )
    )
    # the second step's peaks: the first's with the optimizer state made at its end
    for phase in ("forward", "backward", "optimizer_step"):
        assert sum(found.prediction.phases[phase].values()) == direct.total(phase), phase


def test_a_model_type_transformers_cannot_build_is_skipped_saying_why(tmp_path):
    model = tmp_path / "acme"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "acme_lm"}))
    found = assess(
        configuration_of(values(), LORA, str(model), str(tmp_path)),
        hf_home=str(tmp_path),
        enabled=True,
    )
    assert found.prediction is None and found.bound is None
    assert "transformers could not train the model from its config.json" in found.skipped
    assert "acme_lm" in found.skipped


def _model(tmp_path):
    model = tmp_path / "g"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(GEMMA2))
    return str(model)


# Bamba at a small width: two Mamba-2 layers and one attention layer
BAMBA = dict(
    model_type="bamba",
    vocab_size=512,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    attn_layer_indices=[1],
    mamba_n_heads=8,
    mamba_d_head=32,
    mamba_d_state=16,
    mamba_n_groups=1,
    mamba_expand=1,
    mamba_chunk_size=64,
    tie_word_embeddings=False,
)


def test_mamba_layers_train_as_the_fused_kernel_allocates_not_as_the_torch_fallback(monkeypatch):
    """transformers' torch fallback holds [batch, chunks, chunk, chunk, heads, state] products a
    GPU run never makes; the trace takes the kernel's path (plan/memory/trace/mamba_emulation.py), saying so."""
    from transformers.models.bamba import modeling_bamba

    from ado_actuators.sfttrainer.plan.memory.trace import mamba_emulation

    spec = StepSpec(BAMBA, batch=2, length=256, steps=1)
    kernel = trace_step(spec)
    assert mamba_emulation.ASSUMED in kernel.assumed
    # the trace leaves transformers as it found it
    assert modeling_bamba.is_fast_path_available is False
    assert modeling_bamba.BambaMixer.torch_forward.__name__ == "torch_forward"
    assert modeling_bamba.BambaMixer.torch_forward.__qualname__.startswith("BambaMixer")
    # without the emulation: the fallback's products, a chunk squared times heads times state
    monkeypatch.setattr(mamba_emulation, "install", lambda assumed: [])
    fallback = trace_step(spec)
    assert mamba_emulation.ASSUMED not in fallback.assumed
    chunk_products = 2 * (256 // 64) * 64 * 64 * 8 * 16 * 2  # one [b, c, l, l, h, n] in bf16
    assert fallback.total("forward") - kernel.total("forward") > chunk_products


def test_lora_on_names_an_architecture_lacks_is_refused_as_peft_refuses_it():
    """The catalogue's default targets (q_proj, v_proj) on Phi-3 (qkv_proj) and GPT-NeoX
    (query_key_value): PEFT would refuse them, so the trace does too, naming the model's own
    layers, and never traces a run the job would not make; on Llama they train."""
    phi3 = dict(
        model_type="phi3",
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        pad_token_id=0,
    )
    neox = dict(
        model_type="gpt_neox",
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
    )
    targets = ("q_proj", "v_proj")
    for config, own in ((phi3, "qkv_proj"), (neox, "query_key_value")):
        spec = StepSpec(config, peft_method="lora", target_modules=targets, steps=1)
        with pytest.raises(
            ValueError, match=f"name no linear layer of this {config['model_type']}"
        ) as no:
            trace_step(spec)
        assert own in str(no.value)
    llama = dict(phi3, model_type="llama")
    found = trace_step(StepSpec(llama, peft_method="lora", target_modules=targets, steps=1))
    assert not [note for note in found.assumed if note.startswith("LoRA on")]
    assert found.inventory["trainable"] > 0
