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
