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
from mechanisms.curves import _evaluate
from mechanisms.curves.bases import LegendreBasis, LocalBasis, SincBasis, make_basis
from mechanisms.curves.bounds import eta, noise_scale

__all__ = ["PrivateFunction", "PrivateFunctionBatch", "concat_batches", "evaluate_columns",
           "evaluate_local"]


_OUTSIDE_MODES = {"clamp": 0, "zero": 1, "basis": 2}


def evaluate_local(basis: LocalBasis, breakpoints: np.ndarray, bp_offsets: np.ndarray,
                   coefficients: np.ndarray, seg_offsets: np.ndarray, t: np.ndarray,
                   t_offsets: np.ndarray, outside: str) -> np.ndarray:
    """Evaluate many piecewise functions of one local basis at their own times.

    Function c has edges breakpoints[bp_offsets[c]:bp_offsets[c+1]] and
    coefficients[seg_offsets[c]:seg_offsets[c+1]] (k_c, m, n); it is
    evaluated at t[t_offsets[c]:t_offsets[c+1]]. A time on an inner edge takes
    the right segment; outside the edges: ``"clamp"`` (end values), ``"zero"``
    or ``"basis"`` (the end segment's polynomial continued). Post-processing
    of released values: no privacy cost. The Legendre basis (every PrivFuncSeg
    and PrivFuncSelect output) is evaluated in one pass by `_evaluate.c`, with
    the doubles of `evaluate_columns`; other bases by `evaluate_columns`.

    Returns:
        (len(t), n) values.
    """
    if isinstance(basis, LegendreBasis) and coefficients.shape[1] == basis.m:
        out = np.empty((np.size(t), coefficients.shape[2]))
        _evaluate.legendre(np.ascontiguousarray(t, dtype=np.float64),
                           np.ascontiguousarray(t_offsets, dtype=np.int64),
                           np.ascontiguousarray(breakpoints, dtype=np.float64),
                           np.ascontiguousarray(bp_offsets, dtype=np.int64),
                           np.ascontiguousarray(coefficients, dtype=np.float64),
                           np.ascontiguousarray(seg_offsets, dtype=np.int64),
                           _OUTSIDE_MODES[outside], out)
        return out
    return evaluate_columns(basis, breakpoints, bp_offsets, coefficients, seg_offsets, t,
                            t_offsets, outside)


def evaluate_columns(basis: LocalBasis, breakpoints: np.ndarray, bp_offsets: np.ndarray,
                     coefficients: np.ndarray, seg_offsets: np.ndarray, t: np.ndarray,
                     t_offsets: np.ndarray, outside: str) -> np.ndarray:
    """`evaluate_local` through the basis's `columns` (numpy; any local basis)."""
    counts = np.diff(t_offsets)
    fn = np.repeat(np.arange(bp_offsets.size - 1), counts)
    first = np.repeat(breakpoints[bp_offsets[:-1]], counts)
    last = np.repeat(breakpoints[bp_offsets[1:] - 1], counts)
    tc = np.clip(t, first, last) if outside in ("clamp", "zero") else t
    left = np.arange(coefficients.shape[0]) + np.repeat(bp_offsets[:-1] - seg_offsets[:-1],
                                                         np.diff(seg_offsets))  # edge index
    runs = _segment_runs(breakpoints, bp_offsets, seg_offsets, fn, tc, t_offsets)
    if runs is not None:  # the times of each segment are consecutive: repeat per segment
        a_t, b_t = np.repeat(breakpoints[left], runs), np.repeat(breakpoints[left + 1], runs)
        rows = np.repeat(coefficients, runs, axis=0)  # (T, m, n)
    else:
        seg = _segment_index(breakpoints, bp_offsets, seg_offsets, fn, tc)
        edge = np.take(left, seg)
        a_t, b_t = np.take(breakpoints, edge), np.take(breakpoints, edge + 1)
        rows = np.take(coefficients, seg, axis=0)
    phi = basis.columns(tc, a_t, b_t)  # m arrays (T,)
    out = phi[0][:, None] * rows[:, 0, :]
    for ell in range(1, len(phi)):
        out = out + phi[ell][:, None] * rows[:, ell, :]
    if outside == "zero":
        out[(t < first) | (t > last)] = 0.0
    return out


def _segment_index(breakpoints: np.ndarray, bp_offsets: np.ndarray, seg_offsets: np.ndarray,
                   fn: np.ndarray, tc: np.ndarray) -> np.ndarray:
    """The (global) segment of every time: the last edge at or before it, end segments beyond.

    Edges and times are keyed by (function, time), complex numbers that sort by
    (real, imag), and every time is searched among the edges.
    """
    edge_fn = np.repeat(np.arange(bp_offsets.size - 1), np.diff(bp_offsets))
    pos = np.searchsorted(edge_fn + 1j * breakpoints, fn + 1j * tc, side="right") - 1
    return seg_offsets[:-1][fn] + np.clip(pos - bp_offsets[:-1][fn], 0,
                                          np.diff(seg_offsets)[fn] - 1)


def _segment_runs(breakpoints: np.ndarray, bp_offsets: np.ndarray, seg_offsets: np.ndarray,
                  fn: np.ndarray, tc: np.ndarray, t_offsets: np.ndarray) -> np.ndarray | None:
    """How many consecutive times fall in each (global) segment, or None.

    None unless each function's times are in order (an output grid, a curve's
    own samples).

    The same rule as `_segment_index`: segment s >= 1 of function c starts at
    c's first time at or after its edge s (the few inner edges are searched
    among the times, keyed by (function, time)), segment 0 at c's first time.
    """
    keys = fn + 1j * tc
    if keys.size > 1 and np.any(keys[1:] < keys[:-1]):
        return None
    inner = np.ones(breakpoints.size, dtype=bool)
    inner[bp_offsets[:-1]] = False
    inner[bp_offsets[1:] - 1] = False
    edge_fn = np.repeat(np.arange(bp_offsets.size - 1), np.diff(bp_offsets))[inner]
    starts = np.empty(int(seg_offsets[-1]) + 1, dtype=np.int64)
    firsts = np.zeros(starts.size - 1, dtype=bool)
    firsts[seg_offsets[:-1]] = True
    starts[:-1][firsts] = t_offsets[:-1]
    starts[:-1][~firsts] = np.searchsorted(keys, edge_fn + 1j * breakpoints[inner], side="left")
    starts[-1] = keys.size
    return np.diff(starts)


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
        k = self.coefficients.shape[0]
        return evaluate_local(basis, self.breakpoints, np.array([0, k + 1]), self.coefficients,
                              np.array([0, k]), ta, np.array([0, ta.size]), self.outside)

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


@dataclass(frozen=True)
class PrivateFunctionBatch:
    """The privatized functions of a batch of curves, as flat arrays (one basis family).

    Function c has edges ``breakpoints[seg_offsets[c] + c : seg_offsets[c+1] + c + 1]``
    and coefficients ``coefficients[seg_offsets[c]:seg_offsets[c+1]]`` (k_c, m, n).
    `function(c)` is the `PrivateFunction` of curve c (what the per-curve API
    returns); the other fields are per curve.

    Attributes:
        breakpoints: (Σ(k_c + 1),) every function's edges, function after function.
        coefficients: (Σk_c, m, n).
        seg_offsets: (C + 1,) segment offsets.
        basis_name: basis family of every function.
        basis_params: per function, plain basis parameters (often one shared dict).
        costs: per function, its exact cost breakdown (None for non-private fits).
        dims: (C,) noise dimensions.
        noise_notion: ``"gp"`` or ``"cgp"`` of the final noise step.
        noise_budgets: (C,) ε or ρ (float) of each final noise step.
        diagnostics: name -> per-function values (see each mechanism's docstring).
        outside: as `PrivateFunction.outside`.
        error_factors: (C,) multipliers on the noise bound.
        bound_kind: as `PrivateFunction.bound_kind`.
    """

    breakpoints: np.ndarray
    coefficients: np.ndarray
    seg_offsets: np.ndarray
    basis_name: str
    basis_params: tuple[dict[str, Any], ...]
    costs: tuple[Cost | None, ...]
    dims: np.ndarray
    noise_notion: str
    noise_budgets: np.ndarray
    diagnostics: dict[str, list[Any]]
    outside: str = "clamp"
    error_factors: np.ndarray | None = None
    bound_kind: str = "eta"

    def __len__(self) -> int:
        return int(self.seg_offsets.size - 1)

    @property
    def bp_offsets(self) -> np.ndarray:
        """(C + 1,) offsets into `breakpoints`."""
        return self.seg_offsets + np.arange(self.seg_offsets.size)

    @property
    def segments(self) -> np.ndarray:
        """(C,) number of segments of each function."""
        return np.diff(self.seg_offsets)

    def factors(self) -> np.ndarray:
        """(C,) error factors (1 unless post-processed)."""
        return np.ones(len(self)) if self.error_factors is None else self.error_factors

    def function(self, c: int) -> PrivateFunction:
        """The PrivateFunction of curve c (copies of its arrays)."""
        a, b = int(self.seg_offsets[c]), int(self.seg_offsets[c + 1])
        return PrivateFunction(
            breakpoints=self.breakpoints[a + c : b + c + 1].copy(),
            coefficients=self.coefficients[a:b].copy(),
            basis_name=self.basis_name,
            basis_params=dict(self.basis_params[c]),
            cost=self.costs[c],
            dim=int(self.dims[c]),
            noise_notion=self.noise_notion,
            noise_budget=float(self.noise_budgets[c]),
            diagnostics={k: v[c] for k, v in self.diagnostics.items()},
            outside=self.outside,
            error_factor=float(self.factors()[c]),
            bound_kind=self.bound_kind,
        )

    @classmethod
    def from_functions(cls, functions: list[PrivateFunction]) -> PrivateFunctionBatch:
        """Pack per-curve results of one basis family, notion and outside rule."""
        if not functions:
            raise ValueError("from_functions needs at least one function")
        first = functions[0]
        for f in functions:
            if (f.basis_name, f.noise_notion, f.outside, f.bound_kind) != (
                    first.basis_name, first.noise_notion, first.outside, first.bound_kind):
                raise ValueError("a batch holds functions of one basis, notion and outside rule")
        counts = [f.coefficients.shape[0] for f in functions]
        off = np.zeros(len(functions) + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        keys = sorted({k for f in functions for k in f.diagnostics})
        return cls(
            breakpoints=np.concatenate([f.breakpoints for f in functions]),
            coefficients=np.concatenate([f.coefficients for f in functions]),
            seg_offsets=off,
            basis_name=first.basis_name,
            basis_params=tuple(f.basis_params for f in functions),
            costs=tuple(f.cost for f in functions),
            dims=np.array([f.dim for f in functions], dtype=np.int64),
            noise_notion=first.noise_notion,
            noise_budgets=np.array([f.noise_budget for f in functions]),
            diagnostics={k: [f.diagnostics.get(k) for f in functions] for k in keys},
            outside=first.outside,
            error_factors=np.array([f.error_factor for f in functions]),
            bound_kind=first.bound_kind,
        )

    def error_bounds(self, beta: float = 0.1) -> np.ndarray:
        """(C,) `PrivateFunction.error_bound` of every function (once per distinct value)."""
        if self.bound_kind != "eta":
            return np.array([self.function(c).error_bound(beta) for c in range(len(self))])
        p = 1 if self.noise_notion == "gp" else 2
        key = np.stack([self.dims.astype(np.float64), self.noise_budgets, self.factors()], 1)
        rows, inverse = np.unique(key, axis=0, return_inverse=True)
        values = [factor * eta(beta, int(dim), p) * noise_scale(self.noise_notion, budget)
                  if budget > 0 else 0.0 for dim, budget, factor in rows.tolist()]
        return np.asarray(values)[inverse.ravel()]

    def evaluate(self, t: np.ndarray, t_offsets: np.ndarray) -> np.ndarray:
        """Values (len(t), n) of function c at t[t_offsets[c]:t_offsets[c+1]], for every c."""
        t = np.asarray(t, dtype=np.float64)
        shared = all(p == self.basis_params[0] for p in self.basis_params)
        basis = make_basis(self.basis_name, **self.basis_params[0])
        if shared and isinstance(basis, LocalBasis):
            return evaluate_local(basis, self.breakpoints, self.bp_offsets, self.coefficients,
                                  self.seg_offsets, t, np.asarray(t_offsets), self.outside)
        parts = [self.function(c).evaluate(t[t_offsets[c]:t_offsets[c + 1]])
                 for c in range(len(self))]
        return np.concatenate(parts) if parts else np.empty((0, self.coefficients.shape[2]))


def _gather(sizes: np.ndarray, starts: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, ...]:
    """Indices that put blocks (sizes, starts) in `order`, and the new block offsets."""
    off = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(sizes[order], out=off[1:])
    take = np.repeat(starts[order] - off[:-1], sizes[order]) + np.arange(int(off[-1]))
    return take, off


def concat_batches(parts: list[PrivateFunctionBatch],
                   positions: list[np.ndarray]) -> PrivateFunctionBatch:
    """One batch from parts whose function i goes to curve positions[p][i] of the result."""
    order = np.argsort(np.concatenate(positions), kind="stable")

    def starts(offsets: list[np.ndarray]) -> np.ndarray:
        shift = np.cumsum([0] + [int(o[-1]) for o in offsets[:-1]])
        return np.concatenate([o[:-1] + s for o, s in zip(offsets, shift, strict=True)])

    segs = np.concatenate([p.segments for p in parts])
    take, seg_off = _gather(segs, starts([p.seg_offsets for p in parts]), order)
    bp_take, _ = _gather(segs + 1, starts([p.bp_offsets for p in parts]), order)

    def per_curve(get: Any) -> list[Any]:
        items = [x for p in parts for x in get(p)]
        return [items[i] for i in order]

    first = parts[0]
    return PrivateFunctionBatch(
        breakpoints=np.concatenate([p.breakpoints for p in parts])[bp_take],
        coefficients=np.concatenate([p.coefficients for p in parts])[take],
        seg_offsets=seg_off, basis_name=first.basis_name,
        basis_params=tuple(per_curve(lambda p: p.basis_params)),
        costs=tuple(per_curve(lambda p: p.costs)),
        dims=np.concatenate([p.dims for p in parts])[order], noise_notion=first.noise_notion,
        noise_budgets=np.concatenate([p.noise_budgets for p in parts])[order],
        diagnostics={k: per_curve(lambda p, k=k: p.diagnostics[k]) for k in first.diagnostics},
        outside=first.outside,
        error_factors=np.concatenate([p.factors() for p in parts])[order],
        bound_kind=first.bound_kind)
