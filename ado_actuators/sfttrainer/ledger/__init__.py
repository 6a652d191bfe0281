"""The record of GPU out-of-memory runs that were measured (record.py), the rule saying which
requests such a run answers (dominance.py), and a measurement's dealings with both
(neighbours.py: asked before launch, told after). The engine calls it; it imports neither the
engine nor ado's front end."""
