"""CPR reconstruction of periodic streams from Square Wave reports (post-processing).

Spec: ``docs/mechanisms.md`` §2.3-§2.5 and §5. Paper: CPR (arXiv 2605.02724).
"""

from mechanisms.reconstruct.cpr import (
    DETECT_ON,
    FALLBACK_KINDS,
    PADDING_MODES,
    SHRINKAGE,
    CPRResult,
    cpr,
    phase_groups,
    pooled_fits,
    tile_template,
)
from mechanisms.reconstruct.em import (
    PSEUDO_SAMPLES,
    EMResult,
    em_grid,
    kde_mode,
    pseudo_samples,
    silverman_bandwidth,
    sw_em,
)
from mechanisms.reconstruct.gapped import cpr_many, cpr_on_steps, longest_run
from mechanisms.reconstruct.period import (
    PERIOD_METHODS,
    PeriodDetection,
    detect_period,
    detect_period_details,
    fold_anova,
    repeatability,
)
from mechanisms.reconstruct.population import (
    PopulationDistribution,
    PopulationMean,
    grid_quantiles,
    population_distribution,
    population_distribution_from_intervals,
    population_mean,
    population_mean_from_sums,
)
from mechanisms.reconstruct.shrink import (
    SMOOTHER_WINDOWS,
    savgol_trace,
    shrink_periodic,
    sure_smooth,
    sw_noise_variance,
)

__all__ = [
    "DETECT_ON",
    "FALLBACK_KINDS",
    "PADDING_MODES",
    "SHRINKAGE",
    "SMOOTHER_WINDOWS",
    "PERIOD_METHODS",
    "PSEUDO_SAMPLES",
    "CPRResult",
    "EMResult",
    "PeriodDetection",
    "PopulationDistribution",
    "PopulationMean",
    "cpr",
    "cpr_many",
    "cpr_on_steps",
    "detect_period",
    "detect_period_details",
    "em_grid",
    "fold_anova",
    "grid_quantiles",
    "kde_mode",
    "longest_run",
    "phase_groups",
    "pooled_fits",
    "population_distribution",
    "population_distribution_from_intervals",
    "population_mean",
    "population_mean_from_sums",
    "pseudo_samples",
    "repeatability",
    "savgol_trace",
    "shrink_periodic",
    "sure_smooth",
    "sw_noise_variance",
    "silverman_bandwidth",
    "sw_em",
    "tile_template",
]
