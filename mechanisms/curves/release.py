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

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from mechanisms.curves.baseline import baseline_points
from mechanisms.curves.batch import CurveBatch
from mechanisms.curves.project_and_privatize import project_and_privatize
from mechanisms.curves.result import PrivateFunction, PrivateFunctionBatch
from mechanisms.curves.segment import privfuncseg_batch
from mechanisms.curves.select import privfuncselect
from mechanisms.errors import MechanismParameterError

__all__ = ["PublicFrame", "PublicFrames", "dry_run", "frame_for", "frames_for", "on_frames",
           "run_baseline", "run_privfuncselect", "run_privfuncseg", "run_privfuncseg_batch",
           "run_project_and_privatize"]


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


@dataclass(frozen=True)
class PublicFrames:
    """The public frames of the curves of a batch, as arrays (see `PublicFrame`).

    Attributes:
        ends: (C,) each curve lives on [0, end].
        n_points: (C,) sample counts when public, else None.
        grid_points: (C,) output grid sizes.
    """

    ends: np.ndarray
    n_points: np.ndarray | None
    grid_points: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        """(C,) public sizes: n_points if public, else grid_points."""
        return self.n_points if self.n_points is not None else self.grid_points

    def frame(self, c: int) -> PublicFrame:
        """The frame of curve c."""
        n = None if self.n_points is None else int(self.n_points[c])
        return PublicFrame(end=float(self.ends[c]), n_points=n,
                           grid_points=int(self.grid_points[c]))

    def grid(self) -> tuple[np.ndarray, np.ndarray]:
        """Every curve's evaluation grid, concatenated, and its offsets.

        Curve c gets ``np.linspace(0, ends[c], grid_points[c])``, computed the
        way numpy does it (i·step, the last point exactly `end`).
        """
        counts = self.grid_points.astype(np.int64)
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        i = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], counts)
        step = self.ends / np.maximum(counts - 1, 1)
        grid = i * np.repeat(step, counts)
        grid[offsets[1:] - 1] = self.ends
        return grid, offsets


def frames_for(batch: CurveBatch, *, window: float | None, points_public: bool,
               grid_points: int | None) -> PublicFrames:
    """`frame_for` of every curve of a batch (sample times from each curve's start)."""
    counts = batch.counts
    ends = batch.hi if window is None else np.full(len(batch), float(window))
    grid = counts if points_public else np.full(len(batch), int(grid_points))  # type: ignore[arg-type]
    return PublicFrames(ends=np.asarray(ends, dtype=np.float64),
                        n_points=counts.copy() if points_public else None,
                        grid_points=np.asarray(grid, dtype=np.int64))


def on_frames(batch: CurveBatch, frames: PublicFrames) -> CurveBatch:
    """`on_frame` of every curve: a curve that ends before its frame's end is held there."""
    short = np.flatnonzero(batch.hi < frames.ends)
    if short.size == 0:
        return batch
    ends = batch.offsets[1:][short]  # insert one row after each short curve's last row
    t = np.insert(batch.t, ends, frames.ends[short])
    values = np.insert(batch.values, ends, batch.values[ends - 1], axis=0)
    grow = np.zeros(len(batch) + 1, dtype=np.int64)
    grow[short + 1] = 1
    return CurveBatch(t, values, batch.offsets + np.cumsum(grow))


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


def run_privfuncseg(t: np.ndarray, values: np.ndarray, *, notion: str, amount: Fraction,
                    rng: np.random.Generator, frame: PublicFrame,
                    options: Mapping[str, Any]) -> PrivateFunction:
    """PrivFuncSeg on [0, frame.end] (ε-GP / ρ-CGP w.r.t. dist₂; cost `amount`).

    The SVT runs over min(max_level, ⌈log₂ size⌉) + 1 levels, size being the
    frame's public size, so its depth never depends on private data. It is
    `run_privfuncseg_batch` on one curve.
    """
    frames = PublicFrames(ends=np.array([frame.end]),
                          n_points=None if frame.n_points is None else np.array(
                              [frame.n_points]),
                          grid_points=np.array([frame.grid_points]))
    batch = CurveBatch.from_arrays(t, values, [0, len(t)])
    return run_privfuncseg_batch(batch, notion=notion, amount=amount, rngs=[rng],
                                 frames=frames, options=options).function(0)


def run_privfuncseg_batch(batch: CurveBatch, *, notion: str, amount: Fraction,
                          rngs: list[np.random.Generator], frames: PublicFrames,
                          options: Mapping[str, Any]) -> PrivateFunctionBatch:
    """PrivFuncSeg on every curve of a batch, each on its public frame (cost `amount` each).

    Curve c is read on [0, frames.ends[c]] and its SVT runs over
    min(max_level, ⌈log₂ size_c⌉) + 1 levels (size_c its public size);
    curve c's noise comes only from rngs[c] (see `privfuncseg_batch`).
    """
    return privfuncseg_batch(on_frames(batch, frames), rngs=rngs, public_sizes=frames.sizes,
                             **_budget_kw(notion, amount), **dict(options))


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
