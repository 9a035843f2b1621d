"""Draw a chunk of streams in one pass: per-segment keyed uniforms, one randomizer call.

Each output segment of a (user, stream) is drawn from its own ChaCha20
keystream, keyed by HMAC-SHA256(segment seed, stream id)
(`tasks.continuation.stream_rng`). Here those keystreams fill one array of
uniforms, each segment's at its values' positions (one call of the C kernel
`tasks/_keystream.c` for the chunk: the doubles of one re-keyed generator,
`tasks.keyed_rng.rekey`, with one ``random(out=...)`` per segment and uniform row),
then the registered randomizer (`registry.StreamMechanism.run_uniforms`) and the
release grid run once over the chunk. Every value is the same double the
stream-by-stream draw gives (``entry.run(values, rng=stream_rng(seed, id))``
on each segment, snapped): the randomizers and the snapping are elementwise,
and each segment's uniforms are its keystream's first draws in the order the
randomizer takes them (checked in tests/tasks/test_stream_draw.py and pinned
by tests/privacy/test_golden_draws.py).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from mechanisms.cost import StepRun, WEventCost, float_at_most
from mechanisms.safe_sampling import snap_to_grid
from tasks._keystream import fill_uniforms
from tasks.continuation import stream_key
from tasks.keyed_rng import rekey, release_generator
from tasks.stage import StreamChunk, contiguous_ranges

__all__ = ["STREAM_GRID", "StreamDrawError", "draw_stream_chunk", "step_runs"]

#: The release grid of stream reports (a power of two far below the noise).
STREAM_GRID = 2.0**-24


class StreamDrawError(Exception):
    """The randomizer refused the values of one stream (the caller names the user)."""

    def __init__(self, stream: int, cause: BaseException):
        super().__init__(str(cause))
        self.stream = stream
        self.cause = cause


def _segment_bounds(chunk: StreamChunk) -> tuple[np.ndarray, list[tuple[int, Any]]]:
    """Row bounds (G, 2) of every segment and (stream index, segment) of each, in order.

    A segment's rows are its stream's rows whose steps lie in [first_step,
    last_step]: all of them for a stream of one segment, found by bisection
    for a continued stream. Steps are strictly increasing within a stream (the
    ingest rule "t strictly increasing"), and the segments of a stream must
    tile its rows in step order, none empty: AssertionError ("a bug")
    otherwise, so no value is drawn twice or left undrawn.
    """
    flat = [(s, g) for s, segs in enumerate(chunk.segments) for g in segs]
    steps = np.asarray(chunk.steps, dtype=np.int64)
    offsets = np.asarray(chunk.offsets, dtype=np.int64)
    n_streams = offsets.size - 1
    stream = np.array([s for s, _ in flat], dtype=np.int64)
    firsts = np.array([g.first_step for _, g in flat], dtype=np.int64)
    lasts = np.array([g.last_step for _, g in flat], dtype=np.int64)
    single = np.bincount(stream, minlength=n_streams)[stream] == 1
    bounds = np.stack([offsets[stream], offsets[stream + 1]], axis=1).reshape(-1, 2)
    for i in np.flatnonzero(~single).tolist():
        a, b = offsets[stream[i]], offsets[stream[i] + 1]
        bounds[i] = a + np.searchsorted(steps[a:b], (firsts[i], lasts[i] + 1))
    ok = len(chunk.segments) == n_streams and bool(np.all(bounds[:, 1] > bounds[:, 0]))
    if ok and flat:
        same = stream[1:] == stream[:-1]
        covered = np.bincount(stream, weights=bounds[:, 1] - bounds[:, 0], minlength=n_streams)
        ordered = steps[1:] > steps[:-1]
        starts = offsets[1:-1]
        ordered[starts[(starts > 0) & (starts < steps.size)] - 1] = True  # a new stream begins
        ok = bool(np.all(np.where(same, bounds[1:, 0] == bounds[:-1, 1], True))
                  and np.array_equal(covered, np.diff(offsets)) and ordered.all()
                  and np.all(steps[bounds[:, 0]] >= firsts)
                  and np.all(steps[bounds[:, 1] - 1] <= lasts))
    if not ok or (not flat and steps.size):
        raise AssertionError(f"this is a bug: the plan of chunk {chunk.index} does not tile "
                             "its streams' steps")
    return bounds, flat


def _keyed_uniforms(chunk: StreamChunk, bounds: np.ndarray, flat: list[tuple[int, Any]],
                    rows: int) -> np.ndarray:
    """(rows, P) uniforms: each segment's keystream at its rows, `rows` blocks in draw order.

    One call of the C kernel (`tasks._keystream.fill_uniforms`, without the
    GIL) for the whole chunk: the same doubles as re-keying one
    ``release_generator`` per segment and calling ``random(out=u[r, lo:hi])``
    for each row r (`uniforms_by_generator`, the tests' reference).
    """
    u = np.empty((rows, np.asarray(chunk.values).size), dtype=np.float64)
    keys = b"".join(stream_key(g.seed, chunk.stream_ids[s]).to_bytes(32, "little")
                    for s, g in flat)
    fill_uniforms(np.frombuffer(keys, dtype="<u4").reshape(-1, 8),
                  np.ascontiguousarray(bounds, dtype=np.int64).reshape(-1, 2), u)
    return u


def uniforms_by_generator(chunk: StreamChunk, bounds: np.ndarray, flat: list[tuple[int, Any]],
                          rows: int) -> np.ndarray:
    """`_keyed_uniforms` through randomgen's ChaCha generator, one segment and row at a time."""
    u = np.empty((rows, np.asarray(chunk.values).size), dtype=np.float64)
    gen = None  # built from the first segment's key, re-keyed for each next one
    for (lo, hi), (s, g) in zip(bounds.tolist(), flat, strict=True):
        key = stream_key(g.seed, chunk.stream_ids[s])
        gen = release_generator(key) if gen is None else rekey(gen, key)
        for r in range(rows):
            gen.random(out=u[r, lo:hi])
    return u


def _first_bad_stream(values: np.ndarray, offsets: np.ndarray) -> int:
    """The stream of the first value the randomizers refuse (not finite or outside [0, 1])."""
    bad = ~(np.isfinite(values) & (values >= 0.0) & (values <= 1.0))
    row = int(np.argmax(bad)) if bad.any() else 0
    return int(np.searchsorted(offsets, row, side="right") - 1)


def draw_stream_chunk(chunk: StreamChunk, entry: Any, *, epsilon_per_step: Fraction,
                      amount: Fraction, w: int) -> tuple[np.ndarray, list[tuple[int, WEventCost]]]:
    """Every stream's released reports of one chunk, and the cost of each new segment.

    Privacy: each report is ε₀-LDP (ε₀ = `epsilon_per_step`, rounded down to a
    float) for its step, drawn only from its own segment's keyed ChaCha20
    keystream (`tasks.continuation.stream_rng`): an earlier segment with the
    seed of the release that drew it (the same bytes it published, checked by
    `tasks.stream_redraw`), the new one with this release's. Only new segments
    cost: one `WEventCost(amount, w, runs at ε₀)` each. Reports are snapped to
    the public grid `STREAM_GRID` within the randomizer's public bound.

    Args:
        chunk: the chunk (steps strictly increasing within each stream).
        entry: the `registry.StreamMechanism` to run.
        epsilon_per_step: the exact ε₀ = ε/w (a Fraction).
        amount: the exact ε per window.
        w: the window (steps).

    Returns:
        (y, costs): the (P,) reports in the chunk's row order; (stream index,
        cost) of each new segment, in stream order.

    Raises:
        StreamDrawError: naming the stream whose values the randomizer refused.
        AssertionError: the segments do not tile the streams' steps (a bug).
    """
    offsets = np.asarray(chunk.offsets, dtype=np.int64)
    values = np.asarray(chunk.values, dtype=np.float64)
    bounds, flat = _segment_bounds(chunk)
    u = _keyed_uniforms(chunk, bounds, flat, entry.uniforms)
    try:
        y = entry.run_uniforms(values, u, epsilon_per_step=epsilon_per_step)
    except Exception as err:
        raise StreamDrawError(_first_bad_stream(values, offsets), err) from err
    bound = entry.bound(float_at_most(epsilon_per_step)) + STREAM_GRID
    y -= 0.5
    y = snap_to_grid(y, grid=STREAM_GRID, bound=bound)
    y += 0.5
    new = [i for i, (_, g) in enumerate(flat) if g.new]
    return y, _new_costs(np.asarray(chunk.steps, dtype=np.int64), bounds[new],
                         [flat[i][0] for i in new], epsilon_per_step, amount, w)


def _new_costs(steps: np.ndarray, new: np.ndarray, streams: list[int], per_step: Fraction,
               amount: Fraction, w: int) -> list[tuple[int, WEventCost]]:
    """(stream, cost) of each new segment (row bounds `new`, (N, 2)): its runs at ε₀ a step.

    The breaks between runs of consecutive steps are found once for the chunk;
    segments with the same runs (streams over the same steps) share one cost.
    """
    cut = np.flatnonzero(np.diff(steps) != 1) + 1  # rows that do not follow their previous step
    inner = np.searchsorted(cut, new[:, 1]) - np.searchsorted(cut, new[:, 0], side="right")
    ends = np.stack([steps[new[:, 0]], steps[new[:, 1] - 1] + 1], axis=1).tolist() if len(new) \
        else []
    made: dict[tuple[int, ...], WEventCost] = {}
    out = []
    for (lo, hi), n_inner, (first, stop), s in zip(new.tolist(), inner.tolist(), ends, streams,
                                                   strict=True):
        key = ((first, stop) if not n_inner
               else tuple(x for r in step_runs(steps[lo:hi], per_step) for x in (r.start, r.stop)))
        cost = made.get(key)
        if cost is None:
            cost = made[key] = WEventCost(amount, w, tuple(
                StepRun(key[i], key[i + 1], per_step) for i in range(0, len(key), 2)))
        out.append((s, cost))
    return out


def step_runs(steps: np.ndarray, per_step: Fraction) -> tuple[StepRun, ...]:
    """Runs of consecutive absolute steps, each step costing `per_step`."""
    return tuple(StepRun(a, b, per_step) for a, b in contiguous_ranges(steps))
