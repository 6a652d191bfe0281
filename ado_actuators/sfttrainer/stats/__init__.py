"""Pure statistics of a step series, shared by the rank that decides when to stop and the
metrics that report how precise the figure is."""
