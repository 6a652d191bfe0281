"""Pure statistics, standard library only: a step series' batch-means interval and trend test,
shared by the rank that decides when to stop and the metrics that report how precise the figure
is (batch_means.py, trend.py); an interval about a figure, its default coverage and Student's t
quantile, declared once for the package (interval.py)."""
