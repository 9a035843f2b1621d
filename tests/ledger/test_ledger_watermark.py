"""Stream watermarks: released ranges recorded in the chain, checked at reserve time."""

from __future__ import annotations

from fractions import Fraction

import duckdb
import numpy as np
import pytest

from ledger import (
    Ledger,
    ReplayConflictError,
    Request,
    Settlement,
    StreamClaim,
    StreamContinuityError,
)
from ledger.watermark import range_fingerprint
from mechanisms.cost import StepRun, WEventCost

EPS = Fraction(1, 4)  # per step: w = 4 steps at 1/4 = the cap 1 per window
DAY = 8


def _fp(led, user, a, b, values=None):
    steps = np.arange(a, b + 1)
    vals = np.linspace(0, 1, steps.size) if values is None else values
    return led.range_fingerprint(user, "power", "s", steps, vals)


def _request(led, user, a, b, watermark, **kw):
    claim = StreamClaim(a, b, b - a + 1, kw.pop("fingerprint", None) or _fp(led, user, a, b),
                        watermark)
    return Request(user_id=user, domain="power", step="stream:s", notion="wevent",
                   stream_id="s", runs=(StepRun(a, b + 1, EPS),), stream_claim=claim)


def _day(led, rid, k, users=("u1", "u2")):
    watermark = None if k == 0 else DAY * k - 1
    res = led.reserve(rid, [_request(led, u, DAY * k, DAY * (k + 1) - 1, watermark)
                            for u in users], mechanism="square_wave", parameters={})
    led.settle(rid, [Settlement(u, "power", "stream:s",
                                WEventCost(Fraction(1), 4, (StepRun(DAY * k, DAY * (k + 1), EPS),)),
                                stream_id="s") for u in users])
    return res


def test_claims_are_recorded_and_read_back_as_the_watermark(led):
    _day(led, "d1", 0)
    _day(led, "d2", 1)
    ranges = led.stream_ranges("power", [("u1", "s"), ("u3", "s")])
    assert [(r.release_id, r.first_step, r.last_step, r.steps) for r in ranges[("u1", "s")]] == [
        ("d1", 0, 7, 8), ("d2", 8, 15, 8)]
    assert ranges[("u3", "s")] == []
    assert all(r.epsilon_per_step == EPS for r in ranges[("u1", "s")])
    assert ranges[("u1", "s")][0].fingerprint == _fp(led, "u1", 0, 7)
    assert led.verify().ok
    # the windows continue across the two releases at exactly the cap
    assert all(Fraction(str(b["spent"])) == 1 for b in led.balances("power"))


def test_a_claim_against_a_stale_watermark_is_refused_and_writes_nothing(led, ledger_path):
    _day(led, "d1", 0)
    _day(led, "d2", 1)
    before = duckdb.connect(str(ledger_path), read_only=True)
    n = before.execute("SELECT count(*) FROM entries").fetchone()[0]
    before.close()
    # planned when the watermark was 7 (a concurrent release moved it to 15)
    with pytest.raises(StreamContinuityError, match="watermark is step 15, not step 7"):
        led.reserve("late", [_request(led, "u1", 8, 15, 7)], mechanism="square_wave",
                    parameters={})
    with pytest.raises(StreamContinuityError, match="not right after the watermark"):
        led.reserve("gap", [_request(led, "u1", 20, 27, 15)], mechanism="square_wave",
                    parameters={})
    with pytest.raises(StreamContinuityError, match="does not match the request's runs"):
        bad = _request(led, "u1", 16, 23, 15)
        led.reserve("mismatch", [Request(user_id="u1", domain="power", step="stream:s",
                                         notion="wevent", stream_id="s",
                                         runs=(StepRun(16, 30, EPS),),
                                         stream_claim=bad.stream_claim)],
                    mechanism="square_wave", parameters={})
    after = duckdb.connect(str(ledger_path), read_only=True)
    assert after.execute("SELECT count(*) FROM entries").fetchone()[0] == n
    after.close()


def test_a_replay_checks_against_the_history_of_its_first_run(led):
    _day(led, "d1", 0)
    first = _day(led, "d2", 1)
    _day(led, "d3", 2)  # a later release moved the watermark on
    again = led.reserve("d2", [_request(led, u, 8, 15, 7) for u in ("u1", "u2")],
                        mechanism="square_wave", parameters={})
    assert all(d.replayed for d in again.admitted)
    assert [d.entry_seq for d in again.admitted] == [d.entry_seq for d in first.admitted]
    # the same key with another claim (other values) is a conflict, not a replay
    with pytest.raises(ReplayConflictError):
        led.reserve("d2", [_request(led, "u1", 8, 15, 7, fingerprint="f" * 64)],
                    mechanism="square_wave", parameters={})


def test_a_closed_reservation_releases_its_range(led):
    _day(led, "d1", 0)
    led.reserve("d2", [_request(led, "u1", 8, 15, 7)], mechanism="square_wave", parameters={})
    assert led.stream_ranges("power", [("u1", "s")])[("u1", "s")][-1].release_id == "d2"
    led.close("d2", "the release died before drawing anything")
    assert [r.release_id for r in led.stream_ranges("power", [("u1", "s")])[("u1", "s")]] == [
        "d1"]
    led.reserve("d2b", [_request(led, "u1", 8, 15, 7)], mechanism="square_wave", parameters={})


def test_an_edited_fingerprint_or_range_fails_verify(led, ledger_path):
    # the attack: rewrite the recorded range of day 1 so that a changed history
    # would pass as the one released (or the watermark moves back)
    _day(led, "d1", 0)
    _day(led, "d2", 1)
    con = duckdb.connect(str(ledger_path))
    seq = con.execute("SELECT min(seq) FROM entries WHERE kind = 'reserve'").fetchone()[0]
    detail = con.execute("SELECT detail FROM entries WHERE seq = ?", [seq]).fetchone()[0]
    forged = detail.replace('"last_step":7', '"last_step":3')
    assert forged != detail
    con.execute("UPDATE entries SET detail = ? WHERE seq = ?", [forged, seq])
    con.close()
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and rep.first_bad_seq == seq


def test_claims_are_validated_before_any_transaction(led):
    good = _request(led, "u1", 0, 7, None)
    with pytest.raises(Exception, match="only for w-event requests"):
        led.reserve("x", [Request(user_id="u1", domain="ais", step="s", notion="gp",
                                  amount=Fraction(1, 10), stream_claim=good.stream_claim)],
                    mechanism="m", parameters={})
    with pytest.raises(Exception, match="must be a ledger.StreamClaim"):
        led.reserve("x", [Request(user_id="u1", domain="power", step="s", notion="wevent",
                                  stream_id="s", runs=(StepRun(0, 8, EPS),),
                                  stream_claim=(0, 7))], mechanism="m", parameters={})


def test_fingerprints_are_keyed_and_see_every_change():
    steps, vals = np.arange(5), np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    a = range_fingerprint(b"k" * 32, "u", "d", "s", steps, vals)
    assert a == range_fingerprint(b"k" * 32, "u", "d", "s", steps, vals.copy())
    assert a != range_fingerprint(b"x" * 32, "u", "d", "s", steps, vals)  # keyed
    changed = vals.copy()
    changed[2] = np.nextafter(changed[2], 1)
    assert a != range_fingerprint(b"k" * 32, "u", "d", "s", steps, changed)
    assert a != range_fingerprint(b"k" * 32, "u", "d", "s", steps + 1, vals)
    assert a != range_fingerprint(b"k" * 32, "v", "d", "s", steps, vals)


def _reference_fingerprint(key, user, domain, sid, steps, values):
    """The documented construction, from Python numbers (no numpy buffer): HMAC-SHA256 of
    the JSON head, then each step as little-endian int64, then each value as float64."""
    import hashlib
    import hmac
    import json
    import struct

    head = json.dumps(["privpipe stream range v1", user, domain, sid, len(steps)]).encode()
    body = b"".join(struct.pack("<q", int(s)) for s in steps)
    body += b"".join(struct.pack("<d", float(v)) for v in values)
    return hmac.new(key, head + body, hashlib.sha256).hexdigest()


def test_fingerprints_are_the_documented_hmac_for_any_layout_of_the_arrays():
    # the ledger records these: a faster computation must give the same hex, whatever the
    # arrays' strides, integer width or byte order (a recorded range must match next day)
    from ledger.watermark import range_fingerprints

    key = bytes(range(32))
    rng = np.random.default_rng(5)
    base = rng.random(40)
    steps = np.arange(100, 140)
    cases = [(steps, base), (steps[::2], base[::2]),  # strided views
             (steps.astype(np.int32), base.astype(">f8")),  # narrower, big-endian
             (steps[:0], base[:0])]  # an empty range
    for st, vals in cases:
        want = _reference_fingerprint(key, "ü1", "d", "s\u00e9", st.tolist(), vals.tolist())
        assert range_fingerprint(key, "ü1", "d", "s\u00e9", st, vals) == want
    # a batch: ranges of one strided, big-endian pair of arrays, with an empty one between
    st, vals = steps[::2].astype(">i8"), base[::2].astype(">f8")
    offsets = [0, 7, 7, 20]
    users, sids = ["a", "b", "c"], ["s1", "s2", "s3"]
    got = range_fingerprints(key, "d", users, sids, st, vals, offsets)
    assert got == [_reference_fingerprint(key, u, "d", s, st[a:b].tolist(), vals[a:b].tolist())
                   for u, s, a, b in zip(users, sids, offsets[:-1], offsets[1:], strict=True)]
    assert len(set(got)) == 3
