"""Function bases for curve privatization (spec §1.2, §1.4, §1.7; paper Sec. 3, 4.1).

Two kinds of basis:

* **Local bases** live on one segment [a, b] and are repeated on every segment
  of a piecewise basis: orthonormal Legendre (the default, Gram = I),
  monomials on the rescaled segment ((t − a)/(b − a))^k (Gram = L·Hilbert),
  and the real Fourier basis (Gram = I).
* **The sinc basis on R** for [0, T] functions (paper Sec. 3.5, App. E.4):
  φ_j(t) = sinc((t − c_j)/h)/√h with centres c_j = (first + j)·h. Its Gram
  matrix over R is the identity; inner products with a curve are taken over
  the curve's domain only (zero extension), in closed form with Si/cos.

Inner products with a piecewise-linear curve are exact: Gauss-Legendre per
sub-piece for polynomial bases, closed forms for Fourier and sinc.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from scipy import special

from mechanisms.curves._piecewise import SubPieces, nodes_for_degree
from mechanisms.errors import MechanismParameterError

__all__ = [
    "LocalBasis",
    "LegendreBasis",
    "MonomialBasis",
    "FourierBasis",
    "SincBasis",
    "PiecewiseBasis",
    "make_basis",
]


def _check_int(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise MechanismParameterError(f"{name} must be an integer, got {type(value).__name__}")
    if not low <= int(value) <= high:
        raise MechanismParameterError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


class LocalBasis(ABC):
    """A basis of m functions on one segment [a, b], repeated per segment.

    Attributes:
        name: basis family name (``"legendre"``, ``"monomial"``, ``"fourier"``).
        m: number of functions per segment.
        degree: polynomial degree (None when not polynomial).
        orthonormal: True when the Gram matrix on every segment is the identity.
    """

    name = "local"
    m = 1
    degree: int | None = None
    orthonormal = True

    @abstractmethod
    def params(self) -> dict[str, int | float]:
        """Plain parameters that rebuild this basis with `make_basis`."""

    @abstractmethod
    def values(self, t: np.ndarray, a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
        """Basis values at t for segment ends a, b (broadcast with t): shape (len(t), m)."""

    def columns(self, t: np.ndarray, a: np.ndarray | float, b: np.ndarray | float
                ) -> list[np.ndarray]:
        """The m basis functions at t, one array (len(t),) each."""
        phi = self.values(t, a, b)
        return [phi[:, j] for j in range(self.m)]

    def gram(self, a: float, b: float) -> np.ndarray:
        """Gram matrix ∫_a^b φ_j φ_l dt, shape (m, m)."""
        return np.eye(self.m)

    def inner(self, pieces: SubPieces, edges: np.ndarray) -> np.ndarray:
        """Exact ∫_{segment} q φ_j dt for every segment: shape (k, m, n)."""
        nodes, weights, qv = pieces.quadrature(nodes_for_degree((self.degree or 0) + 1))
        seg = pieces.segment
        a = edges[seg][:, None]
        b = edges[seg + 1][:, None]
        p, g = nodes.shape
        phi = self.values(nodes.ravel(), np.repeat(a, g, axis=1).ravel(),
                          np.repeat(b, g, axis=1).ravel()).reshape(p, g, self.m)
        per = np.einsum("pg,pgm,pgn->pmn", weights, phi, qv)
        return pieces.reduce(per)


class LegendreBasis(LocalBasis):
    """Orthonormal Legendre polynomials of degree 0..degree on each segment (Gram = I).

    φ_l(t) = √((2l+1)/L)·P_l(2(t − a)/L − 1), L = b − a. The spans equal those of
    the monomials of the same degree, so by basis invariance (spec §1.2) the
    output distribution of Project-and-Privatize is the same as with monomials.
    """

    name = "legendre"
    orthonormal = True

    def __init__(self, degree: int = 1) -> None:
        self.degree = _check_int(degree, "degree", 0, 64)
        self.m = self.degree + 1
        self._norm = np.sqrt(2.0 * np.arange(self.m) + 1.0)

    def params(self) -> dict[str, int | float]:
        """Plain parameters (``degree``)."""
        return {"degree": self.degree}

    def values(self, t: np.ndarray, a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
        """Orthonormal Legendre values, shape (len(t), m)."""
        return np.stack(self.columns(t, a, b), axis=1)

    def columns(self, t: np.ndarray, a: np.ndarray | float, b: np.ndarray | float
                ) -> list[np.ndarray]:
        """The m basis functions at t, one array (len(t),) each (Bonnet's recurrence)."""
        t = np.asarray(t, dtype=np.float64)
        length = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
        s = 2.0 * (t - a) / length - 1.0
        inv = 1.0 / np.sqrt(np.broadcast_to(length, t.shape))
        cols = [np.ones_like(s)]
        if self.degree >= 1:
            cols.append(s)
        for k in range(1, self.degree):  # (k+1) P_{k+1} = (2k+1) s P_k − k P_{k−1}
            cols.append(((2 * k + 1) * s * cols[k] - k * cols[k - 1]) / (k + 1))
        return [c * (norm * inv) for c, norm in zip(cols, self._norm.tolist(), strict=True)]

class MonomialBasis(LocalBasis):
    """Monomials ((t − a)/L)^k, k = 0..degree, on the rescaled segment (Gram = L·Hilbert).

    Offered because the paper's experiments name monomials; the Gram matrix is
    ill-conditioned beyond degree ~12, where Legendre (same span) should be used.
    """

    name = "monomial"
    orthonormal = False

    def __init__(self, degree: int = 1) -> None:
        self.degree = _check_int(degree, "degree", 0, 32)
        self.m = self.degree + 1

    def params(self) -> dict[str, int | float]:
        """Plain parameters (``degree``)."""
        return {"degree": self.degree}

    def values(self, t: np.ndarray, a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
        """Monomial values, shape (len(t), m)."""
        t = np.asarray(t, dtype=np.float64)
        u = (t - a) / (np.asarray(b, dtype=np.float64) - a)
        return np.polynomial.polynomial.polyvander(u, self.degree)

    def gram(self, a: float, b: float) -> np.ndarray:
        """L / (i + j + 1)."""
        i = np.arange(self.m)
        return (b - a) / (i[:, None] + i[None, :] + 1.0)


class FourierBasis(LocalBasis):
    """Real Fourier basis on [a, b]: 1/√L, √(2/L)cos(2πk u), √(2/L)sin(2πk u), u = (t−a)/L.

    Ordered constant, cos 1, sin 1, cos 2, sin 2, …; `n_terms` functions in all
    (Gram = I). Inner products with a piecewise-linear curve use closed forms.
    """

    name = "fourier"
    orthonormal = True

    def __init__(self, n_terms: int = 9) -> None:
        self.m = _check_int(n_terms, "n_terms", 1, 100_000)
        j = np.arange(self.m)
        self._freq = (j + 1) // 2
        self._is_sin = (j % 2 == 0) & (j > 0)

    def params(self) -> dict[str, int | float]:
        """Plain parameters (``n_terms``)."""
        return {"n_terms": self.m}

    def values(self, t: np.ndarray, a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
        """Fourier values, shape (len(t), m)."""
        t = np.asarray(t, dtype=np.float64)
        length = np.broadcast_to(np.asarray(b, dtype=np.float64) - a, t.shape)
        u = ((t - a) / length)[:, None]
        ang = 2.0 * np.pi * self._freq[None, :] * u
        v = np.where(self._is_sin[None, :], np.sin(ang), np.cos(ang)) * np.sqrt(2.0)
        v[:, 0] = 1.0
        return v / np.sqrt(length)[:, None]

    def inner(self, pieces: SubPieces, edges: np.ndarray) -> np.ndarray:
        """Closed-form ∫ q·φ_j over each segment (exact for piecewise-linear q)."""
        seg = pieces.segment
        a = edges[seg]
        length = edges[seg + 1] - a
        h = pieces.right - pieces.left
        omega = 2.0 * np.pi * self._freq[None, :] / length[:, None]  # (P, m)
        theta = omega * h[:, None]
        e0, e1 = _exp_moments(theta)
        phase = np.exp(1j * omega * (pieces.left - a)[:, None])
        q0 = pieces.q_left[:, None, :]
        dq = (pieces.q_right - pieces.q_left)[:, None, :]
        z = (h[:, None] * phase)[:, :, None] * (q0 * e0[:, :, None] + dq * e1[:, :, None])
        per = np.where(self._is_sin[None, :, None], z.imag, z.real) * np.sqrt(2.0)
        per[:, 0, :] = z[:, 0, :].real
        per = per / np.sqrt(length)[:, None, None]
        return pieces.reduce(per)


def _exp_moments(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E0 = ∫₀¹ e^{iθs} ds and E1 = ∫₀¹ s e^{iθs} ds, with series for small |θ|."""
    small = np.abs(theta) < 0.5
    th = np.where(small, 1.0, theta)
    ei = np.exp(1j * th)
    e0 = (ei - 1.0) / (1j * th)
    e1 = ei / (1j * th) + (ei - 1.0) / (th * th)
    if np.any(small):
        z = 1j * np.where(small, theta, 0.0)
        s0 = np.zeros_like(z)
        s1 = np.zeros_like(z)
        term = np.ones_like(z)  # z^k / k!
        for k in range(16):
            s0 = s0 + term / (k + 1)
            s1 = s1 + term / (k + 2)
            term = term * z / (k + 1)
        e0 = np.where(small, s0, e0)
        e1 = np.where(small, s1, e1)
    return e0, e1


class SincBasis:
    """Shifted sinc functions on R: φ_j(t) = sinc((t − c_j)/h)/√h, c_j = (first + j)·h.

    Orthonormal in L²(R) (Gram = I over R). For a curve on [t₀, T] the
    coefficients are ∫_{t₀}^{T} q φ_j dt, i.e. the L²(R) projection of the
    zero extension of q, which is 1-Lipschitz (paper Sec. 3.5, spec §1.4). The
    paper's ECG setting is time scaled to T = 800 with h = 1, first = 1,
    n_terms = 800. `covering` builds the centres h·Z ∩ [lo, hi] for any h;
    `mechanisms.curves.sinc_rule` picks h from the budget.
    """

    name = "sinc"
    orthonormal = True
    degree = None

    def __init__(self, n_terms: int = 100, *, spacing: float = 1.0, first: int = 1) -> None:
        self.m = _check_int(n_terms, "n_terms", 1, 1_000_000)
        if isinstance(spacing, bool) or not (math.isfinite(float(spacing)) and spacing > 0):
            raise MechanismParameterError("spacing must be a finite number > 0")
        self.spacing = float(spacing)
        self.first = _check_int(first, "first", -(10**9), 10**9)
        self.centres = (self.first + np.arange(self.m)) * self.spacing

    @classmethod
    def covering(cls, lo: float, hi: float, spacing: float, *, pad: int = 0) -> SincBasis:
        """The sinc functions of spacing h whose centres jh lie in [lo, hi] (plus `pad` each side).

        Centres are the lattice points h·Z inside the domain, so the count is
        about (hi − lo)/h + 1: the "one term per sample" choice when h is the
        sample spacing. Data-independent (only the domain and h are used).

        Args:
            lo: left end of the curve's domain.
            hi: right end (> lo).
            spacing: h > 0.
            pad: extra centres beyond each end (default 0).

        Returns:
            The basis.
        """
        if isinstance(spacing, bool) or not (math.isfinite(float(spacing)) and spacing > 0):
            raise MechanismParameterError("spacing must be a finite number > 0")
        lo, hi, h = float(lo), float(hi), float(spacing)
        if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            raise MechanismParameterError("need a finite domain lo < hi")
        pad = _check_int(pad, "pad", 0, 10**6)
        tol = 1e-9
        first = math.ceil(lo / h - tol) - pad
        last = math.floor(hi / h + tol) + pad
        return cls(last - first + 1, spacing=h, first=first)

    def params(self) -> dict[str, int | float]:
        """Plain parameters (``n_terms``, ``spacing``, ``first``)."""
        return {"n_terms": self.m, "spacing": self.spacing, "first": self.first}

    def values(self, t: np.ndarray) -> np.ndarray:
        """Basis values at t (anywhere on R), shape (len(t), m)."""
        t = np.asarray(t, dtype=np.float64)
        u = (t[:, None] - self.centres[None, :]) / self.spacing
        return np.sinc(u) / math.sqrt(self.spacing)

    def inner(self, t: np.ndarray, values: np.ndarray, chunk: int = 256) -> np.ndarray:
        """Exact ∫_{t₀}^{T} q φ_j dt for the piecewise-linear q: shape (m, n).

        On a piece where q = α + β·u, u = (t − c_j)/h:
        ∫(α + βu) sinc(u) du = α·Si(πu)/π − β·cos(πu)/π² (scipy.special.sici).
        """
        h = self.spacing
        out = np.empty((self.m, values.shape[1]))
        q0 = values[:-1]
        dq = values[1:] - values[:-1]
        for s in range(0, self.m, chunk):
            c = self.centres[s : s + chunk]
            u = (t[:, None] - c[None, :]) / h  # (N, c)
            si, ci = special.sici(np.pi * u)
            del ci
            cos = np.cos(np.pi * u)
            u0, u1 = u[:-1], u[1:]
            du = u1 - u0
            # q = q0 + beta (u - u0),  beta = dq/du
            dsi = (si[1:] - si[:-1]) / np.pi  # ∫ sinc du
            dcos = -(cos[1:] - cos[:-1]) / (np.pi * np.pi)  # ∫ u sinc du
            first_moment = dcos - u0 * dsi  # ∫ (u - u0) sinc du
            inv = 1.0 / du
            res = np.einsum("pc,pn->cn", dsi, q0) + np.einsum("pc,pn->cn", first_moment * inv, dq)
            out[s : s + chunk] = res * math.sqrt(h)
        return out


@dataclass(frozen=True)
class PiecewiseBasis:
    """A local basis repeated on the segments [e_r, e_{r+1}) of arbitrary breakpoints.

    Gram = blockdiag(G⁽¹⁾, …, G⁽ᵏ⁾) (⊗ I_n for vector-valued coefficients).
    """

    local: LocalBasis
    edges: np.ndarray

    def __post_init__(self) -> None:
        e = np.asarray(self.edges, dtype=np.float64)
        if e.ndim != 1 or e.size < 2 or not np.all(np.isfinite(e)) or not np.all(np.diff(e) > 0):
            raise MechanismParameterError(
                "breakpoints must be a finite, strictly increasing array of >= 2 edges"
            )
        object.__setattr__(self, "edges", e)

    @property
    def k(self) -> int:
        """Number of segments."""
        return self.edges.size - 1


def make_basis(
    name: str,
    *,
    degree: int | None = None,
    n_terms: int | None = None,
    spacing: float = 1.0,
    first: int = 1,
) -> LocalBasis | SincBasis:
    """Build a basis from its name.

    Args:
        name: ``"legendre"`` (degree, default 1), ``"linear"`` (Legendre of
            degree 1: the paper's Example 3 span {1, t}), ``"constant"``,
            ``"monomial"`` (degree), ``"fourier"`` (n_terms, default 9),
            ``"sinc"`` (n_terms, spacing, first).
        degree: polynomial degree for polynomial bases.
        n_terms: number of functions for Fourier and sinc.
        spacing: sinc spacing h.
        first: index of the first sinc centre.

    Returns:
        The basis object.
    """
    if not isinstance(name, str):
        raise MechanismParameterError(f"basis must be a name or a basis object, got {name!r}")
    key = name.lower()
    if key == "linear":
        if degree not in (None, 1):
            raise MechanismParameterError("the 'linear' basis has degree 1")
        return LegendreBasis(1)
    if key == "constant":
        return LegendreBasis(0)
    if key == "legendre":
        return LegendreBasis(1 if degree is None else degree)
    if key == "monomial":
        return MonomialBasis(1 if degree is None else degree)
    if key == "fourier":
        return FourierBasis(9 if n_terms is None else n_terms)
    if key == "sinc":
        return SincBasis(100 if n_terms is None else n_terms, spacing=spacing, first=first)
    raise MechanismParameterError(
        f"unknown basis {name!r}; use legendre, linear, constant, monomial, fourier or sinc"
    )
