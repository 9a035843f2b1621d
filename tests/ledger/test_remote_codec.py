"""The ledger service's JSON codec (`ledger.remote_codec`): exact round trips of the
column-wise ``$rows``/``$dict`` wire and the hostile column messages it refuses.

No server here: these are the codec's own guarantees (the served tests check that a
refused message is a 400 that leaves the ledger unchanged).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest

from ledger import Request, Settlement
from ledger import remote_codec as codec
from ledger.records import Decision, ReserveResult
from mechanisms.cost import Cost, CostItem

AWKWARD = [Fraction(1, 3), 10**30 + Fraction(1, 7), Fraction(0), Fraction(-5, 7),
           -(10**40) - Fraction(1, 10**25)]


def _roundtrip(value):
    return codec.loads(codec.dumps(value))


def _same(a, b) -> bool:
    """Equal and of the same exact type (so 1, True, 1.0 and Fraction(1) differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b) or (a != a and b != b)
    return a == b


@pytest.mark.parametrize("repeat", [1, 50])
def test_awkward_amounts_round_trip_exactly(repeat):
    """1/3, 10^30 + 1/7, 0, negative refunds: the same Fractions after the wire, in both
    column forms (a plain list when the values are distinct, ``$dict`` when they repeat)."""
    amounts = (AWKWARD + [Fraction(1), 1, 1.0, -0.0, 0.0, "1/3", None]) * repeat
    reqs = [Request(f"u{i}", "ais", amount=a) for i, a in enumerate(amounts)]
    wire = json.loads(codec.dumps(reqs))
    amount_col = wire["$rows"]["columns"]["amount"]
    assert isinstance(amount_col, dict) == (repeat > 1)  # the form under test is used
    back = _roundtrip(reqs)
    assert [r.user_id for r in back] == [r.user_id for r in reqs]
    assert all(_same(a.amount, b.amount) for a, b in zip(reqs, back, strict=True))


def test_decisions_and_refund_costs_round_trip():
    """A reserve's answer and settlements whose costs carry refunds come back equal."""
    dec = [Decision(f"u{i}", "ais", "release", "", i % 3 != 0, "" if i % 3 else "cap",
                    AWKWARD[i % 5], AWKWARD[(i + 1) % 5] - 1, i, bool(i % 2), "gp", "ε")
           for i in range(40)]
    res = ReserveResult([d for d in dec if d.admitted], [d for d in dec if not d.admitted])
    assert _roundtrip({"result": res})["result"] == res
    sets = [Settlement(f"u{i}", "ais", "release", Cost("gp", Fraction(1, 10), (
        CostItem("svt", "gp", Fraction(1, 20)),
        CostItem("project", "gp", Fraction(1, 20) - Fraction(i % 4, 1000)))))
        for i in range(40)]
    back = _roundtrip(sets)
    assert back == sets
    assert all(type(b.cost.total) is Fraction for b in back)


def test_a_shared_cost_is_sent_once():
    """10,000 settlements of one `Cost` carry its breakdown once, not 10,000 times."""
    cost = Cost("gp", Fraction(1, 10), (CostItem("svt", "gp", Fraction(1, 20)),
                                        CostItem("project", "gp", Fraction(1, 20))))
    sets = [Settlement(f"user-{i:07d}", "ais", "release", cost) for i in range(10_000)]
    body = codec.dumps({"release_id": "r", "settlements": sets})
    assert body.count(b'"svt"') == 1 and body.count(b'"project"') == 1
    back = codec.loads(body)["settlements"]
    assert back == sets


def _rows(column: dict, n: int = 3) -> bytes:
    cols = {"user_id": [f"u{i}" for i in range(n)], "domain": ["ais"] * n, "amount": column}
    return json.dumps({"$rows": {"type": "Request", "columns": cols}}).encode()


def _dict(values, codes) -> dict:
    return {"$dict": {"values": values, "codes": codes}}


@pytest.mark.parametrize("column, why", [
    (_dict([{"$frac": "1/3"}], [0, 1, 0]), "codes"),  # out of range
    (_dict([{"$frac": "1/3"}], [0, -1, 0]), "codes"),  # negative
    (_dict([{"$frac": "1/3"}], [0, True, 0]), "codes"),  # a bool is not a code
    (_dict([{"$frac": "1/3"}], [0, 0.0, 0]), "codes"),  # nor a float
    (_dict([], []), r"\$dict column is"),  # empty
    (_dict({"$frac": "1/3"}, [0, 0, 0]), r"\$dict column is"),  # values not a list
    ({"$dict": {"values": [1], "codes": [0, 0, 0], "extra": 1}}, r"\$dict column is"),
    ({"$dict": {"values": [1], "codes": [0, 0, 0]}, "x": 1}, "rows|tagged|one key|length"),
    (_dict([1], [0, 0]), "one length"),  # two rows for three users
    (_dict([{"$frac": "1/0"}], [0, 0, 0]), "fraction"),
    (_dict([True], [0, 0, 0]), "amount"),  # a bool amount, checked on the distinct value
    (_dict([{"$type": "Popen", "fields": {}}], [0, 0, 0]), "unknown record"),
    ({"$repeat": {"value": 1, "count": 0}}, r"\$repeat column is"),
    ({"$repeat": {"value": 1, "count": True}}, r"\$repeat column is"),
    ({"$repeat": {"value": 1, "count": 3.0}}, r"\$repeat column is"),
    ({"$repeat": {"value": 1}}, r"\$repeat column is"),
    ({"$repeat": {"value": 1, "count": 3, "codes": []}}, r"\$repeat column is"),
    ({"$repeat": {"value": 1, "count": 10**400}}, "stands for more than"),
    ({"$repeat": {"value": 1, "count": 2}}, "one length"),
    ({"$repeat": {"value": True, "count": 3}}, "amount"),
    ({"$repeat": {"value": {"$frac": "1/0"}, "count": 3}}, "fraction"),
])
def test_hostile_dict_columns_are_refused(column, why):
    with pytest.raises(codec.CodecError, match=why):
        codec.loads(_rows(column))


@pytest.mark.parametrize("tagged", [_dict([1], [0, 0]),
                                    {"$repeat": {"value": 1, "count": 2}}])
def test_column_forms_outside_rows_are_refused(tagged):
    with pytest.raises(codec.CodecError, match="unknown or malformed tag"):
        codec.loads(json.dumps({"x": tagged}).encode())


def test_column_forms_chosen():
    """All rows one value: ``$repeat``; few distinct (by identity or exact value):
    ``$dict``; mostly distinct: a plain list."""
    shared = [Fraction(1, 7), Fraction(2, 7), 1]
    reqs = [Request(f"u{i}", "ais", step="".join(["s", str(i % 2)]), amount=shared[i % 3])
            for i in range(30)]
    cols = json.loads(codec.dumps(reqs))["$rows"]["columns"]
    assert cols["domain"] == {"$repeat": {"value": "ais", "count": 30}}
    assert cols["amount"] == {"$dict": {"values": [{"$frac": "1/7"}, {"$frac": "2/7"}, 1],
                                        "codes": [0, 1, 2] * 10}}
    assert cols["step"] == {"$dict": {"values": ["s0", "s1"], "codes": [0, 1] * 15}}
    assert cols["user_id"] == [f"u{i}" for i in range(30)]
    assert codec.loads(codec.dumps(reqs)) == reqs


def test_a_repeated_value_cannot_stand_for_more_than_a_plain_body(monkeypatch):
    """The attack: one large value and many codes make a small body stand for a huge
    one (the ledger would then check and hash every expanded row). Refused once the
    expanded size passes `_MAX_EXPANDED` (the default request cap)."""
    big = "x" * 1000
    for column in (_dict([big, "y"], [0] * 1999 + [1]), {"$repeat": {"value": big,
                                                                     "count": 2000}}):
        body = json.dumps({"$rows": {"type": "Request", "columns": {
            "user_id": column, "domain": {"$repeat": {"value": "ais", "count": 2000}}}}}
        ).encode()
        assert len(body) * 100 < 2000 * len(big)
        monkeypatch.setattr(codec, "_MAX_EXPANDED", 10**9)
        assert len(codec.loads(body)) == 2000  # the attack decodes without the cap
        monkeypatch.setattr(codec, "_MAX_EXPANDED", 1_000_000)
        with pytest.raises(codec.CodecError, match="stands for more than"):
            codec.loads(body)


def test_int64_and_float64_arrays_travel_as_their_bytes():
    """1-D <i8/<f8 arrays: base64 of their bytes, back bit for bit (-0.0, NaN, extremes)."""
    import base64

    import numpy as np

    values = np.array([0.25, -0.0, 1e-310, np.nan, np.inf, -1.5e300, 0.1 + 0.2])
    steps = np.array([0, -1, 2**62, -(2**63)], dtype=np.int64)
    body = codec.dumps({"values": values, "steps": steps, "other": np.array([1, 2], np.int32)})
    raw = json.loads(body)
    assert raw["values"] == {"$f8": base64.b64encode(values.astype("<f8").tobytes()).decode()}
    assert raw["other"] == [1, 2]  # any other array is a list, as before
    got = codec.loads(body)
    assert got["values"].dtype == np.dtype("<f8") and got["steps"].dtype == np.dtype("<i8")
    assert got["values"].tobytes() == values.tobytes()
    assert got["steps"].tolist() == steps.tolist()
    assert not got["values"].flags.writeable
    assert codec.dumps({"m": np.zeros((2, 2))}) == b'{"m":[[0.0,0.0],[0.0,0.0]]}'


@pytest.mark.parametrize("tagged", [
    {"$f8": "AAAAAAAA8D8"},  # unpadded
    {"$f8": "AAAAAAAA8D8=!"},  # not base64
    {"$f8": "AAAAAAAA"},  # 6 bytes
    {"$i8": 5},
    {"$i8": ["AAAAAAAAAAA="]},
    {"$f4": "AAAAAA=="},
])
def test_malformed_arrays_are_refused(tagged):
    with pytest.raises(codec.CodecError):
        codec.loads(json.dumps({"x": tagged}).encode())
