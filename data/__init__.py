"""Bundled real data (with provenance in SOURCES.md), loaders and synthetic generators."""

from data.loaders import (
    DATA_DIR,
    POLICY_FILE,
    ais_curves,
    ais_curves_xy,
    ais_raw,
    ecg_curves,
    italy_power_stream,
    taylor_stream,
    write_demo_inputs,
)
from data.synthetic import curve_table, gaussian_mixture_curves, periodic_stream, trajectories

__all__ = [
    "DATA_DIR",
    "POLICY_FILE",
    "ais_curves",
    "ais_curves_xy",
    "ais_raw",
    "curve_table",
    "ecg_curves",
    "gaussian_mixture_curves",
    "italy_power_stream",
    "periodic_stream",
    "taylor_stream",
    "trajectories",
    "write_demo_inputs",
]
