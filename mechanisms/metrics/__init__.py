"""Error metrics for curves (exact L2) and streams (cosine distance, period accuracy)."""
from mechanisms.metrics.streams import cosine_distance, correlation_distance, minmax_normalize, period_tolerance, period_match, period_accuracy  # noqa: E501,F401,I001
from mechanisms.metrics.curves import l2_distance, l2_norm, l2_error, normalized_l2_error, normalized_squared_error, eta, eta_closed_form, err_bound, expected_noise_norm  # noqa: E501,F401,I001
