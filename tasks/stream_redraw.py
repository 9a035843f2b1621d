"""A continued stream re-emits its earlier ranges only as they were published.

A stream release that continues yesterday's repeats yesterday's range in its
output: the chunk task redraws it from the seed of the release that drew it
(`tasks.continuation.seeded_segments`), which gives the same bytes only while
the generator and the samplers draw exactly what they drew then. numpy gives
no such promise across versions (the pins and tests/privacy/test_golden_draws.py
guard it), and a redraw that differs would release those steps a second time
with fresh noise: each such step would then cost 2ε/w while the ledger shows
ε/w. So before anything is published, every redrawn range is compared, value
by value, with the samples the earlier release published (its samples file,
checked against the SHA-256 its ledger-MAC'd manifest records:
`tasks.stream_history.earlier_releases`); a difference, or a range whose
published samples cannot be found or verified, stops the release
(`StreamRedrawError`): nothing of it is published.

This is a check of released outputs against released outputs: it reads no
raw data and charges nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import duckdb
import pyarrow as pa

from schemas.errors import EXIT_INTEGRITY, PrivpipeError

__all__ = ["StreamRedrawError", "check_redraws", "earlier_ranges"]


class StreamRedrawError(PrivpipeError):
    """A repeated range differs from (or cannot be checked against) what was published.

    The release stops before publishing; its reservation stays recorded until it
    is rerun or closed (`privpipe ledger close`), as for any interrupted release.
    """

    exit_code = EXIT_INTEGRITY


def earlier_ranges(plans: Mapping[str, Mapping[str, Any]]
                   ) -> list[tuple[str, str, str, int, int]]:
    """(user, stream, release, first step, last step) of every range a chunk repeats."""
    return [(user, sid, g.release_id, g.first_step, g.last_step)
            for user, streams in plans.items() for sid, p in streams.items()
            for g in p.segments if not g.new]


def check_redraws(samples: pa.Table, ranges: list[tuple[str, str, str, int, int]],
                  published: Mapping[str, str]) -> None:
    """Raise unless every repeated range of `samples` equals the samples its release published.

    Args:
        samples: a chunk's released reports (user_id, stream_id, step, y).
        ranges: the ranges it repeats (`earlier_ranges`).
        published: release id -> its verified samples file
            (`tasks.stream_history.earlier_releases`).

    Raises:
        StreamRedrawError: naming the first user, stream, release and steps whose
            redraw differs from the published values, or whose release's
            samples are missing or do not match its manifest.
    """
    if not ranges:
        return
    missing = sorted({r[2] for r in ranges} - set(published))
    if missing:
        user, sid, rid, a, b = next(r for r in ranges if r[2] == missing[0])
        raise StreamRedrawError(
            f"stream {sid!r} of user {user!r} repeats steps {a}-{b} of release {rid!r}, whose "
            "published samples are missing or do not match its manifest: the redraw cannot "
            "be checked against what was published, so it is not released again; restore "
            f"{rid}'s output directory under --out (or run where it is) and rerun")
    con = duckdb.connect()
    try:
        con.register("chunk", samples.select(["user_id", "stream_id", "step", "y"]))
        con.register("ranges", pa.table({
            "user_id": [r[0] for r in ranges], "stream_id": [r[1] for r in ranges],
            "release_id": [r[2] for r in ranges], "first_step": [r[3] for r in ranges],
            "last_step": [r[4] for r in ranges]}))
        for rid in sorted({r[2] for r in ranges}):
            bad = con.execute(
                "SELECT c.user_id, c.stream_id, min(c.step), count(*) FROM chunk c "
                "JOIN ranges r ON r.user_id = c.user_id AND r.stream_id = c.stream_id "
                "AND c.step BETWEEN r.first_step AND r.last_step AND r.release_id = ? "
                "LEFT JOIN read_parquet(?) p ON p.user_id = c.user_id "
                "AND p.stream_id = c.stream_id AND p.step = c.step "
                "WHERE p.y IS NULL OR p.y <> c.y "
                "GROUP BY c.user_id, c.stream_id ORDER BY c.user_id, c.stream_id LIMIT 1",
                [rid, published[rid]]).fetchall()
            if bad:
                user, sid, step, n = bad[0]
                raise StreamRedrawError(
                    f"the redraw of stream {sid!r} of user {user!r} differs from what release "
                    f"{rid!r} published ({n} step(s), the first {step}): the noise generator or "
                    "a sampler no longer draws what it drew then (numpy/randomgen not at the "
                    "pinned versions?). Nothing of this release is published; restore the "
                    "pinned versions and rerun, or close the release")
    finally:
        con.close()
