"""Periodic streams under w-event LDP: the Square Wave and Piecewise randomizers, smoothing.

Spec: ``docs/mechanisms.md`` §2.1, §2.2, §2.7. Paper: CPR (arXiv 2605.02724).
The CPR paper's comparison baselines (Laplace, LBD, SW_moving, SW_filter) are
benchmark code: ``benchmarks/streams/baselines/``.
"""

from mechanisms.streams.smoothing import FILTER_KINDS, filter_smooth, moving_average
from mechanisms.streams.square_wave import (
    square_wave,
    square_wave_cdf,
    square_wave_estimate,
    square_wave_estimate_variance,
    square_wave_moments,
    square_wave_params,
    square_wave_pdf,
    square_wave_worst_variance,
)

__all__ = [
    "FILTER_KINDS",
    "filter_smooth",
    "moving_average",
    "square_wave",
    "square_wave_cdf",
    "square_wave_estimate",
    "square_wave_estimate_variance",
    "square_wave_moments",
    "square_wave_params",
    "square_wave_pdf",
    "square_wave_worst_variance",
]
