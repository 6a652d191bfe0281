"""GPTBigCode (granite-13b/20b/34b-code, santacoder): GPT-2's spelling of the shapes, one fused
c_attn with a single shared key/value head, learned positions added to the embedding."""

from __future__ import annotations

from ado_actuators.sfttrainer.plan.model.families.spec import Family, Spelling

DEFAULT_POSITIONS = 1024
"""GPTBigCodeConfig's n_positions where config.json gives none: what the model's causal mask
buffer is sized by. The parameter count reads none then (a lower bound's smaller reading)."""

FAMILIES = (
    Family(
        "gpt_bigcode",
        layout="gpt_bigcode",
        transformed_embedding=True,
        spelling=Spelling(
            hidden=("n_embd", "hidden_size"),
            layers=("n_layer", "num_hidden_layers"),
            heads=("n_head",),
            intermediate=("n_inner",),
            # GPTBigCodeConfig maps max_position_embeddings onto n_positions
            positions=("n_positions", "max_position_embeddings"),
        ),
    ),
)
