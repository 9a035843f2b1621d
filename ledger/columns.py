"""Column helpers shared by the ledger's vectorised paths (numpy and Arrow, no DuckDB).

Amounts are exact integer quanta, larger than int64 (``UNITS_PER_EPSILON`` is
about 5.9e23), so they live in numpy ``object`` arrays of Python ints: the
arithmetic is vectorised in form and exact; only codes and indices are int64.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def factorize(values: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Integer codes of string values in order of first appearance, and the distinct values.

    ``factorize(["b", "a", "b"])`` is ``([0, 1, 0], ["b", "a"])``.
    """
    if not len(values):
        return np.zeros(0, np.int64), []
    if values.count(values[0]) == len(values):  # one value (a domain, a step): no hashing
        return np.zeros(len(values), np.int64), [values[0]]
    enc = pc.dictionary_encode(pa.array(values, pa.string()))
    return (enc.indices.to_numpy(zero_copy_only=False).astype(np.int64),
            enc.dictionary.to_pylist())


def combine(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes of the pairs (a[i], b[i]) in order of first appearance, and how many distinct."""
    if not len(a):
        return np.zeros(0, np.int64), 0
    pair = a * (int(b.max()) + 1) + b
    uniq, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    return rank[inverse], len(uniq)


def key_codes(*columns: Sequence[str]) -> tuple[np.ndarray, int]:
    """Codes of the tuples formed by the columns, in order of first appearance."""
    codes, uniques = factorize(columns[0])
    n = len(uniques)
    for col in columns[1:]:
        other, values = factorize(col)
        if len(values) > 1:  # a constant column does not split any key
            codes, n = combine(codes, other)
    return codes, n


def first_duplicate(codes: np.ndarray) -> int | None:
    """Index of the first value that equals an earlier one, or None if all are distinct."""
    if not len(codes):
        return None
    _, first = np.unique(codes, return_index=True)
    if len(first) == len(codes):
        return None
    seen_first = np.zeros(len(codes), bool)
    seen_first[first] = True
    return int(np.flatnonzero(~seen_first)[0])


def object_array(values: Sequence[Any]) -> np.ndarray:
    """The values as a 1-d ``object`` array (Python ints stay exact; None stays None)."""
    out = np.empty(len(values), object)
    out[:] = list(values)
    return out


def group_running_sum(groups: np.ndarray, values: np.ndarray, n_groups: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Running sum of `values` within each group, in index order, and each group's total.

    Returns ``(running, totals)``: ``running[i]`` is the sum of ``values[j]`` over
    ``j <= i`` with ``groups[j] == groups[i]``; ``totals[g]`` the sum over group g
    (0 for a group without values). Exact for ``object`` arrays of ints.
    """
    n = len(values)
    totals = np.zeros(n_groups, object)
    running = np.zeros(n, object)
    if not n:
        return running, totals
    order = np.argsort(groups, kind="stable")
    g = groups[order]
    v = values[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    cs = np.cumsum(v)
    base = cs[starts] - v[starts]  # sum before each group's first value
    sizes = np.diff(np.r_[starts, n])
    running[order] = cs - np.repeat(base, sizes)
    totals[g[starts]] = cs[np.r_[starts[1:], n] - 1] - base
    return running, totals


def group_first(groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Index of the first element of each group (len(groups) for a group without elements)."""
    out = np.full(n_groups, len(groups), np.int64)
    if len(groups):
        uniq, first = np.unique(groups, return_index=True)
        out[uniq] = first
    return out


def interleave(first: Sequence[Any], second: Sequence[Any], has_second: np.ndarray
               ) -> list[Any]:
    """``first[i]`` followed by ``second[i]`` where ``has_second[i]``, for every i in order.

    For columns of scalars (str, int, None); `first` and `second` have equal lengths.
    """
    if not has_second.any():
        return list(first)
    if has_second.all():
        out = [None] * (2 * len(first))
        out[0::2], out[1::2] = first, second
        return out
    counts = 1 + has_second.astype(np.int64)
    pos = np.cumsum(counts) - counts  # where each first[i] goes
    out = np.empty(int(counts.sum()), object)
    out[pos] = object_array(first)
    take = np.flatnonzero(has_second)
    if len(take):
        out[pos[take] + 1] = object_array(second)[take]
    return out.tolist()
