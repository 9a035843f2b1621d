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
                   ) -> list[np.ndarray]:
    """Masks of `steps` whose fingerprints `plan_stream` may ask for, none empty.

    Each earlier range the input repeats (its steps present), then the steps
    after the watermark (all of them for a stream never released).
    """
    _, prior, watermark = prior_ranges(history, release_id)
    masks = []
    for r in prior:
        sel = (steps >= r.first_step) & (steps <= r.last_step)
        if sel.any():
            masks.append(sel)
    new = steps > watermark if watermark is not None else np.ones(steps.size, dtype=bool)
    if new.any():
        masks.append(new)
    return masks


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
    out = [Fingerprints() for _ in users]
    pieces: list[tuple[int, np.ndarray, np.ndarray]] = []
    for k, (user, sid) in enumerate(zip(users, streams, strict=True)):
        st, v = steps[offsets[k]:offsets[k + 1]], values[offsets[k]:offsets[k + 1]]
        pieces += [(k, st[m], v[m])
                   for m in planned_slices(st, history.get((user, sid), []), release_id)]
    start = 0
    while start < len(pieces):
        stop, size = start, 0
        while stop < len(pieces) and (stop == start
                                      or size + pieces[stop][1].size <= FINGERPRINT_BATCH_VALUES):
            size += pieces[stop][1].size
            stop += 1
        batch = pieces[start:stop]
        bounds = np.cumsum([0] + [p[1].size for p in batch]).tolist()
        fps = led.range_fingerprints(
            domain, [users[k] for k, _, _ in batch], [streams[k] for k, _, _ in batch],
            np.concatenate([p[1] for p in batch]), np.concatenate([p[2] for p in batch]), bounds)
        for (k, st, _), fp in zip(batch, fps, strict=True):
            out[k].add(st, fp)
        start = stop
    return out
