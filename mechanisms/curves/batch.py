"""Many curves as one set of flat arrays: the input of every batched curve mechanism.

A chunk of users' curves is held as the concatenation of their samples,
``t`` (P,) and ``values`` (P, n), cut by ``offsets`` (C + 1,): curve c is
``t[offsets[c]:offsets[c + 1]]``. Every batched mechanism works on these
arrays with segmented numpy reductions (no Python loop per sample, and per
curve only the calls to that curve's own generator), and the per-curve API
(`privfuncseg(t, values, ...)` and friends) is the batch of one curve.

Noise stays per user: a batched mechanism takes one generator per curve
(`rngs[c]`), and a generator given for several curves is drawn in curve
order, each curve's draws complete before the next curve's begin (exactly as
calling the mechanism on each curve in turn), so a user's noise comes only
from that user's seeded generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mechanisms.curves._budget import check_rng
from mechanisms.curves._piecewise import check_curve
from mechanisms.errors import MechanismParameterError

__all__ = ["CurveBatch", "generator_rounds"]


@dataclass(frozen=True)
class CurveBatch:
    """Validated curves as flat arrays.

    Attributes:
        t: (P,) sample times, strictly increasing within each curve.
        values: (P, n) samples, read as the piecewise-linear interpolant.
        offsets: (C + 1,) int64, curve c holds rows offsets[c]:offsets[c + 1].
    """

    t: np.ndarray
    values: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_arrays(cls, t: object, values: object, offsets: object) -> CurveBatch:
        """Validate concatenated curves (the rules of `check_curve`, per curve).

        Raises:
            MechanismParameterError: naming the curve index and the rule broken
                (never a value).
        """
        ta = np.ascontiguousarray(t, dtype=np.float64)
        va = np.asarray(values, dtype=np.float64)
        off = np.asarray(offsets, dtype=np.int64)
        if ta.ndim != 1:
            raise MechanismParameterError(f"t must be one-dimensional, got shape {ta.shape}")
        if va.ndim == 1:
            va = va[:, None]
        if va.ndim != 2 or va.shape[0] != ta.size or va.shape[1] < 1:
            raise MechanismParameterError(
                f"values must have shape (P,) or (P, n) with P = len(t) = {ta.size}, "
                f"got {va.shape}")
        if off.ndim != 1 or off.size < 2 or off[0] != 0 or off[-1] != ta.size:
            raise MechanismParameterError("offsets must run from 0 to len(t)")
        counts = np.diff(off)
        if np.any(counts < 2):
            bad = int(np.flatnonzero(counts < 2)[0])
            raise MechanismParameterError(f"curve {bad}: a curve needs at least 2 samples")
        if not np.all(np.isfinite(ta)):
            raise MechanismParameterError(f"curve {_curve_of(off, ~np.isfinite(ta))}: "
                                          "t contains NaN or inf")
        finite = np.isfinite(va).all(axis=1)
        if not finite.all():
            raise MechanismParameterError(f"curve {_curve_of(off, ~finite)}: "
                                          "values contain NaN or inf")
        step = np.diff(ta) > 0
        step[off[1:-1] - 1] = True  # across two curves
        if not step.all():
            raise MechanismParameterError(
                f"curve {_curve_of(off, np.append(~step, False))}: "
                "t must be strictly increasing (sorted, no duplicates)")
        return cls(ta, np.ascontiguousarray(va), off)

    @classmethod
    def from_curves(cls, curves: Sequence[tuple[object, object]]) -> CurveBatch:
        """Validate and concatenate (t, values) pairs."""
        if not curves:
            raise MechanismParameterError("a batch needs at least one curve")
        checked = [check_curve(t, v) for t, v in curves]
        n = {v.shape[1] for _, v in checked}
        if len(n) != 1:
            raise MechanismParameterError("all curves of a batch need the same number of "
                                          f"value columns, got {sorted(n)}")
        counts = [len(t) for t, _ in checked]
        off = np.zeros(len(checked) + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        return cls(np.concatenate([t for t, _ in checked]),
                   np.concatenate([v for _, v in checked]), off)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def n_outputs(self) -> int:
        """Number of value columns n."""
        return int(self.values.shape[1])

    @property
    def counts(self) -> np.ndarray:
        """Samples per curve (C,)."""
        return np.diff(self.offsets)

    @property
    def lo(self) -> np.ndarray:
        """First sample time of each curve (C,)."""
        return self.t[self.offsets[:-1]]

    @property
    def hi(self) -> np.ndarray:
        """Last sample time of each curve (C,)."""
        return self.t[self.offsets[1:] - 1]

    def curve(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Views (t, values) of curve c."""
        a, b = int(self.offsets[c]), int(self.offsets[c + 1])
        return self.t[a:b], self.values[a:b]

    def distinct_times(self) -> np.ndarray:
        """Number of distinct sample times per curve (C,) (duplicates encode jumps)."""
        rises = np.diff(self.t) > 0
        rises[self.offsets[1:-1] - 1] = False
        per = np.add.reduceat(np.append(rises, False), self.offsets[:-1])
        return per.astype(np.int64) + 1

    def take(self, index: np.ndarray) -> CurveBatch:
        """The sub-batch of curves `index` (in that order), without re-validating."""
        index = np.asarray(index, dtype=np.int64)
        if index.size == len(self) and np.array_equal(index, np.arange(len(self))):
            return self
        counts = self.counts[index]
        off = np.zeros(index.size + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        rows = np.repeat(self.offsets[index] - off[:-1], counts) + np.arange(off[-1])
        return CurveBatch(self.t[rows], self.values[rows], off)


def _curve_of(offsets: np.ndarray, bad_rows: np.ndarray) -> int:
    row = int(np.flatnonzero(bad_rows)[0])
    return int(np.searchsorted(offsets, row, side="right") - 1)


def generator_rounds(rngs: Sequence[np.random.Generator], count: int) -> list[np.ndarray]:
    """Split curve indices into rounds in which no generator appears twice.

    Round r holds, for every generator, the r-th curve it was given for. A
    batched mechanism runs the rounds in order, so a generator shared by a
    user's curves is drawn curve after curve, exactly as sequential calls.

    Args:
        rngs: one generator per curve (the same object may repeat).
        count: number of curves (must equal len(rngs)).

    Returns:
        Index arrays, one per round, each in increasing curve order.
    """
    if len(rngs) != count:
        raise MechanismParameterError(f"need one generator per curve: {len(rngs)} for {count}")
    if not set(map(type, rngs)) <= {np.random.Generator}:
        for rng in rngs:
            check_rng(rng)  # names the rule (subclasses pass)
    keys = list(map(id, rngs))
    if len(set(keys)) == count:
        return [np.arange(count, dtype=np.int64)]
    seen: dict[int, int] = {}
    rounds: list[list[int]] = []
    for c, key in enumerate(keys):
        r = seen.get(key, 0)
        seen[key] = r + 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append(c)
    return [np.asarray(r, dtype=np.int64) for r in rounds]
