"""Error metrics for curves (exact L2) and streams (cosine distance, period accuracy)."""
from mechanisms.metrics.streams import cosine_distance, correlation_distance, minmax_normalize, period_tolerance, period_match, period_accuracy  # noqa: E501,F401,I001
