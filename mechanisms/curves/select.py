"""Algorithm 3 / 7: PrivFuncSelect, private basis selection (spec §1.6; paper Sec. 3.4).

Implemented in the orthonormal Legendre basis on the curve's domain, ordered by
degree 0..max_terms−1 [PROPOSED, spec §1.6]: the nested spans equal those of
the monomials of the paper's experiments, the Gram matrix is the identity
(monomials up to degree 32 are numerically singular), and the coefficient
ranking of line 3 compares genuine L² contributions.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from mechanisms.cost import Cost, CostItem, float_at_most
from mechanisms.curves._budget import budget, check_rng, svt_epsilon
from mechanisms.curves._piecewise import SubPieces, check_curve
from mechanisms.curves.bases import LegendreBasis
from mechanisms.curves.bounds import noise_scale
from mechanisms.curves.project_and_privatize import privatize_coefficients
from mechanisms.curves.result import PrivateFunction
from mechanisms.curves.samplers import noise_sampler
from mechanisms.curves.svt import SVTResult, svt
from mechanisms.errors import MechanismParameterError

__all__ = ["privfuncselect"]


def privfuncselect(
    t: object,
    values: object,
    *,
    max_terms: int = 33,
    epsilon: float | str | Fraction | None = None,
    rho: float | str | Fraction | None = None,
    rng: np.random.Generator,
    threshold1: float | None = None,
    noise: str | None = None,
) -> PrivateFunction:
    """PrivFuncSelect: choose a subset of an ordered basis privately, then privatize.

    Privacy: ε-GP (ρ-CGP) w.r.t. dist₂ over the curve's domain. Four steps of
    ε/4 each (ρ/4; SVTs run at √(2ρ/4)): ``svt_terms`` (SVT over
    g_j = −dist₂(P_{U^(j)} q, q), j = 1..max_terms, threshold 𝒯₁),
    ``project_all`` (Project-and-Privatize on the first k̄ functions),
    ``svt_subset`` (SVT with threshold 0 over g'_r = n|N_r|/(ε/4) −
    dist₂(f_{b^(r)}, q), CGP: √(n|N_r|)/√(2ρ/4) − dist₂, N_r the r largest
    noisy coefficients), ``project_subset`` (Project-and-Privatize on N_{k₁}).
    All queries are 1-Lipschitz (the b^(r) are released values). Paper
    Algorithm 3 (GP) / 7 (CGP); spec §1.6.

    Args:
        t: sample times (N,), strictly increasing.
        values: samples (N,) or (N, n).
        max_terms: size of the ordered basis (Legendre degrees 0..max_terms−1;
            33 = the paper's monomials of degree ≤ 32).
        epsilon: ε (exactly one of epsilon / rho).
        rho: ρ.
        rng: injected generator.
        threshold1: the line-1 threshold 𝒯₁ (default −1/(ε/4), CGP
            −1/√(2ρ/4) [PROPOSED]).
        noise: both projections' sampler (`samplers.NOISES`; CGP default
            ``"discrete_gaussian"``, exact on a lattice, or ``"gaussian"``).

    Returns:
        A PrivateFunction with coefficients (1, max_terms, n), zero outside
        the selected terms; dim = |N_{k₁}|·n. Diagnostics: ``k_bar``, ``k1``,
        ``selected_terms`` (degrees), ``svt_terms_halted``,
        ``svt_subset_halted`` are private outputs (safe to release);
        ``max_terms`` is public.
    """
    notion, amount = budget(epsilon, rho)
    check_rng(rng)
    max_terms = _check_max_terms(max_terms)
    noise = noise_sampler(notion, noise)
    quarter = amount / 4
    final = amount - 3 * quarter
    eps_s = svt_epsilon(notion, quarter)
    scale = noise_scale(notion, quarter)
    threshold1 = _threshold(threshold1, scale)
    ta, va = check_curve(t, values)
    n, basis = va.shape[1], LegendreBasis(max_terms - 1)
    edges = np.array([ta[0], ta[-1]])
    c, dist, res_full2 = _coefficients(ta, va, basis, edges)

    # line 1
    first = svt(-dist, threshold=float(threshold1), epsilon=eps_s, rng=rng)
    k_bar = first.index + 1
    # line 2: Project-and-Privatize on the first k̄ functions (orthonormal: G = I)
    noisy = privatize_coefficients(c[None, :k_bar], notion=notion, amount=quarter, rng=rng,
                                   noise=noise)[0]
    # lines 3-5
    second, chosen = _select_subset(c, noisy, res_full2, _penalties(notion, n, k_bar, scale),
                                    eps_s, rng)
    k1 = chosen.size
    # lines 6-7: Project-and-Privatize on the chosen functions
    coef = np.zeros((1, max_terms, n))
    coef[0, chosen] = privatize_coefficients(c[None, chosen], notion=notion, amount=final,
                                             rng=rng, noise=noise)[0]
    return PrivateFunction(
        breakpoints=edges, coefficients=coef, basis_name="legendre", basis_params=basis.params(),
        cost=_cost(notion, amount, quarter, final), dim=int(k1 * n), noise_notion=notion,
        noise_budget=float_at_most(final),
        diagnostics={"max_terms": max_terms, "k_bar": int(k_bar), "k1": int(k1),
                     "selected_terms": [int(j) for j in chosen],
                     "svt_terms_halted": bool(first.halted),
                     "svt_subset_halted": bool(second.halted)},
    )


def _select_subset(c: np.ndarray, noisy: np.ndarray, res_full2: float, penalties: np.ndarray,
                   eps_s: float, rng: np.random.Generator) -> tuple[SVTResult, np.ndarray]:
    """Lines 3-5: SVT over g'_r = penalty_r − dist₂(f_{b^(r)}, q), r the noisy-norm rank.

    Returns the SVT's result and the chosen term indices N_{k₁} (sorted).
    """
    k_bar = noisy.shape[0]
    order = np.argsort(-np.linalg.norm(noisy, axis=1), kind="stable")
    dist_b = _ranked_distances(c, noisy, order, k_bar, res_full2)
    second = svt(penalties - dist_b, threshold=0.0, epsilon=eps_s, rng=rng)
    return second, np.sort(order[: second.index + 1])


def _cost(notion: str, amount: Fraction, quarter: Fraction, final: Fraction) -> Cost:
    """The four steps' cost: three quarters, then the rest for the final projection."""
    return Cost(notion=notion, requested=amount, items=(
        CostItem("svt_terms", notion, quarter), CostItem("project_all", notion, quarter),
        CostItem("svt_subset", notion, quarter), CostItem("project_subset", notion, final)))


def _check_max_terms(max_terms: object) -> int:
    """`max_terms` as an int in [1, 65]."""
    if isinstance(max_terms, bool) or not isinstance(max_terms, (int, np.integer)):
        raise MechanismParameterError("max_terms must be an integer")
    if not 1 <= int(max_terms) <= 65:
        raise MechanismParameterError(f"max_terms must be in [1, 65], got {max_terms}")
    return int(max_terms)


def _penalties(notion: str, n: int, k_bar: int, scale: float) -> np.ndarray:
    """Public offsets n|N_r|/(ε/4) (GP) or √(n|N_r|)/√(2ρ/4) (CGP); `scale` is 1/(ε/4)."""
    sizes = np.arange(1, k_bar + 1)
    return n * sizes * scale if notion == "gp" else np.sqrt(n * sizes) * scale


def _threshold(threshold1: float | None, scale: float) -> float:
    """The line-1 threshold 𝒯₁: as given (finite), by default −1/(ε/4) (CGP −1/√(2ρ/4))."""
    if threshold1 is None:
        return -scale
    if isinstance(threshold1, bool) or not isinstance(
            threshold1, (int, float, np.integer, np.floating)) or not math.isfinite(threshold1):
        raise MechanismParameterError(f"threshold1 must be a finite number, got {threshold1!r}")
    return threshold1


def _coefficients(ta: np.ndarray, va: np.ndarray, basis: LegendreBasis,
                  edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(c, dist, ‖q − P_U q‖²): the curve's coefficients, and dist_j for j = 1..max_terms."""
    length = float(ta[-1] - ta[0])
    mean = va.mean(axis=0)
    pieces = SubPieces(ta, va - mean, edges)
    c_centred = basis.inner(pieces, edges)[0]  # (max_terms, n)
    norm2 = float(pieces.squared_norms()[0])
    explained = np.cumsum(np.sum(c_centred**2, axis=1))
    dist = np.sqrt(np.maximum(norm2 - explained, 0.0))  # dist_j for j = 1..max_terms
    res_full2 = float(dist[-1] ** 2)
    c = c_centred.copy()
    c[0] += mean * math.sqrt(length)
    return c, dist, res_full2


def _ranked_distances(c: np.ndarray, noisy: np.ndarray, order: np.ndarray, k_bar: int,
                      res_full2: float) -> np.ndarray:
    """dist₂(f_{b^(r)}, q) for r = 1..k̄: the r largest noisy terms kept, the rest dropped."""
    err_in = np.sum((c[:k_bar] - noisy) ** 2, axis=1)  # kept term j: ‖c_j − c̃_j‖²
    drop = np.sum(c[:k_bar] ** 2, axis=1)  # dropped term j: ‖c_j‖²
    tail = float(np.sum(c[k_bar:] ** 2))
    base = res_full2 + tail + float(np.sum(drop))
    ranked_in = np.cumsum(err_in[order] - drop[order])
    return np.sqrt(np.maximum(base + ranked_in, 0.0))
