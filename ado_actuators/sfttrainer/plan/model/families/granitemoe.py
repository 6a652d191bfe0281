"""GraniteMoE: Granite's embedding multiplier, experts as fused ParallelExperts tensors (no
nn.Linear LoRA can target); granitemoeshared adds a dense shared MLP beside them."""

from __future__ import annotations

from ado_actuators.sfttrainer.plan.model.families.spec import Family

FAMILIES = (
    Family("granitemoe", moe="granitemoe", transformed_embedding=True),
    Family("granitemoeshared", moe="granitemoe", transformed_embedding=True, shared_experts=True),
)
