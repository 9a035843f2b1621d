"""The privatized function every curve mechanism returns, as plain arrays.

A `PrivateFunction` is f(t) = Σ_l c_{r,l}·φ_l(t) on segment r = [e_r, e_{r+1})
for a local basis (Legendre, monomial, Fourier), or Σ_j c_j·φ_j(t) on R for the
sinc basis (one "segment", the curve's domain). It carries the exact cost
breakdown and the data-independent noise error bound, so the release flow can
store it as Parquet (breakpoints, coefficients, basis name and parameters) and
report without touching raw data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mechanisms.cost import Cost
from mechanisms.curves.bases import LocalBasis, SincBasis, make_basis
from mechanisms.curves.bounds import eta, noise_scale

__all__ = ["PrivateFunction"]


@dataclass(frozen=True)
class PrivateFunction:
    """A privatized (or, for `least_squares`, an exact) function in plain arrays.

    Attributes:
        breakpoints: (k+1,) segment edges.
        coefficients: (k, m, n) coefficients per segment, basis function and
            output coordinate.
        basis_name: ``"legendre"``, ``"monomial"``, ``"fourier"`` or ``"sinc"``.
        basis_params: plain parameters of the basis (degree, n_terms, ...).
        cost: exact cost breakdown (None for non-private least-squares fits).
        dim: dimension D of the privatized space (the noise dimension).
        noise_notion: ``"gp"`` or ``"cgp"`` of the final noise step.
        noise_budget: ε or ρ (float) of the final noise step (0 when none).
        diagnostics: JSON-able values; see each mechanism's docstring for
            which ones are privatized outputs and which are public.
        outside: how to evaluate outside [e_0, e_k]: ``"clamp"`` (the end
            value of the end segment), ``"zero"``, or ``"basis"`` (the basis
            itself, e.g. sinc on R).
        error_factor: multiplier on the noise bound (2 after the continuity
            projection, spec §1.7).
        bound_kind: ``"eta"`` (joint noise of dimension `dim`) or
            ``"points"`` (the baseline: independent noise per released point,
            with `noise_budget` the per-point budget).
    """

    breakpoints: np.ndarray
    coefficients: np.ndarray
    basis_name: str
    basis_params: dict[str, Any]
    cost: Cost | None
    dim: int
    noise_notion: str = "gp"
    noise_budget: float = 0.0
    diagnostics: dict[str, Any] = field(default_factory=dict)
    outside: str = "clamp"
    error_factor: float = 1.0
    bound_kind: str = "eta"

    def basis(self) -> LocalBasis | SincBasis:
        """Rebuild the basis object from `basis_name` and `basis_params`."""
        return make_basis(self.basis_name, **self.basis_params)

    @property
    def n_outputs(self) -> int:
        """Number of output coordinates n."""
        return int(self.coefficients.shape[2])

    def evaluate(self, t: object) -> np.ndarray:
        """Values of the function at times t: array (len(t), n)."""
        ta = np.atleast_1d(np.asarray(t, dtype=np.float64))
        basis = self.basis()
        if isinstance(basis, SincBasis):
            out = basis.values(ta) @ self.coefficients[0]
            if self.outside == "zero":
                out[(ta < self.breakpoints[0]) | (ta > self.breakpoints[-1])] = 0.0
            return out
        e = self.breakpoints
        k = e.size - 1
        inside = (ta >= e[0]) & (ta <= e[-1])
        tc = np.clip(ta, e[0], e[-1]) if self.outside in ("clamp", "zero") else ta
        seg = np.clip(np.searchsorted(e, tc, side="right") - 1, 0, k - 1)
        phi = basis.values(tc, e[seg], e[seg + 1])  # (T, m)
        out = np.einsum("tm,tmn->tn", phi, self.coefficients[seg])
        if self.outside == "zero":
            out[~inside] = 0.0
        return out

    def error_bound(self, beta: float = 0.1, *, closed_form: bool = False) -> float:
        """Data-independent bound on dist₂(f̃, f_a): η(β; D, p)·scale (× error_factor).

        With probability ≥ 1 − β the privatized function is within this L2
        distance of the least-squares fit f_a on the released segments; the
        ErrBound of the paper adds dist₂(f_a, q), which depends on the data
        and is therefore not reported here.
        """
        if self.noise_budget <= 0:
            return 0.0
        p = 1 if self.noise_notion == "gp" else 2
        if self.bound_kind == "points":
            # ∫‖e‖² of the interpolated point noise ≤ h·Σ‖e_i‖² ≤ h·k·max‖e_i‖², union bound
            k = int(self.diagnostics["k"])
            h = float(self.breakpoints[-1] - self.breakpoints[0]) / (k - 1)
            per_point = eta(beta / k, self.n_outputs, p, closed_form=closed_form)
            return math.sqrt(h * k) * per_point * noise_scale(self.noise_notion, self.noise_budget)
        return (
            self.error_factor
            * eta(beta, self.dim, p, closed_form=closed_form)
            * noise_scale(self.noise_notion, self.noise_budget)
        )

    @classmethod
    def from_arrays(cls, stored: dict[str, Any]) -> PrivateFunction:
        """Rebuild an evaluable function from `to_arrays` output (cost is not restored).

        Args:
            stored: a dict with ``breakpoints``, ``coefficients``,
                ``basis_name``, ``basis_params`` and optionally ``dim``,
                ``outside`` and ``diagnostics``.

        Returns:
            A PrivateFunction with cost None and no noise bound.
        """
        coefficients = np.asarray(stored["coefficients"], dtype=np.float64)
        return cls(
            breakpoints=np.asarray(stored["breakpoints"], dtype=np.float64),
            coefficients=coefficients,
            basis_name=str(stored["basis_name"]),
            basis_params=dict(stored["basis_params"]),
            cost=None,
            dim=int(stored.get("dim", coefficients.size)),
            diagnostics=dict(stored.get("diagnostics", {})),
            outside=str(stored.get("outside", "clamp")),
        )

    def to_arrays(self) -> dict[str, Any]:
        """Plain representation for storage (arrays, strings, JSON-able dicts)."""
        return {
            "breakpoints": self.breakpoints,
            "coefficients": self.coefficients,
            "basis_name": self.basis_name,
            "basis_params": dict(self.basis_params),
            "dim": self.dim,
            "outside": self.outside,
            "cost": None if self.cost is None else self.cost.breakdown(),
            "diagnostics": dict(self.diagnostics),
        }
