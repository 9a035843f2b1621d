"""Stream watermarks: the released ranges of each (user, domain, stream), in the chain.

An incremental stream release (`tasks.continuation`) charges only the steps
after a stream's watermark and repeats the earlier ones. What makes that safe
is recorded here, inside the audited entries themselves:

- a w-event `Request` may carry a `StreamClaim`: the range of steps it
  releases (first, last, number of steps), the keyed fingerprint of the
  validated values of those steps, and the watermark the release planned
  against (None for a stream never released);
- `reserve` checks, inside its transaction, that the stream's current
  watermark (over the active ranges of other releases) is the planned one
  and that the claim matches the request's runs, and raises
  `StreamContinuityError` otherwise (nothing is written; another release of
  the stream ran meanwhile: rerun); the claim is written into the reserve
  entry's ``detail`` JSON and its replay signature, so it is part of the hash
  chain (`verify` covers it) and a replay with another claim conflicts;
- `stream_ranges` reads the active ranges back (a reservation closed by an
  operator releases its range).

The fingerprint is an HMAC-SHA256 with the noise key, so the ledger holds no
plain digest of a user's values that could be matched against a guess.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from json.encoder import encode_basestring as _estr  # type: ignore[attr-defined]
from json.encoder import encode_basestring_ascii as _ascii  # type: ignore[attr-defined]
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ledger.entries import canonical_json
from ledger.storage import registered
from mechanisms.cost import StepRun
from schemas.errors import ParameterError

__all__ = ["StreamClaim", "StreamContinuityError", "StreamRange", "check_claims",
           "claim_detail", "claim_json", "claim_problem", "claim_problem_at", "load_ranges",
           "range_fingerprint", "range_fingerprints", "watermarks", "with_claims"]

_FP_CONTEXT = "privpipe stream range v1"


class StreamContinuityError(ParameterError):
    """A claimed stream range does not continue the stream's watermark (exit 2: rerun)."""


@dataclass(frozen=True)
class StreamClaim:
    """What a w-event request releases of its stream, and the watermark it planned against."""

    first_step: int
    last_step: int
    steps: int
    fingerprint: str
    watermark: int | None


@dataclass(frozen=True)
class StreamRange:
    """One range of a stream's steps released (reserved) by one release.

    Read from a reserve entry of the chain (`stream_ranges`), or planned by the
    release that is about to draw it (`tasks.continuation.plan_stream`).

    Attributes:
        release_id: the release that drew it (its noise seed redraws it).
        first_step: first released step.
        last_step: last released step (inclusive).
        steps: number of steps released in [first_step, last_step] (missing
            days leave holes).
        fingerprint: keyed fingerprint of the (step, value) pairs released.
        epsilon_per_step: the exact ε/w each of those steps cost.
        parameters: the canonical parameter JSON its release is bound to in the
            ledger (the entry's ``parameters`` column; None for the range a
            release is planning: its own). With the release id, the user and
            the fingerprint it gives the seed that drew the range
            (`Ledger.noise_seeds`), so a later release redraws it byte for
            byte. Not part of a range's identity (the release binding fixes it).
    """

    release_id: str
    first_step: int
    last_step: int
    steps: int
    fingerprint: str
    epsilon_per_step: Fraction
    parameters: str | None = field(default=None, compare=False)


def range_fingerprint(key: bytes, user_id: str, domain: str, stream_id: str,
                      steps: np.ndarray, values: np.ndarray) -> str:
    """HMAC-SHA256 (noise key) of one stream's (step, value) pairs, as hex.

    The values are the validated, normalised float64 values the mechanism
    sees; any change of a value, of which steps are present, or of the
    domain's value range changes the fingerprint.
    """
    keyed = hmac.new(key, digestmod=hashlib.sha256)
    return _keyed_range(keyed, user_id, domain, stream_id,
                        np.ascontiguousarray(steps, dtype="<i8"),
                        np.ascontiguousarray(values, dtype="<f8"))


def _keyed_range(keyed: hmac.HMAC, user_id: str, domain: str, stream_id: str,
                 steps: np.ndarray, values: np.ndarray) -> str:
    """`range_fingerprint` from `keyed`, an HMAC of the key over no data (copied, not changed).

    `steps` and `values` are contiguous little-endian int64 and float64: their
    buffers are hashed as they are (the bytes `tobytes` would copy).
    """
    mac = keyed.copy()
    mac.update(json.dumps([_FP_CONTEXT, user_id, domain, stream_id, int(steps.size)]).encode())
    mac.update(steps)
    mac.update(values)
    return mac.hexdigest()


def range_fingerprints(key: bytes, domain: str, user_ids: Sequence[str],
                       stream_ids: Sequence[str], steps: np.ndarray, values: np.ndarray,
                       offsets: Sequence[int]) -> list[str]:
    """`range_fingerprint` of each range k: rows offsets[k]:offsets[k + 1], of stream_ids[k].

    Range k belongs to user `user_ids[k]`.

    Raises:
        ParameterError: the lists' lengths, the offsets (from 0, non-decreasing,
            ending at the number of steps) or the steps and values do not agree.
    """
    n = len(user_ids)
    bounds = [int(o) for o in offsets]
    steps = np.ascontiguousarray(steps, dtype="<i8")
    values = np.ascontiguousarray(values, dtype="<f8")
    if (len(stream_ids) != n or len(bounds) != n + 1 or steps.ndim != 1
            or values.shape != steps.shape or bounds[0] != 0 or bounds[-1] != steps.size
            or any(b < a for a, b in zip(bounds, bounds[1:], strict=False))):
        raise ParameterError("range_fingerprints: user_ids and stream_ids must list one "
                             "range each, offsets run from 0 to the number of steps without "
                             "decreasing, and steps and values have one entry per row")
    keyed = hmac.new(key, digestmod=hashlib.sha256)  # the key's pads, hashed once
    return [_keyed_range(keyed, u, domain, s, steps[a:b], values[a:b])
            for u, s, a, b in zip(user_ids, stream_ids, bounds[:-1], bounds[1:], strict=True)]


def claim_detail(claim: StreamClaim) -> dict[str, Any]:
    """The claim as it is stored in the reserve entry's detail."""
    return {"first_step": int(claim.first_step), "last_step": int(claim.last_step),
            "steps": int(claim.steps), "fingerprint": claim.fingerprint,
            "watermark_before": None if claim.watermark is None else int(claim.watermark)}


_CLAIM_KEYS = ("fingerprint", "first_step", "last_step", "steps", "watermark_before")


def claim_json(cd: Any) -> str:
    """Canonical JSON (`ledger.entries.canonical_json`) of a `claim_detail`, written directly.

    Anything else (another key set, a non-int step) goes through the encoder.
    """
    if type(cd) is not dict or tuple(sorted(cd)) != _CLAIM_KEYS or type(
            cd["fingerprint"]) is not str or not all(
            type(cd[k]) is int for k in _CLAIM_KEYS[1:4]) or type(
            cd["watermark_before"]) not in (int, type(None)):
        return canonical_json(cd, "detail")
    wm = cd["watermark_before"]
    return (f'{{"fingerprint":{_estr(cd["fingerprint"])},"first_step":{cd["first_step"]!r},'
            f'"last_step":{cd["last_step"]!r},"steps":{cd["steps"]!r},'
            f'"watermark_before":{"null" if wm is None else repr(wm)}}}')


def _key_table(keys: Sequence[tuple[str, str]]) -> pa.Table:
    """The (user, stream) `keys` as an Arrow table to join the ledger's entries with."""
    return pa.table({"user_id": pa.array([k[0] for k in keys], pa.string()),
                     "stream_id": pa.array([k[1] for k in keys], pa.string())})


def load_ranges(con: duckdb.DuckDBPyConnection, domain: str, keys: Iterable[tuple[str, str]]
                ) -> dict[tuple[str, str], list[StreamRange]]:
    """Active released ranges of the (user, stream) `keys` of `domain`, in entry order.

    A range is active unless an operator closed its reservation (a ``close``
    entry refunds it: those steps were never charged, so never released).
    """
    wanted = sorted(set(keys))
    out: dict[tuple[str, str], list[StreamRange]] = {k: [] for k in wanted}
    if not wanted:
        return out
    with registered(con, "_wm_keys", _key_table(wanted)):
        rows = con.execute(
            "SELECT e.user_id, e.stream_id, e.release_id, e.detail, e.parameters "
            "FROM entries e "
            "JOIN _wm_keys k ON k.user_id = e.user_id AND k.stream_id = e.stream_id "
            "WHERE e.kind = 'reserve' AND e.domain = ? "
            "AND json_extract(e.detail, '$.stream_range') IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM entries c WHERE c.kind = 'close' "
            "  AND c.release_id = e.release_id AND c.user_id = e.user_id "
            "  AND c.step = e.step AND c.stream_id = e.stream_id) "
            "ORDER BY e.seq", [domain]).fetchall()
    for user, stream, rid, detail, params in rows:
        d = json.loads(detail)
        r = d["stream_range"]
        eps = {Fraction(run[2]) for run in d["runs"]}
        out[(user, stream)].append(StreamRange(
            rid, int(r["first_step"]), int(r["last_step"]), int(r["steps"]), r["fingerprint"],
            eps.pop() if len(eps) == 1 else Fraction(-1), params or "{}"))
    return out


def _before_own(ranges: list[StreamRange], release_id: str) -> list[StreamRange]:
    """The ranges recorded before `release_id`'s own (all of them if it has none yet).

    A replay of a release is checked against what the stream held when it was
    first reserved, not against ranges later releases added after it.
    """
    for i, r in enumerate(ranges):
        if r.release_id == release_id:
            return ranges[:i]
    return ranges


def claim_problem(claim: StreamClaim, runs: Sequence[StepRun], ranges: list[StreamRange],
                  release_id: str) -> str | None:
    """Why `claim` cannot be reserved against the stream's active `ranges`, or None.

    Args:
        claim: the request's claim.
        runs: the request's per-step charges (they must lie within the claim).
        ranges: the stream's active ranges (any release), in entry order.
        release_id: the reserving release (its own range is a replay, not history).
    """
    now = max((r.last_step for r in _before_own(ranges, release_id)), default=None)
    return claim_problem_at(claim, runs, now)


def claim_problem_at(claim: StreamClaim, runs: Sequence[StepRun], now: int | None
                     ) -> str | None:
    """Why `claim` cannot be reserved on a stream whose watermark is `now`, or None.

    `now` is the last step of the stream's active ranges recorded before the
    reserving release's own (None: none), see `watermarks`.
    """
    if claim.last_step < claim.first_step or claim.steps < 1:
        return "the claimed range is empty"
    if not runs or min(r.start for r in runs) != claim.first_step or (
            max(r.stop for r in runs) != claim.last_step + 1):
        return "the claimed range does not match the request's runs"
    if sum(r.stop - r.start for r in runs) != claim.steps:
        return "the claimed number of steps does not match the request's runs"
    if now != claim.watermark:
        return (f"the stream's watermark is step {now}, not step {claim.watermark} as the "
                "release planned (another release of the stream ran meanwhile): rerun it")
    if now is not None and claim.first_step != now + 1:
        return (f"the release starts at step {claim.first_step}, not right after the "
                f"watermark (step {now})")
    return None


def watermarks(con: duckdb.DuckDBPyConnection, domain: str, keys: Sequence[tuple[str, str]],
               release_id: str) -> dict[tuple[str, str], int]:
    """The watermark of each (user, stream) of `keys` in `domain` as `release_id` sees it.

    One aggregation in DuckDB over the active ranges (`load_ranges`' rows): the
    largest last step of the ranges recorded before the release's own first
    range (all of them if it has none). A stream without such ranges is absent.
    """
    with registered(con, "_wm_keys", _key_table(keys)):
        rows = con.execute(
            "SELECT user_id, stream_id, max(last_step) FILTER (WHERE own IS NULL OR seq < own) "
            "FROM (SELECT e.user_id, e.stream_id, e.seq, "
            "  CAST(json_extract(e.detail, '$.stream_range.last_step') AS HUGEINT) AS last_step,"
            "  min(CASE WHEN e.release_id = ? THEN e.seq END) "
            "    OVER (PARTITION BY e.user_id, e.stream_id) AS own "
            "  FROM entries e "
            "  JOIN (SELECT DISTINCT user_id, stream_id FROM _wm_keys) k "
            "    ON k.user_id = e.user_id AND k.stream_id = e.stream_id "
            "  WHERE e.kind = 'reserve' AND e.domain = ? "
            "  AND json_extract(e.detail, '$.stream_range') IS NOT NULL "
            "  AND NOT EXISTS (SELECT 1 FROM entries c WHERE c.kind = 'close' "
            "    AND c.release_id = e.release_id AND c.user_id = e.user_id "
            "    AND c.step = e.step AND c.stream_id = e.stream_id)) "
            "GROUP BY user_id, stream_id "
            "HAVING count(*) FILTER (WHERE own IS NULL OR seq < own) > 0",
            [release_id, domain]).fetchall()
    return {(u, s): int(m) for u, s, m in rows}


def check_claims(con: duckdb.DuckDBPyConnection, release_id: str, users: Sequence[str],
                 domains: Sequence[str], streams: Sequence[str], runs: Sequence[Any],
                 claims: Sequence[StreamClaim | None]) -> None:
    """Check every claimed request of a reserve call against the ledger, in request order.

    Raises:
        StreamContinuityError: the first claim that does not continue its stream.
    """
    idx = [i for i, c in enumerate(claims) if c is not None]
    by_domain: dict[str, list[int]] = {}
    for i in idx:
        by_domain.setdefault(domains[i], []).append(i)
    now: dict[tuple[str, str, str], int] = {}
    for dom, items in by_domain.items():
        for (u, s), m in watermarks(con, dom, [(users[i], streams[i]) for i in items],
                                    release_id).items():
            now[(dom, u, s)] = m
    for i in idx:
        problem = claim_problem_at(claims[i], runs[i],  # type: ignore[arg-type]
                                   now.get((domains[i], users[i], streams[i])))
        if problem:
            raise StreamContinuityError(
                f"user {users[i]!r}, stream {streams[i]!r} of domain {domains[i]!r}: {problem}")


def with_claims(details: list[dict[str, Any]], signatures: list[str],
                claims: Sequence[StreamClaim | None]) -> tuple[list[dict[str, Any]], list[str]]:
    """Entry details and replay signatures with each request's claim added (new objects)."""
    if not any(c is not None for c in claims):
        return details, signatures
    new_d, new_s = list(details), list(signatures)
    for i, c in enumerate(claims):
        if c is not None:
            cd = claim_detail(c)
            new_d[i] = {**details[i], "stream_range": cd}
            new_s[i] = _signature(signatures[i], cd)
    return new_d, new_s


def _signature(signature: str, cd: dict[str, Any]) -> str:
    """``json.dumps([signature, cd], sort_keys=True)`` of a `claim_detail`, written directly.

    The default separators and ASCII escapes of `json.dumps`; the claim's keys
    in sorted order and its steps as the ints `claim_detail` made of them.
    """
    wm = cd["watermark_before"]
    return (f'[{_ascii(signature)}, {{"fingerprint": {_ascii(cd["fingerprint"])}, '
            f'"first_step": {cd["first_step"]!r}, "last_step": {cd["last_step"]!r}, '
            f'"steps": {cd["steps"]!r}, "watermark_before": {"null" if wm is None else repr(wm)}'
            "}]")
