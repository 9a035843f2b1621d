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
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from prefect import task

from ledger import Request, StreamClaim
from ledger.remote import open_ledger
from ledger.watermark import StreamRange
from mechanisms.cost import StepRun
from schemas.errors import PrivpipeError
from tasks.keyed_rng import release_generator
from tasks.plan_fingerprints import Fingerprints, chunk_fingerprints, prior_ranges
from tasks.stage import SeededSegment


class ContinuationError(PrivpipeError):
    """A stream's input does not continue what was released for it (the user is rejected).

    ``rule`` is one of `CONTINUATION_RULES`.
    """

    def __init__(self, message: str, rule: str):
        super().__init__(message)
        self.rule = rule


@dataclass(frozen=True)
class Segment:
    """A part of a stream's output: a range to redraw (earlier) or to draw and charge (new).

    ``fingerprint`` (the range's keyed fingerprint, as the chain records it)
    and ``parameters`` (its release's bound parameter JSON; None for this
    release) are what its noise seed is derived from (`seeded_segments`); a
    segment's identity is its release and range.
    """

    release_id: str
    first_step: int
    last_step: int
    new: bool
    fingerprint: str = field(default="", compare=False)
    parameters: str | None = field(default=None, compare=False)


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
    new_range: StreamRange | None


Fingerprint = Callable[[np.ndarray, np.ndarray], str]


def _check_earlier(steps: np.ndarray, values: np.ndarray, prior: list[StreamRange],
                   per_step: Fraction, fingerprint: Fingerprint
                   ) -> tuple[list[Segment], np.ndarray]:
    segments: list[Segment] = []
    covered = np.zeros(steps.size, dtype=bool)
    for r in prior:
        if r.epsilon_per_step != per_step:
            raise ContinuationError(
                f"steps {r.first_step}-{r.last_step} were released at ε/w = {r.epsilon_per_step} "
                f"(release {r.release_id!r}); this release asks ε/w = {per_step}: continue a "
                "stream with the ε it was released with", "stream_other_epsilon")
        sel = (steps >= r.first_step) & (steps <= r.last_step)
        if not sel.any():
            continue  # the input does not repeat this range (e.g. a file of the new day only)
        if int(sel.sum()) != r.steps or fingerprint(steps[sel], values[sel]) != r.fingerprint:
            raise ContinuationError(
                f"steps {r.first_step}-{r.last_step} differ from what release {r.release_id!r} "
                "released (values, or which steps are present): a changed history cannot be "
                "released again", "stream_changed_history")
        covered |= sel
        segments.append(Segment(r.release_id, r.first_step, r.last_step, new=False,
                                fingerprint=r.fingerprint, parameters=r.parameters))
    return segments, covered


def plan_stream(steps: np.ndarray, values: np.ndarray, history: list[StreamRange], *,
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
    own, prior, watermark = prior_ranges(history, release_id)
    segments, covered = _check_earlier(steps, values, prior, per_step, fingerprint)
    old = np.zeros(steps.size, dtype=bool) if watermark is None else steps <= watermark
    stray = old & ~covered
    if stray.any():
        raise ContinuationError(
            f"step {int(steps[stray][0])} is before the stream's watermark (step {watermark}, "
            "the last one released) but was never released: earlier steps cannot be added",
            "stream_step_before_watermark")
    new = ~old
    new_range = None
    if new.any():
        first, last = int(steps[new][0]), int(steps[new][-1])
        if watermark is not None and first != watermark + 1:
            raise ContinuationError(
                f"the stream was released up to step {watermark}; this input continues at step "
                f"{first}: steps {watermark + 1}-{first - 1} are missing (a gap after the "
                "watermark)", "stream_gap_after_watermark")
        new_range = StreamRange(release_id, first, last, int(new.sum()),
                                  fingerprint(steps[new], values[new]), per_step)
        segments.append(Segment(release_id, first, last, new=True,
                                fingerprint=new_range.fingerprint))
    if own and (new_range is None or own[0] != new_range):
        raise ContinuationError(
            f"release {release_id!r} already released steps {own[0].first_step}-"
            f"{own[0].last_step} of this stream from other data: a rerun must repeat the same "
            "release exactly", "stream_rerun_other_data")
    return StreamPlan(tuple(segments), watermark, new_range)


def stream_rng(seed: int, stream_id: str) -> np.random.Generator:
    """The noise generator of one segment of a (user, stream): ChaCha20 under a per-stream key.

    The key is HMAC-SHA256(seed, stream id) of the segment's noise seed
    (`Ledger.noise_seeds` over the range's keyed fingerprint, see
    `seeded_segments`), a pseudorandom function of the secret seed: the
    keystreams of two streams are unrelated, and a stream's draws reveal
    nothing about another's (`tasks.keyed_rng`). Each range is drawn from a
    fresh generator, so an earlier range is redrawn exactly by the seed of the
    release that drew it.
    """
    return release_generator(stream_key(seed, stream_id))


def stream_key(seed: int, stream_id: str) -> int:
    """The ChaCha20 key of a (segment seed, stream): HMAC-SHA256(seed, stream id).

    See `stream_rng`; `tasks.stream_draw` re-keys one generator with it per segment.
    """
    mac = hmac.new(seed.to_bytes(32, "big"), b"privpipe stream v1\x00" + stream_id.encode(),
                   hashlib.sha256)
    return int.from_bytes(mac.digest(), "big")


@dataclass
class ReleasePlan:
    """The continuation plan of one stream release (what the flow reserves and draws).

    Attributes:
        requests: one w-event request per stream with new steps (new steps only),
            each carrying its `ledger.StreamClaim`.
        rejected: users whose input does not continue their streams, with reasons.
        unchanged: users with nothing new (their output only repeats earlier ranges).
        plans: chunk index -> user -> stream -> `StreamPlan` (rejected users absent).
    """

    requests: list[Any]
    rejected: list[dict[str, Any]]
    unchanged: set[str]
    plans: dict[int, dict[str, dict[str, StreamPlan]]]


#: (user, stream) keys per ledger read of released ranges (bounds the history in memory)
HISTORY_KEYS = 50_000


def _first_plan(release_id: str, steps: np.ndarray, per_step: Fraction,
                fingerprint: str) -> StreamPlan:
    """`plan_stream` of a stream the ledger never released: every step is new.

    What `plan_stream` plans for an empty history (no watermark, nothing to
    repeat): one new range over the whole stream, or nothing for no step.
    """
    if steps.size == 0:
        return StreamPlan((), None, None)
    first, last = int(steps[0]), int(steps[-1])
    new_range = StreamRange(release_id, first, last, int(steps.size), fingerprint, per_step)
    return StreamPlan((Segment(release_id, first, last, new=True, fingerprint=fingerprint),),
                      None, new_range)


def chunk_runs(steps: np.ndarray, offsets: np.ndarray) -> list[list[tuple[int, int]]]:
    """`contiguous_ranges` of each stream of a staged chunk, all streams in one pass.

    Stream k is ``steps[offsets[k]:offsets[k + 1]]``; a run ends where the next
    step is not one more, or where the stream ends.
    """
    n = steps.size
    cut = np.zeros(n + 1, dtype=bool)
    if n > 1:
        cut[1:n] = np.diff(steps) != 1
    cut[offsets] = True
    bounds = np.flatnonzero(cut)
    starts, stops = bounds[:-1], bounds[1:]
    a = steps[starts].tolist()
    b = (steps[stops - 1] + 1).tolist() if starts.size else []
    at = np.searchsorted(starts, offsets).tolist()
    return [list(zip(a[i:j], b[i:j], strict=True)) for i, j in zip(at[:-1], at[1:], strict=True)]


@dataclass
class _Chunk:
    """A staged stream chunk as arrays: its items, then (`load`) its steps and values."""

    index: int
    path: str
    users: list[str]
    streams: list[str]
    offsets: list[int]
    steps: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    values: np.ndarray = field(default_factory=lambda: np.empty(0))

    @classmethod
    def read(cls, chunk: Any) -> _Chunk:
        """The chunk's items only: who holds which rows (its samples are not touched)."""
        from files.staging import read_chunk

        items, _ = read_chunk(chunk.path, "stream_id")
        return cls(chunk.index, chunk.path, items.user_ids, items.keys, items.offsets.tolist())

    def load(self) -> None:
        """Map the chunk's samples (`files.staging.read_chunk`), checked against its items."""
        from files.staging import read_chunk

        _, table = read_chunk(self.path, "stream_id")
        self.steps = table.column("step").to_numpy()
        self.values = table.column("value").to_numpy()

    def unload(self) -> None:
        """Drop the mapped samples (a group's chunks are never all mapped at once)."""
        self.steps, self.values = np.empty(0, np.int64), np.empty(0)

    def by_user(self) -> list[tuple[str, list[int]]]:
        """Each user with its items' positions (a user's items are consecutive)."""
        out: list[tuple[str, list[int]]] = []
        for k, user in enumerate(self.users):
            if out and out[-1][0] == user:
                out[-1][1].append(k)
            else:
                out.append((user, [k]))
        return out


def _user_plans(fingerprints: list[Fingerprints], release_id: str, per_step: Fraction,
                user: str, items: list[int], chunk: _Chunk,
                history: dict[tuple[str, str], list[StreamRange]]) -> dict[str, StreamPlan]:
    """The plans of one user's streams; a stream without released ranges takes `_first_plan`.

    `fingerprints[k]` holds stream k's range fingerprints (`chunk_fingerprints`).
    """
    out = {}
    for k in items:
        sid = chunk.streams[k]
        steps = chunk.steps[chunk.offsets[k]:chunk.offsets[k + 1]]
        values = chunk.values[chunk.offsets[k]:chunk.offsets[k + 1]]
        fingerprint = fingerprints[k]
        ranges = history.get((user, sid), [])
        if not ranges:
            out[sid] = _first_plan(release_id, steps, per_step,
                                   fingerprint(steps, values) if steps.size else "")
            continue
        try:
            out[sid] = plan_stream(steps, values, ranges, release_id=release_id,
                                   per_step=per_step, fingerprint=fingerprint)
        except ContinuationError as err:
            raise ContinuationError(f"stream {sid!r}: {err}", err.rule) from None
    return out


def _requests(user: str, items: list[int], chunk: _Chunk, runs: list[list[tuple[int, int]]],
              domain: str, plans: dict[str, StreamPlan], per_step: Fraction) -> list[Any]:
    """The w-event requests of one user's new ranges (new steps only), with their claims."""
    position = {chunk.streams[k]: k for k in items}
    out = []
    for sid, p in sorted(plans.items()):
        r = p.new_range
        if r is None:
            continue
        k = position[sid]
        if p.watermark is None:  # every step is new: the runs of the whole stream
            stream_runs = tuple(StepRun(a, b, per_step) for a, b in runs[k])
        else:
            from tasks.stream_draw import step_runs  # (it imports this module)

            steps = chunk.steps[chunk.offsets[k]:chunk.offsets[k + 1]]
            stream_runs = step_runs(steps[steps >= r.first_step], per_step)
        out.append(Request(
            user_id=user, domain=domain, step=f"stream:{sid}", notion="wevent",
            stream_id=sid, runs=stream_runs,
            stream_claim=StreamClaim(r.first_step, r.last_step, r.steps, r.fingerprint,
                                     p.watermark)))
    return out


def _key_batches(chunks: list[_Chunk]) -> list[list[_Chunk]]:
    """Consecutive chunks of at most HISTORY_KEYS streams (one chunk at least)."""
    out: list[list[_Chunk]] = []
    keys = 0
    for c in chunks:
        if not out or keys + len(c.streams) > HISTORY_KEYS:
            out.append([])
            keys = 0
        out[-1].append(c)
        keys += len(c.streams)
    return out


def _plan_chunk(led: Any, domain: str, release_id: str, per_step: Fraction, chunk: _Chunk,
                history: dict[tuple[str, str], list[StreamRange]], out: ReleasePlan) -> None:
    """Plan one chunk's users into `out` (requests, rejected, unchanged, plans)."""
    runs = chunk_runs(chunk.steps, np.asarray(chunk.offsets, dtype=np.int64))
    fingerprints = chunk_fingerprints(led, domain, release_id, chunk.users, chunk.streams,
                                      chunk.steps, chunk.values, chunk.offsets, history)
    chunk_plans: dict[str, dict[str, StreamPlan]] = {}
    for user, items in chunk.by_user():
        try:
            plans = _user_plans(fingerprints, release_id, per_step, user, items, chunk, history)
        except ContinuationError as err:
            out.rejected.append({"user_id": user, "reasons": [str(err)], "rules": [err.rule]})
            continue
        chunk_plans[user] = plans
        news = _requests(user, items, chunk, runs, domain, plans, per_step)
        if not news:
            out.unchanged.add(user)
        out.requests.extend(news)
    out.plans[chunk.index] = chunk_plans


def plan_release_fn(ledger_path: str, release_id: str, domain: str, plan: Any,
                    per_step: Fraction, chunks: Any = None) -> ReleasePlan:
    """Plan the staged streams against the ledger's released ranges (flow process only).

    Plans the streams of `chunks` (staged chunks of `plan`; all of them by
    default). Users are independent: each user's plan reads only that user's
    released ranges, so chunks planned apart plan what they plan together.

    Privacy: reads the staged (validated) values to fingerprint them with the
    noise key (`Ledger.range_fingerprint`); nothing is drawn and nothing leaves
    but ledger requests, step ranges and release ids. A rejected user gets no
    request and no output, so nothing is charged for it. Cost: one ledger read
    (a join of the streams' keys with the released ranges) per HISTORY_KEYS
    streams, one HMAC pass over each stream's values (asked of the ledger a
    few calls per chunk, `tasks.plan_fingerprints`), and the step runs of a
    chunk in one numpy pass; a stream the ledger never released skips the
    checks of earlier ranges (`_first_plan`: what `plan_stream` plans for it).
    """
    led = open_ledger(ledger_path)
    out = ReleasePlan([], [], set(), {})
    staged = [_Chunk.read(c) for c in (plan.chunks if chunks is None else chunks)]
    for batch in _key_batches(staged):
        history = led.stream_ranges(domain, [key for c in batch
                                             for key in zip(c.users, c.streams, strict=True)])
        for chunk in batch:
            chunk.load()
            _plan_chunk(led, domain, release_id, per_step, chunk, history, out)
            chunk.unload()
    return out


def seeded_segments(ledger: Any, release_id: str, parameters: dict[str, Any],
                    plans: dict[str, dict[str, StreamPlan]], users: Any
                    ) -> dict[tuple[str, str], tuple[SeededSegment, ...]]:
    """Each (user, stream)'s output segments with their noise seeds, for `users` (flow only).

    A segment's seed is ``Ledger.noise_seeds(release, [user], [fingerprint],
    parameters)`` of the release that charged it: for this release's new range
    its id, the new range's keyed fingerprint and this release's `parameters`;
    for an earlier range that release's id, the range's keyed fingerprint as
    recorded in the chain (its reserve entry's ``stream_range``) and the
    parameters that release is bound to in the ledger. So an earlier range is
    redrawn with exactly the seed it was drawn with (the same bytes, charged
    once), and a range of other values never gets the same noise. Seeds stay
    in memory (they travel to the task in its `StreamChunk`, never to disk).
    Cost: one `noise_seeds` call per (release, parameters) and per stream rank
    of a user (`_seed_batches`), not one per segment: the same seeds.

    Raises:
        LedgerIntegrityError: the noise key does not match the ledger.
    """
    layout: dict[tuple[str, str], tuple[Segment, ...]] = {}
    asks: dict[tuple[str, str | None], list[tuple[str, str, int, str]]] = {}
    for user in users:
        for sid, p in plans[user].items():
            layout[(user, sid)] = p.segments
            for i, g in enumerate(p.segments):
                key = (g.release_id, None if g.new else (g.parameters or "{}"))
                asks.setdefault(key, []).append((user, sid, i, g.fingerprint))
    seeds: dict[tuple[str, str, int], int] = {}
    for (rid, bound), items in asks.items():
        params = parameters if bound is None else json.loads(bound)
        for batch in _seed_batches(items):
            got = ledger.noise_seeds(rid, [a[0] for a in batch], [a[3] for a in batch], params)
            seeds.update(((u, sid, i), got[u]) for u, sid, i, _ in batch)
    return {key: tuple(SeededSegment(g.first_step, g.last_step, g.new, seeds[(*key, i)])
                       for i, g in enumerate(segs)) for key, segs in layout.items()}


def _seed_batches(items: list[tuple[str, str, int, str]]) -> list[list[tuple[str, str, int, str]]]:
    """The asks split so that no user appears twice in a batch (seeds come keyed by user).

    A user's k-th ask goes to batch k: one batch when every user has one stream.
    """
    batches: list[list[tuple[str, str, int, str]]] = []
    seen: dict[str, int] = {}
    for item in items:
        k = seen.get(item[0], 0)
        seen[item[0]] = k + 1
        if k == len(batches):
            batches.append([])
        batches[k].append(item)
    return batches


def _range_record(r: StreamRange) -> list[Any]:
    return [r.release_id, r.first_step, r.last_step, r.steps, r.fingerprint,
            str(r.epsilon_per_step), r.parameters]


def write_chunk_plans(path: Path, plans: dict[str, dict[str, StreamPlan]]) -> None:
    """Write one chunk's stream plans (user -> stream -> plan) as JSON, mode 0600.

    For the release's private staging directory: between the reserve and the
    chunk's task the plans wait on disk, not in memory (a release's memory must
    not grow with its users). What is written is public or keyed: step ranges,
    release ids, keyed fingerprints, ε/w and release parameters; no value.
    """
    from files.safe_files import NewFile, disk_errors

    doc = {user: {sid: {"segments": [[g.release_id, g.first_step, g.last_step, g.new,
                                      g.fingerprint, g.parameters] for g in p.segments],
                        "watermark": p.watermark,
                        "new_range": None if p.new_range is None else _range_record(p.new_range)}
                  for sid, p in streams.items()}
           for user, streams in plans.items()}
    new = NewFile(path, durable=False)
    try:
        with disk_errors(path):
            new.file.write(json.dumps(doc, separators=(",", ":")).encode())
    except BaseException:
        new.abort()
        raise
    new.commit()


def read_chunk_plans(path: Path) -> dict[str, dict[str, StreamPlan]]:
    """Read what `write_chunk_plans` wrote: the same plans (equal dataclasses)."""
    doc = json.loads(Path(path).read_bytes())
    out: dict[str, dict[str, StreamPlan]] = {}
    for user, streams in doc.items():
        out[user] = {}
        for sid, p in streams.items():
            r = p["new_range"]
            new_range = None if r is None else StreamRange(
                r[0], int(r[1]), int(r[2]), int(r[3]), r[4], Fraction(r[5]), r[6])
            segments = tuple(Segment(g[0], int(g[1]), int(g[2]), bool(g[3]), fingerprint=g[4],
                                     parameters=g[5]) for g in p["segments"])
            out[user][sid] = StreamPlan(segments, p["watermark"], new_range)
    return out


plan_release = task(plan_release_fn, name="plan-stream-continuation", persist_result=False)
