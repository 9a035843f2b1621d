"""The recheck keys of remote chunks through the ledger service (`recheck_keys`).

A flow whose ledger is served has no noise key, yet must re-execute a secret
sample of each remote chunk's users. The service derives the per-chunk keys
(HMAC of the noise key, one-way) and gives them to the release's owner only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from fractions import Fraction

import pytest
from served_helpers import Served, client

from ledger import Request
from ledger.keys import key_path_for
from ledger.remote import LedgerAccessError, RemoteLedger


def _as(served: Served, who: str) -> RemoteLedger:
    return client(served, who)


def _expected(noise_key: bytes, rid: str, chunk: int) -> str:
    """The documented derivation (docs/ledger.md, SECURITY.md), computed here independently."""
    msg = json.dumps(["privpipe recheck sample v1", rid, chunk]).encode("utf-8")
    return hmac.new(noise_key, msg, hashlib.sha256).hexdigest()


def test_the_owner_gets_the_keys_of_its_release_and_no_one_else(new_served):
    rel = _as(new_served, "rel-a")
    rel.reserve("rk1", [Request("u1", "ais", amount=Fraction(1, 4))], mechanism="curves_gp",
                parameters={"epsilon": "1/4"})
    noise_key = bytes.fromhex(key_path_for(new_served.ledger).read_text().strip())
    got = rel.recheck_keys("rk1", [0, 3])
    assert got == [_expected(noise_key, "rk1", 0), _expected(noise_key, "rk1", 3)]
    for who in ("rel-b", "aud"):
        with pytest.raises(LedgerAccessError):
            _as(new_served, who).recheck_keys("rk1", [0])
    with pytest.raises(LedgerAccessError, match="reserved"):  # nobody reserved it yet
        rel.recheck_keys("never-reserved", [0])
    from ledger.remote_codec import CodecError

    for bad in (["0"], [-1], [True]):
        with pytest.raises(CodecError):
            rel._call("recheck_keys", release_id="rk1", chunks=bad)
