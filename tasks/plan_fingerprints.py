"""The keyed fingerprints a chunk's stream plans need, asked of the ledger a few calls a chunk.

`tasks.continuation.plan_stream` compares each earlier released range of a
stream with the fingerprint it was released with, and fingerprints the new
range (`Ledger.range_fingerprint`: HMAC-SHA256 under the noise key, which only
the ledger holds). Asked one range at a time, a served ledger answered one
HTTPS request per range: a 10^6-stream release made over a million. Here the
ranges a chunk's plans will ask for (`planned_slices`, the same selection as
`plan_stream`'s) are fingerprinted first, in calls of at most
`FINGERPRINT_BATCH_VALUES` values (`Ledger.range_fingerprints`), and the plans
then read them from a table (`Fingerprints`). A range the plan asks for that was
not computed in advance is a bug (AssertionError), never a silent second call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ledger.watermark import StreamRange

__all__ = ["FINGERPRINT_BATCH_VALUES", "Fingerprints", "chunk_fingerprints", "planned_slices",
           "prior_ranges"]

#: The most values (steps) one `range_fingerprints` call carries (one range at least).
FINGERPRINT_BATCH_VALUES = 1 << 20


def prior_ranges(history: list[StreamRange], release_id: str
                 ) -> tuple[list[StreamRange], list[StreamRange], int | None]:
    """(own, prior, watermark) of a stream's released ranges, as `release_id` plans it.

    own: the release's own ranges (a rerun); prior: the other releases' ranges
    recorded before the release's own first one, by first step; watermark:
    their largest last step (None: none). A rerun plans against what the
    stream held when it first ran: ranges added by later releases do not count.
    """
    own = [r for r in history if r.release_id == release_id]
    cut = history.index(own[0]) if own else len(history)
    prior = sorted((r for r in history[:cut] if r.release_id != release_id),
                   key=lambda r: r.first_step)
    return own, prior, max((r.last_step for r in prior), default=None)


def planned_slices(steps: np.ndarray, history: list[StreamRange], release_id: str
                   ) -> list[slice]:
    """Row slices of `steps` whose fingerprints `plan_stream` may ask for, none empty.

    Each earlier range the input repeats (its steps present), then the steps
    after the watermark (all of them for a stream never released). `steps`
    strictly increase (the ingest rule), so the rows of a step range are one
    slice: the rows `plan_stream` selects with ``first <= steps <= last``.
    """
    _, prior, watermark = prior_ranges(history, release_id)
    out = []
    for r in prior:
        a = int(np.searchsorted(steps, r.first_step, side="left"))
        b = int(np.searchsorted(steps, r.last_step, side="right"))
        if b > a:
            out.append(slice(a, b))
    a = 0 if watermark is None else int(np.searchsorted(steps, watermark, side="right"))
    if a < steps.size:
        out.append(slice(a, int(steps.size)))
    return out


class Fingerprints:
    """One stream's precomputed range fingerprints, looked up as `plan_stream` asks for them."""

    def __init__(self) -> None:
        self._by_range: dict[tuple[int, int, int], str] = {}

    def add(self, steps: np.ndarray, fingerprint: str) -> None:
        """Record the fingerprint of the range of (strictly increasing, non-empty) `steps`."""
        self._by_range[_range_key(steps)] = fingerprint

    def __call__(self, steps: np.ndarray, values: np.ndarray) -> str:
        """The fingerprint of the range of `steps` (its `values` were fingerprinted with it)."""
        try:
            return self._by_range[_range_key(steps)]
        except (KeyError, IndexError):
            raise AssertionError("this is a bug: the plan asks for the fingerprint of a range "
                                 "that was not computed in advance") from None


def _range_key(steps: np.ndarray) -> tuple[int, int, int]:
    """A range of one stream's strictly increasing steps: (first, last, count)."""
    return int(steps[0]), int(steps[-1]), int(steps.size)


def chunk_fingerprints(led: Any, domain: str, release_id: str, users: list[str],
                       streams: list[str], steps: np.ndarray, values: np.ndarray,
                       offsets: list[int], history: dict[tuple[str, str], list[StreamRange]]
                       ) -> list[Fingerprints]:
    """Each stream's `Fingerprints` of its `planned_slices`, in calls of the batch size.

    Stream k of the chunk is (users[k], streams[k]), rows offsets[k]:offsets[k + 1]
    of `steps` and `values`. Privacy: as `Ledger.range_fingerprint` (the values
    go to the ledger, which holds the key; nothing is drawn).
    """
    owner, lo, hi = [], [], []  # each range: its stream, first row, row after its last
    for k, (user, sid) in enumerate(zip(users, streams, strict=True)):
        a, b = offsets[k], offsets[k + 1]
        ranges = history.get((user, sid))
        for sl in (planned_slices(steps[a:b], ranges, release_id) if ranges
                   else [slice(0, b - a)] if b > a else []):
            owner.append(k)
            lo.append(a + sl.start)
            hi.append(a + sl.stop)
    ends = np.cumsum(np.subtract(hi, lo, dtype=np.int64))
    out = [Fingerprints() for _ in users]
    first = 0
    while first < len(owner):
        done = int(ends[first - 1]) if first else 0
        stop = max(first + 1, int(np.searchsorted(ends, done + FINGERPRINT_BATCH_VALUES,
                                                  side="right")))
        rows = range(first, stop)
        if hi[first:stop - 1] == lo[first + 1:stop]:  # consecutive rows (whole streams): views
            st, v = steps[lo[first]:hi[stop - 1]], values[lo[first]:hi[stop - 1]]
        else:
            st = np.concatenate([steps[lo[i]:hi[i]] for i in rows])
            v = np.concatenate([values[lo[i]:hi[i]] for i in rows])
        fps = led.range_fingerprints(
            domain, [users[owner[i]] for i in rows], [streams[owner[i]] for i in rows], st, v,
            [0, *(ends[first:stop] - done).tolist()])
        for i, fp in zip(rows, fps, strict=True):
            out[owner[i]].add(steps[lo[i]:hi[i]], fp)
        first = stop
    return out
