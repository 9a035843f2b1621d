"""`range_fingerprints` through the ledger service: the same fingerprints in one call."""

from __future__ import annotations

import numpy as np
import pytest
from served_helpers import Served, client

from ledger.keys import key_path_for
from ledger.remote import LedgerAccessError, RemoteLedger
from ledger.remote_codec import CodecError
from ledger.watermark import range_fingerprint
from schemas.errors import ParameterError

STEPS = [0, 1, 2, 10, 11, 40]
VALUES = [0.25, 0.5, 0.1, 1.0, 0.0, 0.75]


def _as(served: Served, who: str) -> RemoteLedger:
    return client(served, who)


def test_each_range_gets_the_fingerprint_of_asking_for_it_alone(new_served):
    rel = _as(new_served, "rel-a")
    key = bytes.fromhex(key_path_for(new_served.ledger).read_text().strip())
    got = rel.range_fingerprints("power", ["u1", "u1", "u2"], ["s1", "s2", "s1"], STEPS, VALUES,
                                 [0, 3, 5, 6])
    want = [range_fingerprint(key, u, "power", s, np.array(STEPS[a:b]), np.array(VALUES[a:b]))
            for u, s, a, b in (("u1", "s1", 0, 3), ("u1", "s2", 3, 5), ("u2", "s1", 5, 6))]
    assert got == want
    assert got[0] == rel.range_fingerprint("u1", "power", "s1", STEPS[:3], VALUES[:3])
    assert len(set(got)) == 3


def test_an_auditor_cannot_ask(new_served):
    with pytest.raises(LedgerAccessError, match="releaser or admin"):
        _as(new_served, "aud").range_fingerprints("power", ["u1"], ["s1"], [0], [0.5], [0, 1])


@pytest.mark.parametrize("bad", [
    {"offsets": [0, "1"]}, {"offsets": [0, 1.0]}, {"offsets": None}, {"offsets": [0, True]},
    {"steps": [0]}, {"steps": np.array([0.0])}, {"steps": np.array([[0]])},
    {"values": [0.5]}, {"values": np.array([1])}, {"values": None},
    {"user_ids": [1]}, {"stream_ids": "s1"},
])
def test_arguments_of_the_wrong_type_are_refused(new_served, bad):
    args = {"domain": "power", "user_ids": ["u1"], "stream_ids": ["s1"],
            "steps": np.array([0]), "values": np.array([0.5]), "offsets": [0, 1]}
    rel = _as(new_served, "rel-a")
    assert len(rel._call("range_fingerprints", **args)) == 1  # the well-typed call answers
    with pytest.raises(CodecError):
        rel._call("range_fingerprints", **{**args, **bad})


@pytest.mark.parametrize("offsets", [[0, 2], [1, 1], [0, 1, 0], [0]])
def test_offsets_that_do_not_describe_one_range_per_user_are_refused(new_served, offsets):
    users = ["u1"] * (len(offsets) - 1) or ["u1"]
    with pytest.raises(ParameterError, match="offsets run from 0"):
        _as(new_served, "rel-a").range_fingerprints("power", users, ["s1"] * len(users), [0],
                                                [0.5], offsets)


_ARRAY = b'{"$f8": "AAAAAAAA8D8="}'


@pytest.mark.parametrize(("op", "body"), [
    ("reserve", b'{"release_id": "h1", "mechanism": "m", "parameters": {"x": %s}, "requests": '
                b'[{"$type": "Request", "fields": {"user_id": "a", "domain": "ais", '
                b'"amount": {"$frac": "1/10"}}}]}' % _ARRAY),
    ("stream_ranges", b'{"domain": "power", "keys_": {"$i8": "AAAAAAAAAAA="}}'),
    ("record_release", b'{"release_id": "h3", "manifest": {"a": [%s]}, "state": "settled"}'
                       % _ARRAY),
])
def test_arrays_are_refused_by_every_other_operation(new_served, op, body):
    """The binary arrays are for range_fingerprints only: elsewhere 400, nothing written
    (a reserve whose parameters held one was admitted before this check)."""
    import json

    before = _as(new_served, "aud").head()
    status, answer = _as(new_served, "rel-a")._http.post(op, body)
    assert status == 400, answer
    assert json.loads(answer)["error"]["class"] == "CodecError"
    assert _as(new_served, "aud").head() == before
