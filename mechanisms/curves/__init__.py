"""Curve mechanisms under geo-privacy (ε-GP / ρ-CGP w.r.t. the L2 distance of functions).

Paper: *Function Privatization in the Local Model* (LSY); specs
``docs/mechanisms.md`` §1. Pure numpy/scipy. Every mechanism takes an injected
``rng``, exactly one of ``epsilon`` / ``rho``, and returns a `PrivateFunction`
with ``.evaluate(t)``, ``.cost``, ``.dim``, ``.breakpoints``,
``.coefficients``, ``.basis_name``, ``.error_bound(beta)``, ``.diagnostics``.
"""

from mechanisms.curves.baseline import baseline_points, moving_average
from mechanisms.curves.bases import (
    FourierBasis,
    LegendreBasis,
    LocalBasis,
    MonomialBasis,
    PiecewiseBasis,
    SincBasis,
    make_basis,
)
from mechanisms.curves.batch import CurveBatch
from mechanisms.curves.bounds import (
    err_bound,
    eta,
    eta_closed_form,
    expected_noise_norm,
    noise_scale,
)
from mechanisms.curves.continuity import continuity_projection, project_continuous
from mechanisms.curves.project_and_privatize import (
    least_squares,
    privatize_coefficients,
    project_and_privatize,
)
from mechanisms.curves.result import PrivateFunction, PrivateFunctionBatch
from mechanisms.curves.samplers import correlate, gaussian, laplace, slap
from mechanisms.curves.segment import (
    DyadicTree,
    ReduceSegOutcome,
    privfuncseg,
    privfuncseg_batch,
    reduce_seg,
)
from mechanisms.curves.select import privfuncselect
from mechanisms.curves.sinc_rule import sinc_basis_for_budget, sinc_rule_table
from mechanisms.curves.svt import SVTResult, svt
from mechanisms.curves.unbounded import privfuncseg_unbounded

__all__ = [
    "CurveBatch",
    "DyadicTree",
    "FourierBasis",
    "LegendreBasis",
    "LocalBasis",
    "MonomialBasis",
    "PiecewiseBasis",
    "PrivateFunction",
    "PrivateFunctionBatch",
    "ReduceSegOutcome",
    "SVTResult",
    "SincBasis",
    "baseline_points",
    "continuity_projection",
    "correlate",
    "err_bound",
    "eta",
    "eta_closed_form",
    "expected_noise_norm",
    "gaussian",
    "laplace",
    "least_squares",
    "make_basis",
    "moving_average",
    "noise_scale",
    "privatize_coefficients",
    "privfuncselect",
    "privfuncseg",
    "privfuncseg_batch",
    "privfuncseg_unbounded",
    "project_and_privatize",
    "project_continuous",
    "reduce_seg",
    "sinc_basis_for_budget",
    "sinc_rule_table",
    "slap",
    "svt",
]
