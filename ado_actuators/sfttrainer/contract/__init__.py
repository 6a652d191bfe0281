"""What crosses a boundary, importable from either side: the trainer's job and each rank's
report (trainer_io.py, the process boundary), a dataset's entries by position (entries.py),
the texts a GPU's exhausted memory shows itself by (oom_texts.py), and what a measurement
ends as (outcomes.py, the engine's answer to its front end) and the layout of its working
directory (workspace.py); the byte units every layer counts in (units.py); the names of the
throughput and loss properties several layers read (properties.py, loss.py). Imports only
host/, for the one atomic write of a file (a rank's report, a dataset's first entries), which is
standard library only, so either side can still import this layer."""
