"""A data-independent rule choosing the sinc spacing from the budget [PROPOSED].

The paper (Sec. 5.1) fixes the sinc basis for ECG: time scaled ×80, T = 800,
φ_j = sinc(t − j), j = 1..800, whatever ε. With a fixed span the error of
Project-and-Privatize stops falling once the noise is below the span's
approximation error (about 4% of the norm on 100 Hz ECG with spacing 1), so at
large budgets more, narrower sinc functions are better, and at small budgets
fewer, wider ones.

This rule picks the spacing h from a ladder of multiples of a public sample
spacing dt by minimising a *public* model of the expected squared error:

    E dist₂(f̃, q)² ≈ A²·(h/dt)³ + B²·(h/dt) + E‖Z‖²·scale²,

with m = number of centres h·Z in [lo, hi] (`SincBasis.covering`), D = m·n,
E‖Z‖² = D(D + 1) and scale = 1/ε (GP), or E‖Z‖² = D and scale = 1/√(2ρ) (CGP).
A (``kink_error``) is the approximation error at h = dt due to the curve's
roughness inside the domain (a piecewise-linear curve's spectrum falls like
f⁻², so its out-of-band energy like h³); B (``edge_error``) the part due to the
jumps of the zero extension at the domain ends (a jump's out-of-band energy
falls like h). Both are public priors in the curve's units × √(time unit),
e.g. measured on public data; the rule never looks at the curve itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from mechanisms.cost import float_at_most
from mechanisms.curves._budget import budget
from mechanisms.curves.bases import SincBasis
from mechanisms.curves.bounds import noise_scale
from mechanisms.errors import MechanismParameterError

__all__ = ["DEFAULT_RATIOS", "sinc_basis_for_budget", "sinc_rule_table"]

#: Candidate spacings h/dt. Rational, so the sinc lattice h·Z contains the sample grid
#: dt·Z points it shares (every q-th sample for h = dt·p/q).
DEFAULT_RATIOS: tuple[Fraction, ...] = tuple(Fraction(x) for x in (
    "1/16", "1/12", "1/8", "1/6", "1/4", "1/3", "1/2", "2/3", "1", "3/2", "2", "3", "4",
    "6", "8", "16",
))


def _positive(value: object, name: str, *, zero_ok: bool = False) -> float:
    if isinstance(value, bool):
        raise MechanismParameterError(f"{name} must be a number")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise MechanismParameterError(f"{name} must be a number, got {value!r}") from err
    if not math.isfinite(x) or x < 0 or (x == 0 and not zero_ok):
        raise MechanismParameterError(f"{name} must be finite and {'>= 0' if zero_ok else '> 0'}")
    return x


def sinc_rule_table(
    lo: float,
    hi: float,
    *,
    notion: str,
    amount: float,
    sample_spacing: float,
    kink_error: float,
    edge_error: float = 0.0,
    ratios: Sequence[Fraction | float | str] = DEFAULT_RATIOS,
    max_terms: int = 20_000,
    n_outputs: int = 1,
) -> list[tuple[float, int, float]]:
    """The rule's candidates as (spacing h, number of sinc terms m, modelled RMS error).

    Privacy: spends nothing and reads no data (public inputs only); see
    `sinc_basis_for_budget`. Candidates with more than `max_terms` terms are
    left out; the noise dimension is D = m·n_outputs.

    Args:
        lo: left end of the domain.
        hi: right end.
        notion: ``"gp"`` or ``"cgp"``.
        amount: ε (GP) or ρ (CGP) of the Project-and-Privatize step.
        sample_spacing: public time resolution dt.
        kink_error: public prior A (see the module docstring).
        edge_error: public prior B.
        ratios: candidate h/dt.
        max_terms: largest number of sinc terms allowed.
        n_outputs: dimension n of the curve's values.

    Returns:
        One (h, m, modelled √(E dist₂²)) row per admissible candidate, in `ratios` order.
    """
    if notion not in ("gp", "cgp"):
        raise MechanismParameterError(f"notion must be 'gp' or 'cgp', got {notion!r}")
    dt = _positive(sample_spacing, "sample_spacing")
    a = _positive(kink_error, "kink_error", zero_ok=True)
    b = _positive(edge_error, "edge_error", zero_ok=True)
    scale = noise_scale(notion, float(amount))
    if isinstance(max_terms, bool) or not isinstance(max_terms, int) or max_terms < 1:
        raise MechanismParameterError("max_terms must be a positive integer")
    if isinstance(n_outputs, bool) or not isinstance(n_outputs, int) or n_outputs < 1:
        raise MechanismParameterError("n_outputs must be a positive integer")
    if len(ratios) == 0:
        raise MechanismParameterError("ratios must not be empty")
    out = []
    for r in ratios:
        ratio = _positive(Fraction(r) if isinstance(r, str) else r, "ratio")
        h = dt * ratio
        m = SincBasis.covering(lo, hi, h).m
        if m > max_terms:
            continue
        d = m * n_outputs
        noise2 = (d * (d + 1.0) if notion == "gp" else float(d)) * scale * scale
        approx2 = a * a * ratio**3 + b * b * ratio
        out.append((h, m, math.sqrt(approx2 + noise2)))
    if not out:
        raise MechanismParameterError("every candidate spacing needs more than max_terms terms")
    return out


def sinc_basis_for_budget(
    lo: float,
    hi: float,
    *,
    epsilon: float | str | Fraction | None = None,
    rho: float | str | Fraction | None = None,
    sample_spacing: float,
    kink_error: float,
    edge_error: float = 0.0,
    ratios: Sequence[Fraction | float | str] = DEFAULT_RATIOS,
    max_terms: int = 20_000,
    n_outputs: int = 1,
) -> SincBasis:
    """Sinc basis for the domain [lo, hi] whose spacing minimises the modelled error.

    Privacy: spends nothing. The choice is a function of the public domain,
    the budget and the public parameters only, never of the curve, so
    Project-and-Privatize on the returned basis keeps its guarantee (ε-GP or
    ρ-CGP w.r.t. dist₂ on [lo, hi]) at its own cost. Model and parameters:
    module docstring [PROPOSED]; ties go to the larger spacing.

    Args:
        lo: left end of the curve's domain.
        hi: right end.
        epsilon: ε of the Project-and-Privatize step (exactly one of epsilon / rho).
        rho: ρ of the (CGP) Project-and-Privatize step.
        sample_spacing: public time resolution dt of the curves (e.g. 1/fs in
            the time unit of [lo, hi]); candidate spacings are dt·ratio.
        kink_error: public prior A: the modelled L2 approximation error at
            h = dt from the curve's interior roughness (∝ (h/dt)^{3/2}).
        edge_error: public prior B: the part from the domain ends (∝ (h/dt)^{1/2}).
        ratios: candidate h/dt (default `DEFAULT_RATIOS`, 1/16 .. 16).
        max_terms: largest number of sinc terms allowed (default 20 000).
        n_outputs: dimension n of the curve's values (D = m·n).

    Returns:
        ``SincBasis.covering(lo, hi, h)`` for the chosen h.
    """
    notion, amount = budget(epsilon, rho)
    table = sinc_rule_table(lo, hi, notion=notion, amount=float_at_most(amount),
                            sample_spacing=sample_spacing, kink_error=kink_error,
                            edge_error=edge_error, ratios=ratios, max_terms=max_terms,
                            n_outputs=n_outputs)
    best = min(table, key=lambda row: (row[2], -row[0]))
    return SincBasis.covering(lo, hi, best[0])
