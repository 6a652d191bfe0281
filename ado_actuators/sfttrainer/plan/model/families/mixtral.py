"""Mixtral: Mistral's attention, experts of their own nn.Linear (w1 gate, w3 up, w2 down) run in
a loop over the experts a token is routed to."""

from __future__ import annotations

from ado_actuators.sfttrainer.plan.model.families.spec import Family

FAMILIES = (
    Family("mixtral", moe="mixtral", expert_linears=("w1", "w3", "w2"), default_kv_heads=8),
)
