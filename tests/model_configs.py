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

MIXTRAL_8X7B = {
    "model_type": "mixtral",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
}
"""mistralai/Mixtral-8x7B-Instruct-v0.1's config.json (benchmarks/data/model_configs.yaml)."""
