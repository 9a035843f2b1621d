"""Error metrics for curves (exact L2) and streams (cosine distance, period accuracy)."""
