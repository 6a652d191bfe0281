"""config.json dicts of published models, as tests hand them to the planner: each model's shape
written once."""

from __future__ import annotations

LLAMA_31_8B = {
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
}
"""Llama-3.1-8B (and Llama-3-8B: the same shape)."""
