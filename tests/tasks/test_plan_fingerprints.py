"""tasks.plan_fingerprints: a chunk's plan asks the ledger for its fingerprints in a few calls."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from ledger.watermark import StreamRange, range_fingerprint, range_fingerprints
from tasks import plan_fingerprints
from tasks.continuation import ContinuationError, plan_stream
from tasks.plan_fingerprints import chunk_fingerprints

KEY = b"k" * 32
EPS = Fraction(1, 5)


class CountingLedger:
    """The ledger's two fingerprint calls over a fixed key, counted."""

    def __init__(self):
        self.batches: list[int] = []
        self.single = 0

    def range_fingerprints(self, domain, user_ids, stream_ids, steps, values, offsets):
        self.batches.append(len(steps))
        return range_fingerprints(KEY, domain, user_ids, stream_ids, steps, values, offsets)

    def range_fingerprint(self, user, domain, sid, steps, values):
        self.single += 1
        return range_fingerprint(KEY, user, domain, sid, np.asarray(steps), np.asarray(values))


def _history(rng, user, sid, steps, values):
    """Random released ranges over a prefix of `steps` (some releases, one maybe this one,
    some never recorded: their rows are neither a range nor new)."""
    out, start = [], 0
    while start < steps.size and rng.random() < 0.7:
        stop = min(steps.size, start + int(rng.integers(1, 30)))
        rid = "r-now" if rng.random() < 0.15 else f"r{len(out)}"
        st = steps[start:stop]
        vals = values[start:stop].copy()
        if rng.random() < 0.1:
            vals[0] += 0.5  # a changed history: the plan must reject it
        if rng.random() < 0.85:  # else a range the ledger never recorded: stray rows
            out.append(StreamRange(rid, int(st[0]), int(st[-1]), int(st.size),
                                   range_fingerprint(KEY, user, "d", sid, st, vals), EPS))
        start = stop
    return out


def test_every_fingerprint_a_plan_asks_for_was_computed_in_advance_and_is_the_same():
    """Random streams and histories (reruns, repeats, gaps, changed values): the plans made
    from the precomputed table equal those made calling the ledger range by range."""
    rng = np.random.default_rng(5)
    for trial in range(40):
        n = int(rng.integers(1, 12))
        users = [f"u{k // 2}" for k in range(n)]
        streams = [f"s{k % 2}" for k in range(n)]
        lengths = rng.integers(0, 60, n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        steps = np.concatenate([np.sort(rng.choice(200, size=m, replace=False))
                                for m in lengths]).astype(np.int64)
        values = rng.random(steps.size)
        history = {}
        for k in range(n):
            st, v = steps[offsets[k]:offsets[k + 1]], values[offsets[k]:offsets[k + 1]]
            history[(users[k], streams[k])] = _history(rng, users[k], streams[k], st, v)
        led = CountingLedger()
        table = chunk_fingerprints(led, "d", "r-now", users, streams, steps, values, offsets,
                                   history)
        assert led.single == 0 and len(led.batches) <= 1
        for k in range(n):
            st, v = steps[offsets[k]:offsets[k + 1]], values[offsets[k]:offsets[k + 1]]
            hist = history[(users[k], streams[k])]
            if not st.size:
                continue

            def direct(a, b, user=users[k], sid=streams[k], led=led):
                return led.range_fingerprint(user, "d", sid, a, b)

            outcomes = []
            for fingerprint in (direct, table[k]):
                try:
                    outcomes.append(plan_stream(st, v, hist, release_id="r-now", per_step=EPS,
                                                fingerprint=fingerprint))
                except ContinuationError as err:
                    outcomes.append(err.rule)
            assert outcomes[0] == outcomes[1], (trial, k)


def test_calls_carry_at_most_the_batch_size_and_one_range_at_least(monkeypatch):
    monkeypatch.setattr(plan_fingerprints, "FINGERPRINT_BATCH_VALUES", 100)
    lengths = [40, 40, 40, 250, 10]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    steps = np.concatenate([np.arange(m) for m in lengths]).astype(np.int64)
    values = np.linspace(0, 1, steps.size)
    users = [f"u{k}" for k in range(5)]
    led = CountingLedger()
    table = chunk_fingerprints(led, "d", "r", users, ["s"] * 5, steps, values, offsets, {})
    assert led.batches == [80, 40, 250, 10]
    for k in range(5):
        st, v = steps[offsets[k]:offsets[k + 1]], values[offsets[k]:offsets[k + 1]]
        assert table[k](st, v) == range_fingerprint(KEY, users[k], "d", "s", st, v)


def test_a_range_not_computed_in_advance_is_a_bug():
    led = CountingLedger()
    steps = np.arange(10, dtype=np.int64)
    table = chunk_fingerprints(led, "d", "r", ["u"], ["s"], steps, np.zeros(10), [0, 10], {})
    with pytest.raises(AssertionError, match="bug"):
        table[0](steps[:5], np.zeros(5))
