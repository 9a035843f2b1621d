"""Draw a chunk of streams in one pass: per-segment keyed uniforms, one randomizer call.

Each output segment of a (user, stream) is drawn from its own ChaCha20
keystream, keyed by HMAC-SHA256(segment seed, stream id)
(`tasks.continuation.stream_rng`). Here those keystreams fill one array of
uniforms, each segment's at its values' positions (one re-keyed generator,
`tasks.keyed_rng.rekey`, one ``random(out=...)`` per segment and uniform row),
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

    Steps are strictly increasing within a stream (the ingest rule "t strictly
    increasing"); the segments of a stream must tile its rows in step order.
    Raises AssertionError ("a bug") otherwise: a value drawn twice or not at all.
    """
    flat = [(s, g) for s, segs in enumerate(chunk.segments) for g in segs]
    steps = np.asarray(chunk.steps, dtype=np.int64)
    offsets = np.asarray(chunk.offsets, dtype=np.int64)
    bounds = np.empty((len(flat), 2), dtype=np.int64)
    for i, (s, g) in enumerate(flat):
        a, b = offsets[s], offsets[s + 1]
        bounds[i] = a + np.searchsorted(steps[a:b], (g.first_step, g.last_step + 1))
    n_streams = offsets.size - 1
    first = np.array([s for s, _ in flat], dtype=np.int64)
    same = first[1:] == first[:-1]
    starts_ok = np.all(np.where(same, bounds[1:, 0] == bounds[:-1, 1], True))
    covered = np.zeros(n_streams, dtype=np.int64)
    np.add.at(covered, first, bounds[:, 1] - bounds[:, 0])
    ordered = steps[1:] > steps[:-1]
    starts = offsets[1:-1]
    ordered[starts[(starts > 0) & (starts < steps.size)] - 1] = True  # a new stream begins
    if not (starts_ok and ordered.all() and np.array_equal(covered, np.diff(offsets))
            and len(chunk.segments) == n_streams):
        raise AssertionError(f"this is a bug: the plan of chunk {chunk.index} does not tile "
                             "its streams' steps")
    return bounds, flat


def _keyed_uniforms(chunk: StreamChunk, bounds: np.ndarray, flat: list[tuple[int, Any]],
                    rows: int) -> np.ndarray:
    """(rows, P) uniforms: each segment's keystream at its rows, `rows` blocks in draw order."""
    u = np.empty((rows, np.asarray(chunk.values).size), dtype=np.float64)
    gen = release_generator(0)
    for (lo, hi), (s, g) in zip(bounds.tolist(), flat, strict=True):
        rekey(gen, stream_key(g.seed, chunk.stream_ids[s]))
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
    steps = np.asarray(chunk.steps, dtype=np.int64)
    costs = [(s, WEventCost(amount, w, step_runs(steps[lo:hi], epsilon_per_step)))
             for (lo, hi), (s, g) in zip(bounds.tolist(), flat, strict=True) if g.new]
    return y, costs


def step_runs(steps: np.ndarray, per_step: Fraction) -> tuple[StepRun, ...]:
    """Runs of consecutive absolute steps, each step costing `per_step`."""
    return tuple(StepRun(a, b, per_step) for a, b in contiguous_ranges(steps))
