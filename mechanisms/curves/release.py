"""How a release runs each curve mechanism: the public frame and the run functions.

A release may let a mechanism read only what the domain declares public. The
`PublicFrame` holds exactly that for one curve: the interval the curve lives on
(its own duration if durations are public, else the domain's fixed window),
the number of samples if point counts are public, and the output grid. Every
data-dependent choice a mechanism makes outside its noise (PrivFuncSeg's SVT
depth, the baseline's default k, the evaluation grid) is a function of the frame.

The run functions are the registry's targets (`mechanisms.registry`): each takes
the curve, the notion and exact amount, an injected generator, the frame and the
mechanism's options, and returns a `PrivateFunction` whose ``cost`` is exactly
`amount` (reserved before the call).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from mechanisms.curves.baseline import baseline_points
from mechanisms.curves.project_and_privatize import project_and_privatize
from mechanisms.curves.result import PrivateFunction
from mechanisms.curves.segment import privfuncseg
from mechanisms.curves.select import privfuncselect
from mechanisms.errors import MechanismParameterError

__all__ = ["PublicFrame", "dry_run", "frame_for", "run_baseline", "run_privfuncselect",
           "run_privfuncseg", "run_project_and_privatize"]


@dataclass(frozen=True)
class PublicFrame:
    """The public facts a mechanism may use about one curve.

    Attributes:
        end: the curve lives on [0, end] (its duration, or the domain's window).
        n_points: the number of samples when the domain declares it public, else None.
        grid_points: how many evenly spaced times on [0, end] the output is evaluated at.
    """

    end: float
    n_points: int | None
    grid_points: int

    @property
    def size(self) -> int:
        """The public size that caps the resolution: n_points if public, else grid_points."""
        return self.n_points if self.n_points is not None else self.grid_points

    def grid(self) -> np.ndarray:
        """The evaluation grid: `grid_points` evenly spaced times on [0, end]."""
        return np.linspace(0.0, self.end, self.grid_points)


def frame_for(t: np.ndarray, *, window: float | None, points_public: bool,
              grid_points: int | None) -> PublicFrame:
    """The public frame of a curve with sample times `t` (from its start) in a domain.

    Args:
        t: the curve's sample times, t[0] = 0.
        window: the domain's fixed window (None: durations are public).
        points_public: whether the domain declares point counts public.
        grid_points: the domain's output grid size (None: point counts are public).
    """
    end = float(t[-1]) if window is None else float(window)
    n = int(len(t)) if points_public else None
    grid = int(len(t)) if points_public else int(grid_points)  # type: ignore[arg-type]
    return PublicFrame(end=end, n_points=n, grid_points=grid)


def on_frame(t: np.ndarray, values: np.ndarray, frame: PublicFrame
             ) -> tuple[np.ndarray, np.ndarray]:
    """The curve as a function on [0, frame.end]: held at its last value after its end.

    With public durations the curve is returned unchanged. With a fixed window,
    a curve that ends before the window's end is extended by its last value, so
    every curve of the domain is a function on the same interval and dist₂ is
    the domain's metric for every pair (validation rejects curves longer than
    the window).
    """
    if t[-1] >= frame.end:
        return t, values
    return np.append(t, frame.end), np.concatenate([values, values[-1:]], axis=0)


def _budget_kw(notion: str, amount: Fraction) -> dict[str, Fraction]:
    if notion not in ("gp", "cgp"):
        raise MechanismParameterError(f"curve mechanisms offer gp or cgp, not {notion}")
    return {"epsilon": amount} if notion == "gp" else {"rho": amount}


def _levels(frame: PublicFrame) -> int:
    """SVT levels from the public size: 2^levels ≥ size (PrivFuncSeg's dyadic depth)."""
    return max(0, math.ceil(math.log2(max(frame.size, 1))))


def run_privfuncseg(t: np.ndarray, values: np.ndarray, *, notion: str, amount: Fraction,
                    rng: np.random.Generator, frame: PublicFrame,
                    options: Mapping[str, Any]) -> PrivateFunction:
    """PrivFuncSeg on [0, frame.end] (ε-GP / ρ-CGP w.r.t. dist₂; cost `amount`).

    The SVT runs over min(max_level, ⌈log₂ size⌉) + 1 levels, size being the
    frame's public size, so its depth never depends on private data.
    """
    opts = dict(options)
    max_level = int(opts.pop("max_level", 20))
    return privfuncseg(t, values, rng=rng, max_level=min(max_level, _levels(frame)),
                       depth_from_samples=False, **_budget_kw(notion, amount), **opts)


def run_project_and_privatize(t: np.ndarray, values: np.ndarray, *, notion: str,
                              amount: Fraction, rng: np.random.Generator, frame: PublicFrame,
                              options: Mapping[str, Any]) -> PrivateFunction:
    """Project-and-Privatize on [0, frame.end] (ε-GP / ρ-CGP w.r.t. dist₂; cost `amount`)."""
    opts = dict(options)
    basis = opts.pop("basis", "legendre")
    return project_and_privatize(t, values, basis, rng=rng, **_budget_kw(notion, amount),
                                 **opts)


def run_privfuncselect(t: np.ndarray, values: np.ndarray, *, notion: str, amount: Fraction,
                       rng: np.random.Generator, frame: PublicFrame,
                       options: Mapping[str, Any]) -> PrivateFunction:
    """PrivFuncSelect on [0, frame.end] (ε-GP / ρ-CGP w.r.t. dist₂; cost `amount`)."""
    return privfuncselect(t, values, rng=rng, **_budget_kw(notion, amount), **dict(options))


def run_baseline(t: np.ndarray, values: np.ndarray, *, notion: str, amount: Fraction,
                 rng: np.random.Generator, frame: PublicFrame,
                 options: Mapping[str, Any]) -> PrivateFunction:
    """The LY23 point baseline (ε-GP / ρ-CGP w.r.t. dist_∞ only; cost `amount`).

    k points (default: a tenth of the frame's public size, at least 2) at ε/k each.
    """
    opts = dict(options)
    k = int(opts.pop("k", max(2, frame.size // 10)))
    return baseline_points(t, values, k, rng=rng, **_budget_kw(notion, amount), **opts)


def dry_run(run: Any, *, notion: str, amount: Fraction, frame: PublicFrame,
            options: Mapping[str, Any], n_outputs: int) -> None:
    """Run a mechanism once on a public, synthetic curve to validate its options.

    Nothing private is read and the output is discarded, so this costs nothing;
    it lets a release refuse bad options (with the mechanism's own error) before
    it reserves any budget.
    """
    t = np.linspace(0.0, frame.end, max(2, min(frame.size, 64)))
    v = np.zeros((t.size, n_outputs))
    run(t, v, notion=notion, amount=amount, rng=np.random.default_rng(0), frame=frame,
        options=options)
