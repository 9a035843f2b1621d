"""Fast exact L2 errors of sinc expansions on a uniform sample grid (benchmark helper).

For a sinc basis φ_j(t) = sinc((t − (first + j)h)/h)/√h whose spacing h is a
rational multiple p/q of the sample spacing dt, cut [t₀, T] into cells of width
δ = dt/q = h/p: inside a cell the piecewise-linear curve is linear and every
φ_j is smooth, so Gauss-Legendre with `nodes` points per cell integrates
(q − f)² to ~1e-12 relative. On the node with cell index i = p·u + r and offset
s the expansion is Σ_j c_j sinc(u + (r + s)/p − first − j)/√h: for every (r, s)
a discrete convolution in u, done by FFT. One evaluation costs p·nodes FFTs of
length ~ m + T/h instead of (#nodes × m) sinc evaluations.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy import fft

from mechanisms.curves import SincBasis
from mechanisms.curves._piecewise import gauss_legendre


class SincLattice:
    """Quadrature nodes on [t₀, T] and FFT evaluation of one sinc basis there.

    Args:
        t: uniform sample times t₀ + i·dt (the curve's knots).
        basis: the sinc basis; spacing/dt must be a fraction with denominator ≤ 64.
        nodes: Gauss-Legendre nodes per cell.
    """

    def __init__(self, t: np.ndarray, basis: SincBasis, nodes: int = 8) -> None:
        dt = float(t[1] - t[0])
        if not np.allclose(np.diff(t), dt, rtol=0, atol=1e-9 * dt):
            raise ValueError("the sample grid must be uniform")
        ratio = Fraction(basis.spacing / dt).limit_denominator(64)
        if abs(float(ratio) * dt - basis.spacing) > 1e-9 * basis.spacing:
            raise ValueError("spacing / sample spacing must be a small fraction")
        p, q = ratio.numerator, ratio.denominator
        self.basis = basis
        h = basis.spacing
        delta = dt / q
        t0 = float(t[0])
        # lattice cells must start on a multiple of δ relative to the centres: centres are
        # at multiples of h, so cell i starts at t₀ + iδ with t₀ a multiple of δ
        if abs(t0 / delta - round(t0 / delta)) > 1e-9:
            raise ValueError("t0 must be a multiple of the cell width")
        i0 = round(t0 / delta)
        n_cells = round((float(t[-1]) - t0) / delta)
        x, w = gauss_legendre(nodes)
        s = (x + 1.0) / 2.0
        cells = i0 + np.arange(n_cells)
        self.times = ((cells[:, None] + s[None, :]) * delta)  # (cells, G)
        self.weights = np.broadcast_to(w[None, :] * delta / 2.0, self.times.shape).copy()
        self.p = p
        self.i0 = i0
        self.n_cells = n_cells
        u_lo = i0 // p
        u_hi = (i0 + n_cells - 1) // p
        self.u_lo, self.n_u = u_lo, u_hi - u_lo + 1
        m = basis.m
        # kernel index k = u − j with u ∈ [u_lo, u_hi], j ∈ [0, m): k ∈ [u_lo − m + 1, u_hi]
        k = np.arange(u_lo - m + 1, u_hi + 1)
        self.length = fft.next_fast_len(m + k.size - 1, real=True)
        offsets = (np.arange(p)[:, None] + s[None, :]) / p  # (p, G)
        kern = np.sinc(k[None, None, :] - basis.first + offsets[:, :, None]) / math.sqrt(h)
        self.kernel_hat = fft.rfft(kern, n=self.length, axis=-1)  # (p, G, L/2+1)
        # map each cell to (u, r)
        i = cells
        self.cell_u = i // p - u_lo
        self.cell_r = i % p

    def evaluate(self, coef: np.ndarray) -> np.ndarray:
        """Values of Σ_j coef_j φ_j at the nodes, shape (cells, G)."""
        m = self.basis.m
        a_hat = fft.rfft(coef, n=self.length)
        conv = fft.irfft(self.kernel_hat * a_hat[None, None, :], n=self.length, axis=-1)
        # out[u] = conv[u − (u_lo − m + 1)] with u measured from u_lo → index u_rel + m − 1
        vals = conv[:, :, m - 1 : m - 1 + self.n_u]  # (p, G, n_u)
        return vals[self.cell_r, :, self.cell_u]

    def curve(self, t: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The piecewise-linear curve at the nodes, shape (cells, G)."""
        return np.interp(self.times.ravel(), t, v).reshape(self.times.shape)

    def sq_norm(self, values: np.ndarray) -> float:
        """∫ values² over [t₀, T] by the node weights."""
        return float(np.sum(self.weights * values * values))
