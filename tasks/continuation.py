"""Incremental stream releases: release only the steps after each stream's watermark.

A scheduled release of a growing file (day 1, days 1-2, days 1-3, ...) must
not re-randomise or re-charge the steps that earlier releases already
published. The ledger keeps, per (user, domain, stream), every released range
of steps with the release that drew it, the per-step ε, the number of steps
and a keyed fingerprint of the validated values (`ledger.watermark`); the
largest released step is the stream's watermark W. For each stream of the
input, `plan_stream` decides:

- steps <= W must be exactly earlier released ranges, each wholly present
  with the fingerprint it was released with (a daily file that holds only the
  new day repeats none of them, which is fine); anything else is a changed
  history, a step before the watermark that was never released, or a partial
  range: the user is rejected with the reason and nothing is charged;
- steps > W are this release's new range: they must start at W + 1 (a gap
  after the watermark is an error) and are the only steps charged, at this
  release's ε/w, which must equal the ε/w the stream was released with;
- the output repeats the earlier ranges by redrawing them with the noise of
  the release that first drew them (same seed, same values, same ε/w: the
  same bytes), so the released history never contradicts itself and no
  uncharged draw leaves: each range is one draw, charged once.

A rerun of the same release id finds its own range in the ledger and plans
exactly what it planned the first time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from schemas.errors import PrivpipeError
from tasks.safe_files import write_file


class ContinuationError(PrivpipeError):
    """A stream's input does not continue what was released for it (the user is rejected)."""


@dataclass(frozen=True)
class ReleasedRange:
    """One range of a stream's steps released (reserved) by one release.

    Attributes:
        release_id: the release that drew it (its noise seed redraws it).
        first_step: first released step.
        last_step: last released step (inclusive).
        steps: number of steps released in [first_step, last_step] (missing
            days leave holes).
        fingerprint: keyed fingerprint of the (step, value) pairs released.
        epsilon_per_step: the exact ε/w each of those steps cost.
    """

    release_id: str
    first_step: int
    last_step: int
    steps: int
    fingerprint: str
    epsilon_per_step: Fraction


@dataclass(frozen=True)
class Segment:
    """A part of a stream's output: a range to redraw (earlier) or to draw and charge (new)."""

    release_id: str
    first_step: int
    last_step: int
    new: bool


@dataclass(frozen=True)
class StreamPlan:
    """What one release does with one stream.

    Attributes:
        segments: the output's ranges in step order (earlier ones, then the new one).
        watermark: the stream's watermark before this release (None: never released).
        new_range: the range this release charges, or None (nothing new).
    """

    segments: tuple[Segment, ...]
    watermark: int | None
    new_range: ReleasedRange | None


Fingerprint = Callable[[np.ndarray, np.ndarray], str]


def _check_earlier(steps: np.ndarray, values: np.ndarray, prior: list[ReleasedRange],
                   per_step: Fraction, fingerprint: Fingerprint
                   ) -> tuple[list[Segment], np.ndarray]:
    segments: list[Segment] = []
    covered = np.zeros(steps.size, dtype=bool)
    for r in prior:
        if r.epsilon_per_step != per_step:
            raise ContinuationError(
                f"steps {r.first_step}-{r.last_step} were released at ε/w = {r.epsilon_per_step} "
                f"(release {r.release_id!r}); this release asks ε/w = {per_step}: continue a "
                "stream with the ε it was released with")
        sel = (steps >= r.first_step) & (steps <= r.last_step)
        if not sel.any():
            continue  # the input does not repeat this range (e.g. a file of the new day only)
        if int(sel.sum()) != r.steps or fingerprint(steps[sel], values[sel]) != r.fingerprint:
            raise ContinuationError(
                f"steps {r.first_step}-{r.last_step} differ from what release {r.release_id!r} "
                "released (values, or which steps are present): a changed history cannot be "
                "released again")
        covered |= sel
        segments.append(Segment(r.release_id, r.first_step, r.last_step, new=False))
    return segments, covered


def plan_stream(steps: np.ndarray, values: np.ndarray, history: list[ReleasedRange], *,
                release_id: str, per_step: Fraction, fingerprint: Fingerprint) -> StreamPlan:
    """Plan one stream of an incremental release (see the module docstring).

    Args:
        steps: the input's strictly increasing absolute steps.
        values: its validated, normalised values.
        history: the ledger's released ranges of this stream, in entry order.
        release_id: this release.
        per_step: this release's exact ε/w.
        fingerprint: the ledger's keyed fingerprint of (steps, values).

    Returns:
        The `StreamPlan`.

    Raises:
        ContinuationError: changed history, a step before the watermark that
            was never released, a gap after the watermark, another ε/w, or a
            rerun whose new range differs from the first run's.
    """
    own = [r for r in history if r.release_id == release_id]
    # a rerun plans against what the stream held when it first ran (the ledger
    # lists ranges in entry order): ranges added by later releases do not count
    cut = history.index(own[0]) if own else len(history)
    prior = sorted((r for r in history[:cut] if r.release_id != release_id),
                   key=lambda r: r.first_step)
    watermark = max((r.last_step for r in prior), default=None)
    segments, covered = _check_earlier(steps, values, prior, per_step, fingerprint)
    old = np.zeros(steps.size, dtype=bool) if watermark is None else steps <= watermark
    stray = old & ~covered
    if stray.any():
        raise ContinuationError(
            f"step {int(steps[stray][0])} is before the stream's watermark (step {watermark}, "
            "the last one released) but was never released: earlier steps cannot be added")
    new = ~old
    new_range = None
    if new.any():
        first, last = int(steps[new][0]), int(steps[new][-1])
        if watermark is not None and first != watermark + 1:
            raise ContinuationError(
                f"the stream was released up to step {watermark}; this input continues at step "
                f"{first}: steps {watermark + 1}-{first - 1} are missing (a gap after the "
                "watermark)")
        new_range = ReleasedRange(release_id, first, last, int(new.sum()),
                                  fingerprint(steps[new], values[new]), per_step)
        segments.append(Segment(release_id, first, last, new=True))
    if own and (new_range is None or own[0] != new_range):
        raise ContinuationError(
            f"release {release_id!r} already released steps {own[0].first_step}-"
            f"{own[0].last_step} of this stream from other data: a rerun must repeat the same "
            "release exactly")
    return StreamPlan(tuple(segments), watermark, new_range)


def stream_rng(seed: int, stream_id: str) -> np.random.Generator:
    """The noise generator of one (release, user, stream): the user's release seed and the stream.

    Each release draws one range per stream from a fresh generator, so an
    earlier range is redrawn exactly by the generator of the release that drew it.
    """
    key = int.from_bytes(hashlib.sha256(stream_id.encode("utf-8")).digest()[:8], "big")
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(key,)))


def write_plans(plans: dict[str, dict[str, StreamPlan]], path: Path) -> None:
    """The segment plans of one chunk's users (user -> stream -> segments), as JSON."""
    data = {u: {s: [[g.release_id, g.first_step, g.last_step, g.new] for g in p.segments]
                for s, p in streams.items()} for u, streams in plans.items()}
    write_file(path, json.dumps(data, sort_keys=True).encode())


def read_plans(path: str | Path) -> dict[str, dict[str, list[Segment]]]:
    """Read `write_plans` output."""
    raw: dict[str, Any] = json.loads(Path(path).read_text())
    return {u: {s: [Segment(str(r), int(a), int(b), bool(n)) for r, a, b, n in segs]
                for s, segs in streams.items()} for u, streams in raw.items()}
