"""Stream releases under ε-w-event LDP, end to end: what is published and what the ledger holds.

The policy (docs/policy.md, docs/guarantees.md) fixes every expected value:
a release at ε per window of w steps charges ε/w per *new* step; any w
consecutive steps of a user, summed over all of the user's streams (the
default ``wevent_budget = "per_user"``) and over all releases, cost at most
the cap; a later release of a growing file charges only the steps after the
watermark, at the ε/w the stream was released with, and repeats the earlier
steps as the bytes already published (docs/streams.md). Amounts are read back
from the ledger's reserve, settle and refund entries and from its balances.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from release_path import new_ledger, run_release, stream_frame, streams_domain

from ledger import Ledger
from tasks.privatize import StreamSpec

W = 4

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = ("square_wave",)


def _values(steps: np.ndarray, phase: float = 0.0) -> np.ndarray:
    """A fixed [0, 1] signal of the absolute step: a growing file repeats its history."""
    return 0.5 + 0.4 * np.sin(2 * np.pi * steps / 7.0 + phase)


def _day(days: int, streams: dict[tuple[str, str], float], per_day: int = 8
         ) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    steps = np.arange(days * per_day)
    return {k: (steps, _values(steps, phase)) for k, phase in streams.items()}


def _spent(ledger_path, user: str) -> list[tuple[str, Fraction]]:
    return sorted((b["stream_id"], b["spent"]) for b in Ledger(ledger_path).balances("meters")
                  if b["user_id"] == user)


def _samples(rel, user: str, stream: str) -> tuple[np.ndarray, np.ndarray]:
    s = rel.table("samples")
    s = s[(s["user_id"] == user) & (s["stream_id"] == stream)].sort_values("step")
    return s["step"].to_numpy(), s["y"].to_numpy()


def test_two_day_release_redraws_day_one_and_charges_only_day_two(tmp_path):
    cap = Fraction(2)
    dom = streams_domain(W, cap=cap)
    path = new_ledger(tmp_path, dom)
    users = {("u1", "s"): 0.0, ("u2", "s"): 1.0}
    day1 = run_release(tmp_path, dom, stream_frame(_day(1, users)), StreamSpec("2", W),
                       ledger_path=path, release_id="day-1")
    day2 = run_release(tmp_path, dom, stream_frame(_day(2, users)), StreamSpec("2", W),
                       ledger_path=path, release_id="day-2")
    per_step = cap / W  # ε per window of w steps, at the cap
    for user in ("u1", "u2"):
        steps1, y1 = _samples(day1, user, "s")
        steps2, y2 = _samples(day2, user, "s")
        assert steps1.tolist() == list(range(8)) and steps2.tolist() == list(range(16))
        # day 1's range is published again as the same bytes (the seed of the release
        # that drew it), not redrawn (an uncharged second draw of the same steps)
        assert y2[:8].tobytes() == y1.tobytes()
        # day 2's range is a fresh draw: not day 1's noise replayed on later steps
        assert not np.array_equal(y2[8:], y1)
        # reports are rounded to multiples of 2^-24 (docs/sampling.md), not a finer grid
        assert np.array_equal(y2 * 2**24, np.round(y2 * 2**24))
        assert not np.array_equal(y2 * 2**23, np.round(y2 * 2**23))
        for rel, first, stop in ((day1, 0, 8), (day2, 8, 16)):
            mine = [e for e in rel.ledger.entries if e.user_id == user]
            assert [e.kind for e in mine] == ["reserve", "settle"]  # no refund: all spent
            for e in mine:
                assert e.runs == ((first, stop, per_step),)
                assert e.amount == per_step * (stop - first)
                assert e.stream_id == "s"
            settle = mine[1]
            assert [(b["start"], b["stop"], Fraction(b["epsilon"]))
                    for b in settle.detail["breakdown"]] == [(first, stop, per_step)]
        # ε per window, never 2ε: day 2 charged none of day 1's steps again; and the
        # windows are w steps long (w - 1 steps would record 3ε/4)
        assert _spent(path, user) == [("", cap)]
    reserve2 = [e for e in day2.ledger.of_kind("reserve") if e.user_id == "u1"][0]
    assert reserve2.detail["stream_range"]["first_step"] == 8
    assert reserve2.detail["stream_range"]["watermark_before"] == 7
    assert reserve2.balance_after == cap


def test_windows_are_w_steps_across_the_day_boundary(tmp_path):
    """At ε per window the cap admits day 2 only if no window holds more than w steps' worth."""
    cap = Fraction(1)
    dom = streams_domain(W, cap=cap)
    path = new_ledger(tmp_path, dom)
    users = {("u1", "s"): 0.0}
    # day 1: 3 steps at ε = 1 (1/4 each); day 2 adds steps 3..6 at the same ε/w
    steps1 = np.arange(3)
    run_release(tmp_path, dom, stream_frame({("u1", "s"): (steps1, _values(steps1))}),
                StreamSpec("1", W), ledger_path=path, release_id="d1")
    assert _spent(path, "u1") == [("", Fraction(3, 4))]  # 3 of the w steps of a window
    day2 = run_release(tmp_path, dom, stream_frame(_day(1, users, per_day=7)),
                       StreamSpec("1", W), ledger_path=path, release_id="d2")
    assert day2.admitted == {"u1"}
    assert [e.runs for e in day2.ledger.of_kind("reserve")] == [((3, 7, Fraction(1, 4)),)]
    assert _spent(path, "u1") == [("", cap)]


def test_continuation_at_another_epsilon_per_step_is_rejected(tmp_path):
    dom = streams_domain(W)
    path = new_ledger(tmp_path, dom)
    users = {("u1", "s"): 0.0, ("u2", "s"): 0.5}
    run_release(tmp_path, dom, stream_frame(_day(1, users)), StreamSpec("2", W),
                ledger_path=path, release_id="day-1")
    before = Ledger(path).balances("meters")
    day2 = run_release(tmp_path, dom, stream_frame(_day(2, users)), StreamSpec("1", W),
                       ledger_path=path, release_id="day-2", strict=False)
    # both streams were released at ε/w = 1/2: continuing them at 1/4 is refused
    assert sorted(r["user_id"] for r in day2.rejected) == ["u1", "u2"]
    assert day2.admitted == set()
    assert [e for e in day2.ledger.entries if e.kind in ("reserve", "settle")] == []
    assert day2.table("samples").empty
    assert Ledger(path).balances("meters") == before


def test_per_user_windows_sum_every_stream_of_the_user(tmp_path):
    cap = Fraction(2)
    dom = streams_domain(W, cap=cap)
    path = new_ledger(tmp_path, dom)
    streams = {("a", "s1"): 0.0, ("a", "s2"): 1.0, ("b", "s1"): 2.0}
    rel = run_release(tmp_path, dom, stream_frame(_day(1, streams)), StreamSpec("1", W),
                      ledger_path=path, release_id="r1")
    # one account per user over all its streams: a's two streams at ε = 1 fill its cap
    assert _spent(path, "a") == [("", cap)]
    assert _spent(path, "b") == [("", Fraction(1))]
    a_reserves = [e for e in rel.ledger.of_kind("reserve") if e.user_id == "a"]
    assert sorted(e.stream_id for e in a_reserves) == ["s1", "s2"]
    assert a_reserves[-1].balance_after == cap  # the user's window after both streams
    # a fresh ledger, ε = 2 per window: a single stream fits the cap, two do not
    dom2 = streams_domain(W, cap=cap)
    path2 = new_ledger(tmp_path / "second", dom2)
    rel2 = run_release(tmp_path, dom2, stream_frame(_day(1, streams)), StreamSpec("2", W),
                       ledger_path=path2, release_id="r2", strict=False)
    assert rel2.admitted == {"b"}
    assert [d["user_id"] for d in rel2.denied] == ["a"]
    samples = rel2.table("samples")
    assert set(samples["user_id"]) == {"b"}  # the denied user's streams are not released
    assert {e.kind for e in rel2.ledger.entries if e.user_id == "a"} == {"deny"}
    assert sorted((b["user_id"], b["spent"]) for b in Ledger(path2).balances("meters")) == [
        ("a", Fraction(0)), ("b", cap)]


def test_per_stream_domain_gives_each_stream_its_windows(tmp_path):
    cap = Fraction(2)
    dom = streams_domain(W, cap=cap, wevent_budget="per_stream")
    path = new_ledger(tmp_path, dom)
    streams = {("a", "s1"): 0.0, ("a", "s2"): 1.0}
    rel = run_release(tmp_path, dom, stream_frame(_day(1, streams)), StreamSpec("2", W),
                      ledger_path=path, release_id="r")
    assert rel.admitted == {"a"}
    assert _spent(path, "a") == [("s1", cap), ("s2", cap)]
