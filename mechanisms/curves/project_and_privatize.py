"""Algorithm 2 / 6: Project-and-Privatize (spec §1.5; paper Sec. 3.4, Thm 3.2/3.3).

Project q onto a finite-dimensional space U_f (least squares, exact for
piecewise-linear q), then add noise shaped by the Gram matrix:
ã = a + Σ^{1/2} Z/ε with Z ~ SLap(D) (GP), or ã = a + Σ^{1/2} Z/√(2ρ) with
Z ~ N(0, I_D) (CGP), so that dist₂(f_ã, f_a) = ‖Z‖/ε (resp. ‖Z‖/√(2ρ)).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from mechanisms.cost import Cost, CostItem, float_at_most
from mechanisms.curves._budget import budget, check_rng
from mechanisms.curves._piecewise import SubPieces, check_curve
from mechanisms.curves.bases import LocalBasis, PiecewiseBasis, SincBasis, make_basis
from mechanisms.curves.bounds import noise_scale
from mechanisms.curves.result import PrivateFunction
from mechanisms.curves.samplers import correlate, gaussian, noise_sampler, slap
from mechanisms.curves.sinc_rule import sinc_basis_for_budget
from mechanisms.discrete_gaussian import cgp_lattice
from mechanisms.errors import MechanismParameterError

__all__ = ["project_and_privatize", "least_squares", "privatize_coefficients"]

BasisSpec = str | LocalBasis | SincBasis | PiecewiseBasis


_AUTO_KEYS = ("sample_spacing", "kink_error", "edge_error", "ratios", "max_terms")


def _resolve_basis(
    basis: BasisSpec,
    t: np.ndarray,
    breakpoints: object,
    options: dict[str, Any],
    budget_for_rule: tuple[str, Fraction, int] | None = None,
) -> tuple[LocalBasis | SincBasis, np.ndarray]:
    if isinstance(basis, str) and options.get("spacing") == "auto":
        if basis.lower() != "sinc":
            raise MechanismParameterError("spacing='auto' is an option of the sinc basis only")
        if budget_for_rule is None:
            raise MechanismParameterError(
                "spacing='auto' is chosen from the budget; use project_and_privatize, or "
                "sinc_basis_for_budget and pass the basis")
        extra = set(options) - {"spacing", *_AUTO_KEYS}
        if extra:
            raise MechanismParameterError(
                f"spacing='auto' sets n_terms and first itself; unexpected {sorted(extra)}")
        notion, amount, n_out = budget_for_rule
        rule = {k: options[k] for k in _AUTO_KEYS if k in options}
        kw = {"epsilon": amount} if notion == "gp" else {"rho": amount}
        basis_obj: LocalBasis | SincBasis = sinc_basis_for_budget(
            float(t[0]), float(t[-1]), n_outputs=n_out, **kw, **rule)
        options = {}
    elif isinstance(basis, str):
        basis_obj = make_basis(basis, **options)
    elif isinstance(basis, PiecewiseBasis):
        if breakpoints is not None:
            raise MechanismParameterError("give breakpoints either in the PiecewiseBasis or apart")
        breakpoints = basis.edges
        basis_obj = basis.local
    elif isinstance(basis, (LocalBasis, SincBasis)):
        basis_obj = basis
    else:
        raise MechanismParameterError(
            f"basis must be a name or a basis object, got {type(basis).__name__}"
        )
    if options and not isinstance(basis, str):
        raise MechanismParameterError("basis options are only accepted with a basis name")
    if isinstance(basis_obj, SincBasis):
        if breakpoints is not None:
            raise MechanismParameterError("the sinc basis lives on R and takes no breakpoints")
        return basis_obj, np.array([t[0], t[-1]])
    if breakpoints is None:
        edges = np.array([t[0], t[-1]])
    else:
        edges = PiecewiseBasis(basis_obj, np.asarray(breakpoints, dtype=np.float64)).edges
    return basis_obj, edges


def _fit(
    t: np.ndarray, v: np.ndarray, basis: LocalBasis | SincBasis, edges: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray] | None]:
    """Least-squares coefficients (k, m, n) and, for non-orthonormal bases, Cholesky factors."""
    if isinstance(basis, SincBasis):
        return basis.inner(t, v)[None, :, :], None
    if edges[0] < t[0] or edges[-1] > t[-1]:
        raise MechanismParameterError("breakpoints must lie inside the curve's domain [t0, tN]")
    pieces = SubPieces(t, v, edges)
    r = basis.inner(pieces, edges)
    if basis.orthonormal:
        return r, None
    chols = []
    a = np.empty_like(r)
    for i in range(edges.size - 1):
        g = basis.gram(float(edges[i]), float(edges[i + 1]))
        try:
            c = cho_factor(g, lower=True)
        except np.linalg.LinAlgError as err:
            raise MechanismParameterError(
                "the Gram matrix of this basis is numerically singular; use the Legendre basis"
            ) from err
        a[i] = cho_solve(c, r[i])
        chols.append(np.tril(c[0]))
    return a, chols


def privatize_coefficients(
    a: np.ndarray,
    *,
    notion: str,
    amount: Fraction | float,
    rng: np.random.Generator,
    chols: list[np.ndarray] | None = None,
    noise: str | None = None,
) -> np.ndarray:
    """Add Σ^{1/2}Z·scale to coefficients a of shape (k, m, n) (Thm 3.2/3.3, spec §1.5).

    Privacy: if a = P(q) for a 1-Lipschitz projection P, the result is
    ε-GP (notion "gp", amount ε, Z ~ SLap(k·m·n) drawn jointly over all
    segments) or ρ-CGP (notion "cgp", amount ρ). Cost: amount.
    Paper Thm 3.2/3.3 and Sec. 4.1.1; spec §1.2, §1.5.

    Args:
        a: exact coefficients (k, m, n).
        notion: ``"gp"`` or ``"cgp"``.
        amount: the exact ε or ρ charged (> 0); a float is read as its exact
            binary value. The scale is never below the exact 1/ε or 1/√(2ρ).
        rng: injected generator.
        chols: per-segment lower Cholesky factors of the Gram blocks (None
            for orthonormal bases).
        noise: the sampler (`samplers.NOISES`). CGP default
            ``"discrete_gaussian"``: the whitened coordinates Lᵀa
            (‖Lᵀa − Lᵀa'‖₂ = dist₂ of the projections) are released on a
            lattice by the exact sampler (ρ-CGP at the same ρ,
            `mechanisms.discrete_gaussian.cgp_lattice`), then mapped back with
            L^{-T} (post-processing); ``"gaussian"``: continuous N(0, I) in
            floating point. GP: ``"spherical_laplace"`` (the only one).

    Returns:
        The noisy coefficients ã, same shape.
    """
    check_rng(rng)
    if noise_sampler(notion, noise) == "discrete_gaussian":
        return _discrete_cgp(a, amount=amount, rng=rng, chols=chols)
    scale = noise_scale(notion, amount)
    dim = a.size
    z = (slap(dim, rng=rng) if notion == "gp" else gaussian(dim, rng=rng)).reshape(a.shape)
    if chols is not None:
        z = np.stack([correlate(z[i], chols[i]) for i in range(a.shape[0])])
    return a + scale * z


def _discrete_cgp(a: np.ndarray, *, amount: Fraction | float, rng: np.random.Generator,
                  chols: list[np.ndarray] | None) -> np.ndarray:
    """ρ-CGP coefficients through the exact lattice sampler in whitened coordinates."""
    w = a if chols is None else np.stack([chols[i].T @ a[i] for i in range(a.shape[0])])
    released, _ = cgp_lattice(w, rho=Fraction(amount), rng=rng)
    if chols is None:
        return released
    return np.stack([correlate(released[i], chols[i]) for i in range(a.shape[0])])


def _as_function(
    basis: LocalBasis | SincBasis,
    edges: np.ndarray,
    coefficients: np.ndarray,
    cost: Cost | None,
    notion: str,
    amount: float,
    diagnostics: dict[str, Any],
) -> PrivateFunction:
    return PrivateFunction(
        breakpoints=edges,
        coefficients=coefficients,
        basis_name=basis.name,
        basis_params=basis.params(),
        cost=cost,
        dim=int(coefficients.size),
        noise_notion=notion,
        noise_budget=amount,
        diagnostics=diagnostics,
        outside="basis" if isinstance(basis, SincBasis) else "clamp",
    )


def least_squares(
    t: object,
    values: object,
    basis: BasisSpec,
    *,
    breakpoints: object = None,
    **basis_options: Any,
) -> PrivateFunction:
    """The exact least-squares projection f_a = P_{U_f}(q). NOT private.

    For evaluation on public or synthetic data only (the "LS Approximation"
    line of the paper's Fig. 10); it spends nothing and adds no noise.

    Args:
        t: sample times (N,), strictly increasing.
        values: samples (N,) or (N, n).
        basis: as for `project_and_privatize`.
        breakpoints: optional segment edges inside [t[0], t[-1]].
        **basis_options: degree / n_terms / spacing / first for a basis name.

    Returns:
        A PrivateFunction with cost None and noise_budget 0.
    """
    ta, va = check_curve(t, values)
    basis_obj, edges = _resolve_basis(basis, ta, breakpoints, basis_options)
    a, _ = _fit(ta, va, basis_obj, edges)
    return _as_function(basis_obj, edges, a, None, "gp", 0.0, {"private": False})


def project_and_privatize(
    t: object,
    values: object,
    basis: BasisSpec,
    *,
    epsilon: float | str | Fraction | None = None,
    rho: float | str | Fraction | None = None,
    rng: np.random.Generator,
    breakpoints: object = None,
    noise: str | None = None,
    **basis_options: Any,
) -> PrivateFunction:
    """Project-and-Privatize: L2 projection onto span(basis), then shaped noise.

    Privacy: ε-GP (or ρ-CGP) w.r.t. dist₂(q, q') = (∫‖q − q'‖² dt)^{1/2} over
    the curve's domain [t₀, t_N], in the units of t and of the values; any
    two curves on the same domain are neighbours at that distance. The
    projection is 1-Lipschitz (Lemma 3.6) and the noise is Σ^{1/2}Z/ε with
    Z ~ SLap(D) drawn jointly over all segments (GP), or, under CGP, the
    whitened coefficients drawn exactly from the discrete Gaussian on a
    lattice at ρ (the default; Σ^{1/2}Z/√(2ρ), Z ~ N(0, I_D), in floating point
    with ``noise="gaussian"``). Cost: the whole budget in one step ``"project"``.
    Error: dist₂(f̃, f_a) = ‖Z‖·scale exactly, ≤ η(β; D, p)·scale w.p. 1 − β.
    Paper Algorithm 2 (GP) / 6 (CGP), Thm 3.2/3.3; spec §1.5.

    Args:
        t: sample times (N,), strictly increasing (any interval, need not
            start at 0).
        values: samples (N,) or (N, n), read as the piecewise-linear
            interpolant.
        basis: a name ``"legendre"`` (option ``degree``), ``"linear"``,
            ``"constant"``, ``"monomial"`` (``degree``; on the rescaled
            segment), ``"fourier"`` (``n_terms``), ``"sinc"`` (``n_terms``,
            ``spacing``, ``first``: φ_j(t) = sinc((t − (first+j)h)/h)/√h on R;
            ``spacing="auto"`` picks h from the budget by the public model of
            `sinc_basis_for_budget`, with its options ``sample_spacing``,
            ``kink_error``, ``edge_error``, ``ratios``, ``max_terms``, and
            centres h·Z ∩ [t₀, t_N]; data-independent, so it costs nothing),
            or a basis object (`LegendreBasis`, `MonomialBasis`,
            `FourierBasis`, `SincBasis`, `PiecewiseBasis`).
        epsilon: ε for ε-GP (exactly one of epsilon / rho).
        rho: ρ for ρ-CGP.
        rng: injected numpy Generator.
        breakpoints: optional segment edges for a piecewise local basis
            (default: one segment, the whole domain).
        noise: the sampler (`samplers.NOISES`): CGP ``"discrete_gaussian"``
            (default: exact lattice sampler,
            `mechanisms.discrete_gaussian.cgp_lattice`; same ρ, no
            floating-point leakage; benchmarks/sampling gives its speed) or
            ``"gaussian"`` (continuous, floating point); GP
            ``"spherical_laplace"``.
        **basis_options: options of a basis given by name.

    Returns:
        A PrivateFunction; diagnostics (all public, data-independent):
        ``dim``, ``segments``, ``basis`` (and ``sinc_spacing``, ``sinc_terms``
        for a sinc basis).
    """
    notion, amount = budget(epsilon, rho)
    check_rng(rng)
    ta, va = check_curve(t, values)
    basis_obj, edges = _resolve_basis(basis, ta, breakpoints, basis_options,
                                      (notion, amount, va.shape[1]))
    a, chols = _fit(ta, va, basis_obj, edges)
    noisy = privatize_coefficients(a, notion=notion, amount=amount, rng=rng, chols=chols,
                                   noise=noise)
    cost = Cost(notion=notion, requested=amount, items=(CostItem("project", notion, amount),))
    diag: dict[str, Any] = {"dim": int(a.size), "segments": int(edges.size - 1),
                            "basis": basis_obj.name}
    if isinstance(basis_obj, SincBasis):
        diag["sinc_spacing"] = basis_obj.spacing
        diag["sinc_terms"] = basis_obj.m
    return _as_function(basis_obj, edges, noisy, cost, notion, float_at_most(amount), diag)
