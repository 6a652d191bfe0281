"""Decisions over a space of configurations, before and between measurements: the preview of
every configuration up to its launch (preview.py) and its bill (bill.py, preview_bill.py), a
device calibrated on its own measured rows (calibration.py) and the preview re-predicted on it
(calibrated.py), and the guided walk: its rule (guided_rule.py: what to measure next and what
never) driven over a space's configurations (guided_walk.py). Pure: imports neither ado-core
nor Ray; it asks engine/ to resolve each configuration as a measurement would."""
