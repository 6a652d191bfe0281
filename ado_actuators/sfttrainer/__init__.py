"""ado's SFTTrainer actuator: how fast and how reliably a fine-tuning job runs, measured per
configuration, and predicted before anything launches.

The layers, top to bottom (docs/architecture.md draws them; tests/unit/test_layout.py holds the
code to that map): actuator/ is ado's front end and cli/ the console scripts; report/ turns a
space's rows into a picture and answers; space/ decides over a space of configurations (the
preview, its bill, calibration, the guided walk, the answer groups); engine/ runs one
measurement (resolve, validate, skip what needs no launch, hand the rest on) and ledger/ keeps
the record of measured OOMs; execute/ carries a launch plan out on Ray's nodes; plan/ decides
one configuration before launch (the launch plan, memory, speed); catalog/ declares every
entity field and experiment once; stopping/ holds the stop methods; metrics/ turns rank reports
into properties; trainer/ runs inside each rank; contract/, host/ and stats/ are what every
layer shares. This module imports nothing: `ado get actuators` loads actuator/plugin.py alone.
"""
