"""Planning an incremental stream release against the ledger's released ranges."""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction

import numpy as np
import pytest

from ledger.watermark import StreamRange
from tasks.continuation import (
    ContinuationError,
    Segment,
    plan_stream,
    read_chunk_plans,
    seeded_segments,
    stream_rng,
    write_chunk_plans,
)

EPS = Fraction(1, 5)


def fp(steps, values):
    """A stand-in for the ledger's keyed fingerprint (any injective digest will do here)."""
    return hashlib.sha256(np.asarray(steps, np.int64).tobytes()
                          + np.asarray(values, np.float64).tobytes()).hexdigest()


def _day(k, values=None):
    steps = np.arange(48 * k, 48 * (k + 1))
    vals = np.linspace(0, 1, 48) if values is None else values
    return steps, vals


def _released(rid, steps, vals, eps=EPS):
    return StreamRange(rid, int(steps[0]), int(steps[-1]), int(steps.size), fp(steps, vals),
                         eps)


def _plan(steps, vals, history, rid="r2", eps=EPS):
    return plan_stream(steps, vals, history, release_id=rid, per_step=eps, fingerprint=fp)


def test_first_release_charges_everything():
    s, v = _day(0)
    plan = _plan(s, v, [], rid="r1")
    assert plan.watermark is None
    assert plan.segments == (Segment("r1", 0, 47, True),)
    assert plan.new_range == _released("r1", s, v)


def test_growing_file_repeats_day_one_and_charges_day_two_only():
    s1, v1 = _day(0)
    s2, v2 = _day(1)
    history = [_released("r1", s1, v1)]
    plan = _plan(np.concatenate([s1, s2]), np.concatenate([v1, v2]), history)
    assert plan.watermark == 47
    assert plan.segments == (Segment("r1", 0, 47, False), Segment("r2", 48, 95, True))
    assert plan.new_range == _released("r2", s2, v2)
    # a file of the new day only is the same release of day two
    only = _plan(s2, v2, history)
    assert only.segments == (Segment("r2", 48, 95, True),) and only.new_range == plan.new_range


def test_nothing_new_charges_nothing():
    s1, v1 = _day(0)
    plan = _plan(s1, v1, [_released("r1", s1, v1)])
    assert plan.new_range is None and plan.segments == (Segment("r1", 0, 47, False),)


def test_a_changed_past_value_is_rejected_with_the_reason():
    s1, v1 = _day(0)
    s2, v2 = _day(1)
    changed = v1.copy()
    changed[10] += 1e-9
    with pytest.raises(ContinuationError, match="changed history cannot be released again"):
        _plan(np.concatenate([s1, s2]), np.concatenate([changed, v2]), [_released("r1", s1, v1)])
    # a step dropped from the released range is a change too
    with pytest.raises(ContinuationError, match="differ from what release 'r1' released"):
        _plan(np.concatenate([s1[1:], s2]), np.concatenate([v1[1:], v2]),
              [_released("r1", s1, v1)])


def test_a_gap_after_the_watermark_is_an_error():
    s1, v1 = _day(0)
    s3, v3 = _day(2)
    with pytest.raises(ContinuationError, match=r"steps 48-95 are missing \(a gap"):
        _plan(np.concatenate([s1, s3]), np.concatenate([v1, v3]), [_released("r1", s1, v1)])


def test_a_step_before_the_watermark_that_was_never_released_is_an_error():
    s2, v2 = _day(1)
    history = [_released("r1", s2, v2)]  # the stream started at step 48
    early = np.concatenate([[40], s2])
    with pytest.raises(ContinuationError, match="step 40 is before the stream's watermark"):
        _plan(early, np.concatenate([[0.5], v2]), history)


def test_another_epsilon_cannot_continue_the_stream():
    s1, v1 = _day(0)
    s2, v2 = _day(1)
    with pytest.raises(ContinuationError, match="released at ε/w = 1/5"):
        _plan(np.concatenate([s1, s2]), np.concatenate([v1, v2]), [_released("r1", s1, v1)],
              eps=Fraction(2, 5))


def test_a_rerun_plans_what_it_planned_and_refuses_other_data():
    s1, v1 = _day(0)
    s2, v2 = _day(1)
    history = [_released("r1", s1, v1), _released("r2", s2, v2)]
    both = (np.concatenate([s1, s2]), np.concatenate([v1, v2]))
    plan = _plan(*both, history)  # r2 is this release: its own range is not the watermark
    assert plan.watermark == 47
    assert plan.segments == (Segment("r1", 0, 47, False), Segment("r2", 48, 95, True))
    other = v2.copy()
    other[0] = 0.25
    with pytest.raises(ContinuationError, match="a rerun must repeat the same release"):
        _plan(np.concatenate([s1, s2]), np.concatenate([v1, other]), history)


def test_missing_days_inside_a_range_are_part_of_its_fingerprint():
    steps = np.concatenate([np.arange(0, 48), np.arange(96, 144)])  # day 2 missing
    vals = np.full(96, 0.3)
    history = [_released("r1", steps, vals)]
    s4, v4 = _day(3)
    plan = _plan(np.concatenate([steps, s4]), np.concatenate([vals, v4]), history)
    assert plan.watermark == 143 and plan.new_range.first_step == 144
    # filling the missing day later is adding steps before the watermark
    with pytest.raises(ContinuationError, match="differ from what release"):
        _plan(np.arange(0, 144), np.full(144, 0.3), history)


def test_stream_rng_redraws_a_range_and_separates_streams():
    a = stream_rng(12345, "load").random(5)
    np.testing.assert_array_equal(a, stream_rng(12345, "load").random(5))
    assert not np.array_equal(a, stream_rng(12345, "gas").random(5))
    assert not np.array_equal(a, stream_rng(12346, "load").random(5))


class _SeedLog:
    """Records what `seeded_segments` asks the ledger for (seed = a digest of the call)."""

    def __init__(self):
        self.calls = []

    def noise_seeds(self, release_id, users, fingerprints, parameters):
        self.calls.append((release_id, tuple(users), tuple(fingerprints), parameters))
        key = json.dumps([release_id, users, fingerprints, parameters], sort_keys=True)
        return {users[0]: int(hashlib.sha256(key.encode()).hexdigest(), 16)}


def test_seeded_segments_redraw_an_earlier_range_with_its_own_release_seed():
    s1, v1 = _day(0)
    s2, v2 = _day(1)
    earlier = StreamRange("r1", 0, 47, 48, fp(s1, v1), EPS, parameters='{"epsilon":"1"}')
    plan = _plan(np.concatenate([s1, s2]), np.concatenate([v1, v2]), [earlier])
    log = _SeedLog()
    segs = seeded_segments(log, "r2", {"epsilon": "1", "reconstruct": "none"},
                           {"u": {"load": plan}}, ["u"])[("u", "load")]
    assert log.calls == [
        # the earlier range: its release, its fingerprint as recorded, its bound parameters
        ("r1", ("u",), (fp(s1, v1),), {"epsilon": "1"}),
        # the new range: this release, the new range's fingerprint, this release's parameters
        ("r2", ("u",), (fp(s2, v2),), {"epsilon": "1", "reconstruct": "none"})]
    assert [(g.first_step, g.last_step, g.new) for g in segs] == [(0, 47, False), (48, 95, True)]
    # the day-1 segment's seed is the one release r1 drew its new range with
    first = seeded_segments(_SeedLog(), "r1", {"epsilon": "1"},
                            {"u": {"load": _plan(s1, v1, [], rid="r1")}}, ["u"])[("u", "load")]
    assert first[0].seed == segs[0].seed and segs[1].seed != segs[0].seed


def test_chunk_plans_wait_on_disk_unchanged(tmp_path):
    # the plans a release writes between its reserve and a chunk's task read back as they
    # were, every field (fingerprints and parameters too, which equality ignores), 0600
    from dataclasses import astuple

    s1, v1 = _day(0)
    s2, v2 = _day(1)
    earlier = StreamRange("r1", 0, 47, 48, fp(s1, v1), EPS, parameters='{"epsilon": "1"}')
    plans = {"u1": {"s0": _plan(np.concatenate([s1, s2]), np.concatenate([v1, v2]), [earlier]),
                    "s1": _plan(s1, v1, [], rid="r2", eps=Fraction(1, 3))},
             "u2": {"s0": _plan(s1, v1, [_released("r2", s1, v1)])}}  # a rerun: nothing new
    path = tmp_path / "plans-00003.json"
    write_chunk_plans(path, plans)
    assert path.stat().st_mode & 0o777 == 0o600
    back = read_chunk_plans(path)
    assert back.keys() == plans.keys()
    for user, streams in plans.items():
        assert back[user].keys() == streams.keys()
        for sid, plan in streams.items():
            got = back[user][sid]
            assert [astuple(g) for g in got.segments] == [astuple(g) for g in plan.segments]
            assert got.watermark == plan.watermark
            assert (got.new_range is None) == (plan.new_range is None)
            if plan.new_range is not None:
                assert astuple(got.new_range) == astuple(plan.new_range)
    assert back["u1"]["s0"].segments[0].parameters == '{"epsilon": "1"}'


class _FakeLedger:
    """The ledger calls `plan_release_fn` makes: released ranges and keyed fingerprints."""

    def __init__(self, ranges):
        self.ranges, self.reads = ranges, 0

    def stream_ranges(self, domain, keys):
        self.reads += 1
        return {k: list(self.ranges.get(k, [])) for k in keys}

    def range_fingerprint(self, user, domain, sid, steps, values):
        return fp(steps, values) + f":{user}:{sid}"

    def range_fingerprints(self, domain, users, sids, steps, values, offsets):
        self.fingerprint_calls = getattr(self, "fingerprint_calls", 0) + 1
        return [self.range_fingerprint(u, domain, s, steps[a:b], values[a:b])
                for u, s, a, b in zip(users, sids, offsets[:-1], offsets[1:], strict=True)]


def _reference(users, ranges, rid):
    """Each stream planned alone by `plan_stream` (the pre-vectorised planner's loop)."""
    from ledger import Request, StreamClaim
    from tasks.stream_draw import step_runs

    requests, rejected, plans = [], [], {}
    for u in users:
        try:
            mine = {s.stream_id: plan_stream(
                s.steps, s.values, ranges.get((u.user_id, s.stream_id), []), release_id=rid,
                per_step=EPS, fingerprint=lambda st, v, s=s, u=u: fp(st, v) +
                f":{u.user_id}:{s.stream_id}") for s in u.streams}
        except ContinuationError as err:
            rejected.append((u.user_id, err.rule))
            continue
        plans[u.user_id] = mine
        for sid, p in sorted(mine.items()):
            steps = next(s.steps for s in u.streams if s.stream_id == sid)
            if p.new_range is not None:
                r = p.new_range
                requests.append(Request(
                    user_id=u.user_id, domain="d", step=f"stream:{sid}", notion="wevent",
                    stream_id=sid, runs=step_runs(steps[steps >= r.first_step], EPS),
                    stream_claim=StreamClaim(r.first_step, r.last_step, r.steps, r.fingerprint,
                                             p.watermark)))
    return requests, rejected, plans


@pytest.mark.parametrize("history_keys", [50_000, 1])
def test_the_chunk_planner_plans_what_plan_stream_plans_stream_by_stream(
        tmp_path, monkeypatch, history_keys):
    # first releases (with holes: several step runs), continued streams, a changed
    # history (rejected), a rerun, across two chunks: the same requests, plans and
    # rejections as planning each stream alone; one ledger read per HISTORY_KEYS keys
    from files.staging import StagedChunk, stage_stream_chunk
    from ingest import Stream, UserStreams
    from tasks import continuation as C

    d0, d1 = _day(0), _day(1)
    both = (np.concatenate([d0[0], d1[0]]), np.concatenate([d0[1], d1[1]]))
    holes = (np.array([3, 4, 5, 9, 12, 13]), np.linspace(0, 1, 6))
    users = [UserStreams("a", [Stream("s1", *holes), Stream("s2", *d0)], ""),
             UserStreams("b", [Stream("s1", *both)], ""),
             UserStreams("c", [Stream("s1", both[0], both[1][::-1].copy())], ""),
             UserStreams("d", [Stream("s0", *d0), Stream("s1", *both)], ""),
             UserStreams("e", [Stream("s1", *d0)], ""),
             UserStreams("f", [Stream("s1", *both)], "")]
    ranges = {("b", "s1"): [_released("r1", *d0)], ("c", "s1"): [_released("r1", *d0)],
              ("d", "s1"): [_released("r1", *d0)], ("e", "s1"): [_released("r1", *d0)],
              ("f", "s1"): [_released("r1", *d0), _released("r2", *d1)]}
    ranges = {k: [StreamRange(r.release_id, r.first_step, r.last_step, r.steps,
                              r.fingerprint + f":{k[0]}:{k[1]}", r.epsilon_per_step)
                  for r in v] for k, v in ranges.items()}
    chunks = []
    for i, part in enumerate((users[:2], users[2:])):
        path = tmp_path / f"chunk-{i:05d}.arrow"
        stage_stream_chunk(part, path)
        chunks.append(StagedChunk(i, str(path), tuple(u.user_id for u in part)))
    led = _FakeLedger(ranges)
    monkeypatch.setattr(C, "open_ledger", lambda path: led)
    monkeypatch.setattr(C, "HISTORY_KEYS", history_keys)
    got = C.plan_release_fn("ledger", "r2", "d", type("P", (), {"chunks": chunks})(), EPS)
    requests, rejected, plans = _reference(users, ranges, "r2")
    assert got.requests == requests
    assert [r.runs for r in got.requests][0] == step_runs_of([(3, 6), (9, 10), (12, 14)])
    assert [(r["user_id"], r["rules"][0]) for r in got.rejected] == rejected == [
        ("c", "stream_changed_history")]
    assert got.unchanged == {"e"}
    assert {u: p for c in got.plans.values() for u, p in c.items()} == plans
    assert plans["f"]["s1"].new_range.release_id == "r2"  # the rerun's own range
    assert led.reads == (1 if history_keys > 10 else 2)  # at least a chunk per read


def step_runs_of(pairs):
    """StepRuns of [a, b) pairs at EPS each."""
    from mechanisms.cost import StepRun

    return tuple(StepRun(a, b, EPS) for a, b in pairs)


def test_chunk_runs_are_contiguous_ranges_stream_by_stream():
    from tasks.continuation import chunk_runs
    from tasks.stage import contiguous_ranges

    rng = np.random.default_rng(7)
    for _ in range(200):
        lengths = rng.integers(0, 6, rng.integers(1, 6))
        streams = [np.sort(rng.choice(12, n, replace=False)).astype(np.int64) for n in lengths]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        steps = np.concatenate(streams) if streams else np.empty(0, np.int64)
        assert chunk_runs(steps, offsets) == [contiguous_ranges(s) for s in streams]


def test_seeds_asked_in_batches_are_the_seeds_asked_one_segment_at_a_time():
    # one noise_seeds call per (release, parameters) and stream rank: users with two
    # streams, earlier ranges of two releases bound to other parameters, new ranges
    from ledger.keys import noise_seed
    from ledger.ledger import parameters_digest

    class Keyed:
        def __init__(self):
            self.calls = 0

        def noise_seeds(self, rid, users, fps, params):
            self.calls += 1
            assert len(set(users)) == len(users)  # seeds come back keyed by user
            return {u: noise_seed(b"k" * 32, rid, u, f, parameters_digest(params))
                    for u, f in zip(users, fps, strict=True)}

    plans = {}
    for n, u in enumerate(["a", "b", "c"]):
        d0, d1 = _day(0, np.linspace(0, 1, 48) / (n + 1)), _day(1)
        both = (np.concatenate([d0[0], d1[0]]), np.concatenate([d0[1], d1[1]]))
        rid = "r0" if n == 0 else "r1"
        bound = '{"epsilon":"1"}' if n < 2 else '{"epsilon":"2"}'
        earlier = StreamRange(rid, 0, 47, 48, fp(*d0), EPS, parameters=bound)
        plans[u] = {"s1": _plan(*both, [earlier]), "s2": _plan(*d1, [], rid="r2")}
    params = {"epsilon": "1", "reconstruct": "none"}
    led = Keyed()
    got = seeded_segments(led, "r2", params, plans, ["a", "b", "c"])
    want = {}
    for u, streams in plans.items():
        for sid, p in streams.items():
            want[(u, sid)] = tuple(
                (g.first_step, g.last_step, g.new, Keyed().noise_seeds(
                    g.release_id, [u], [g.fingerprint],
                    params if g.new else json.loads(g.parameters))[u]) for g in p.segments)
    assert {k: tuple((g.first_step, g.last_step, g.new, g.seed) for g in v)
            for k, v in got.items()} == want
    assert list(got) == list(want)
    # r0 {"epsilon":"1"}, r1 {"epsilon":"1"}, r1 {"epsilon":"2"}, r2 new ranges of two ranks
    assert led.calls == 5


def test_a_group_maps_one_chunk_of_samples_at_a_time(tmp_path, monkeypatch):
    # memory: a group of chunks shares one ledger read, but its samples are mapped
    # chunk by chunk (all of a 5x10^4-stream group at once had peaked at 1.1 GB)
    from files.staging import StagedChunk, stage_stream_chunk
    from ingest import Stream, UserStreams
    from tasks import continuation as C

    chunks = []
    for i in range(3):
        path = tmp_path / f"chunk-{i:05d}.arrow"
        stage_stream_chunk([UserStreams(f"u{i}", [Stream("s", *_day(0))], "")], path)
        chunks.append(StagedChunk(i, str(path), (f"u{i}",)))
    mapped, most = set(), []
    load, unload = C._Chunk.load, C._Chunk.unload

    def counted_load(self):
        load(self)
        mapped.add(self.index)
        most.append(len(mapped))

    def counted_unload(self):
        unload(self)
        mapped.discard(self.index)

    monkeypatch.setattr(C._Chunk, "load", counted_load)
    monkeypatch.setattr(C._Chunk, "unload", counted_unload)
    monkeypatch.setattr(C, "open_ledger", lambda path: _FakeLedger({}))
    got = C.plan_release_fn("ledger", "r1", "d", type("P", (), {"chunks": chunks})(), EPS)
    assert len(got.requests) == 3 and most == [1, 1, 1] and not mapped
