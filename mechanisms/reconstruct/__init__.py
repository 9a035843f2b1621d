"""CPR reconstruction of periodic streams from Square Wave reports (post-processing).

Spec: ``specs/MECHANISMS.md`` §2.3-§2.5 and §5. Paper: CPR (arXiv 2605.02724).
"""

from mechanisms.reconstruct.cpr import PADDING_MODES, CPRResult, cpr, phase_groups, tile_template
from mechanisms.reconstruct.em import (
    PSEUDO_SAMPLES,
    EMResult,
    em_grid,
    kde_mode,
    pseudo_samples,
    silverman_bandwidth,
    sw_em,
)
from mechanisms.reconstruct.period import (
    PERIOD_METHODS,
    PeriodDetection,
    detect_period,
    detect_period_details,
    fold_anova,
    repeatability,
)

__all__ = [
    "PADDING_MODES",
    "PERIOD_METHODS",
    "PSEUDO_SAMPLES",
    "CPRResult",
    "EMResult",
    "PeriodDetection",
    "cpr",
    "detect_period",
    "detect_period_details",
    "em_grid",
    "fold_anova",
    "kde_mode",
    "phase_groups",
    "pseudo_samples",
    "repeatability",
    "silverman_bandwidth",
    "sw_em",
    "tile_template",
]
