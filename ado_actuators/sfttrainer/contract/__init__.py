"""What crosses a boundary, importable from either side: the trainer's job and each rank's
report (trainer_io.py, the process boundary), a dataset's entries by position (entries.py),
the texts a GPU's exhausted memory shows itself by (oom_texts.py), and what a measurement
ends as (outcomes.py, the engine's answer to its front end) and the layout of its working
directory (workspace.py). Imports no other layer."""
