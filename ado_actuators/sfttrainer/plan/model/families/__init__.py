"""One module per decoder family the planner counts by hand, each declaring its `FAMILIES`
(plan/model/families/spec.py's Family); plan/model/families/registry.py looks them up by
config.json's model_type."""
