"""A tiny random Granite 4.0 hybrid (transformers' `granitemoehybrid`) for tests on CPU.

Mamba-2 layers beside attention layers, with a few experts and a shared one, as the real
hybrids have; the tokenizer is the CPU demo's (examples/local-cpu/tiny_model.py), so token
counts can be compared with the tiny Llama's. Without mamba_ssm and causal_conv1d (or off a
GPU) transformers runs the Mamba-2 layers on its torch path.
"""

from __future__ import annotations

from pathlib import Path

from tiny_model import build_tokenizer

LAYER_TYPES = ["mamba", "attention", "mamba", "attention"]
"""The layers' kinds, in order: two Mamba-2 mixers, each followed by attention."""


def build_tiny_hybrid(
    out_dir: Path, *, model_max_length: int = 512, seed: int = 0, mamba_d_state: int = 16
) -> Path:
    """Writes config, weights and tokenizer of a ~300k-parameter GraniteMoeHybrid to `out_dir`.
    `mamba_d_state`: the Mamba-2 state's size (Granite 4.0's is 128, above its heads' 64)."""
    import torch
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out_dir, model_max_length=model_max_length)
    config = GraniteMoeHybridConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=len(LAYER_TYPES),
        layer_types=LAYER_TYPES,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=32,  # each expert's
        num_local_experts=4,
        num_experts_per_tok=2,
        shared_intermediate_size=64,
        position_embedding_type="rope",
        max_position_embeddings=max(model_max_length, 512),
        mamba_n_heads=4,
        mamba_d_head=32,  # mamba_expand (2) x hidden_size / mamba_n_heads
        mamba_d_state=mamba_d_state,
        mamba_n_groups=1,
        mamba_chunk_size=64,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    GraniteMoeHybridForCausalLM(config).save_pretrained(out_dir, safe_serialization=True)
    return out_dir
