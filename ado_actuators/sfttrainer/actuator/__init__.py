"""ado's front end: the `SFTTrainer` actuator ado-core loads through the `ado.actuators` entry
point (plugin.py), its `parameters:` block (parameters.py), and the turning of the engine's
outcomes into ado's results (results.py). The only layer that imports ado-core; no other layer
imports this one. Kept light: `ado get actuators` imports it."""
