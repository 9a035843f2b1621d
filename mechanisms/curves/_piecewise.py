"""Piecewise-linear input curves and exact quadrature on them (spec §1.0, §1.4).

A curve q: [t₀, t_N] → Rⁿ is given by samples (t_i, q_i) and read as their
piecewise-linear interpolant. Every integral of q against a polynomial of
degree d is computed exactly by Gauss-Legendre quadrature with
⌈(d + 2)/2⌉ nodes on each *sub-piece*: the pieces between consecutive data
knots, further cut at the breakpoints of the segments being integrated over.
All helpers are vectorised over sub-pieces (no Python loop per sample).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from mechanisms.errors import MechanismParameterError


def check_curve(t: object, values: object) -> tuple[np.ndarray, np.ndarray]:
    """Validate samples and return ``(t, values)`` as float arrays, values of shape (N, n).

    Raises MechanismParameterError naming the rule broken (never the values).
    """
    ta = np.asarray(t, dtype=np.float64)
    va = np.asarray(values, dtype=np.float64)
    if ta.ndim != 1:
        raise MechanismParameterError(f"t must be one-dimensional, got shape {ta.shape}")
    if ta.size < 2:
        raise MechanismParameterError("a curve needs at least 2 samples")
    if va.ndim == 1:
        va = va[:, None]
    if va.ndim != 2 or va.shape[0] != ta.size:
        raise MechanismParameterError(
            f"values must have shape (N,) or (N, n) with N = len(t) = {ta.size}, got {va.shape}"
        )
    if va.shape[1] < 1:
        raise MechanismParameterError("values must have at least one coordinate")
    if not np.all(np.isfinite(ta)):
        raise MechanismParameterError("t contains NaN or inf")
    if not np.all(np.isfinite(va)):
        raise MechanismParameterError("values contain NaN or inf")
    if not np.all(np.diff(ta) > 0):
        raise MechanismParameterError("t must be strictly increasing (sorted, no duplicates)")
    return ta, va


@lru_cache(maxsize=64)
def gauss_legendre(n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [-1, 1] (exact to degree 2·n_nodes − 1)."""
    x, w = np.polynomial.legendre.leggauss(int(n_nodes))
    x.setflags(write=False)
    w.setflags(write=False)
    return x, w


def nodes_for_degree(degree: int) -> int:
    """Number of Gauss-Legendre nodes that integrate a polynomial of `degree` exactly."""
    return max(1, (int(degree) + 2) // 2)


def interpolate(t: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Evaluate the piecewise-linear interpolant at x (clamped to the end values), (len(x), n).

    At a duplicated knot (a jump, used internally for zero extension) the left
    limit is returned.
    """
    x = np.asarray(x, dtype=np.float64)
    i = np.searchsorted(t, x, side="left")
    i = np.clip(i, 1, t.size - 1)
    t0 = t[i - 1]
    t1 = t[i]
    h = t1 - t0
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(h > 0, (x - t0) / np.where(h > 0, h, 1.0), 1.0)
    w = np.clip(w, 0.0, 1.0)[:, None]
    return values[i - 1] * (1.0 - w) + values[i] * w


def restrict(t: np.ndarray, values: np.ndarray, lo: float, hi: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """Samples of the interpolant on [lo, hi] ⊆ [t₀, t_N]: inner knots, interpolated ends."""
    if lo < t[0] or hi > t[-1] or not lo < hi:
        raise MechanismParameterError("the domain must lie inside the curve's samples")
    if lo == t[0] and hi == t[-1]:
        return t, values
    a = int(np.searchsorted(t, lo, side="left"))
    b = int(np.searchsorted(t, hi, side="right"))
    kt, kv = t[a:b], values[a:b]
    if kt.size == 0 or kt[0] != lo:
        kt = np.concatenate([[lo], kt])
        kv = np.concatenate([interpolate(t, values, np.array([lo])), kv])
    if kt[-1] != hi:
        kt = np.concatenate([kt, [hi]])
        kv = np.concatenate([kv, interpolate(t, values, np.array([hi]))])
    return kt, kv


class SubPieces:
    """The data pieces of a curve cut at segment edges.

    Attributes:
        left, right: (P,) sub-piece ends.
        q_left, q_right: (P, n) curve values at the ends.
        segment: (P,) index of the segment holding each sub-piece.
        starts: (k,) index of the first sub-piece of each segment.
    """

    __slots__ = ("left", "right", "q_left", "q_right", "segment", "starts")

    def __init__(self, t: np.ndarray, values: np.ndarray, edges: np.ndarray) -> None:
        edges = np.asarray(edges, dtype=np.float64)
        lo, hi = edges[0], edges[-1]
        if lo < t[0] or hi > t[-1]:
            raise MechanismParameterError("segment edges must lie inside the curve's domain")
        inner = edges[1:-1]
        pos = np.searchsorted(t, inner, side="left")
        knots = np.insert(t, pos, inner)
        kv = np.insert(values, pos, interpolate(t, values, inner), axis=0)
        # restrict to [lo, hi]
        a = int(np.searchsorted(knots, lo, side="left"))
        b = int(np.searchsorted(knots, hi, side="right"))
        if knots[a] != lo:
            knots = np.concatenate([[lo], knots[a:b]])
            kv = np.concatenate([interpolate(t, values, np.array([lo])), kv[a:b]])
        else:
            knots, kv = knots[a:b], kv[a:b]
        if knots[-1] != hi:
            knots = np.concatenate([knots, [hi]])
            kv = np.concatenate([kv, interpolate(t, values, np.array([hi]))])
        self.left = knots[:-1]
        self.right = knots[1:]
        self.q_left = kv[:-1]
        self.q_right = kv[1:]
        mid = 0.5 * (self.left + self.right)
        k = edges.size - 1
        self.segment = np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, k - 1)
        self.starts = np.searchsorted(self.segment, np.arange(k), side="left")

    def reduce(self, per_piece: np.ndarray) -> np.ndarray:
        """Sum an array whose first axis runs over sub-pieces, per segment."""
        return np.add.reduceat(per_piece, self.starts, axis=0)

    def quadrature(self, n_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Nodes (P, g), weights (P, g) and curve values (P, g, n) of Gauss-Legendre rules."""
        x, w = gauss_legendre(n_nodes)
        half = 0.5 * (self.right - self.left)
        mid = 0.5 * (self.right + self.left)
        nodes = mid[:, None] + half[:, None] * x[None, :]
        weights = half[:, None] * w[None, :]
        frac = 0.5 * (1.0 + x)
        qv = (
            self.q_left[:, None, :] * (1.0 - frac)[None, :, None]
            + self.q_right[:, None, :] * frac[None, :, None]
        )
        return nodes, weights, qv

    def squared_norms(self) -> np.ndarray:
        """∫ ‖q‖² dt per segment, exact (h/3·(q₀² + q₀q₁ + q₁²) per sub-piece)."""
        h = self.right - self.left
        a, b = self.q_left, self.q_right
        per = h * np.sum(a * a + a * b + b * b, axis=1) / 3.0
        return self.reduce(per)


def squared_distance_pl(t: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Exact ∫‖a − b‖² dt for two curves sampled on the same grid (piecewise linear)."""
    d = a - b
    h = np.diff(t)
    d0, d1 = d[:-1], d[1:]
    return float(np.sum(h * np.sum(d0 * d0 + d0 * d1 + d1 * d1, axis=1)) / 3.0)
