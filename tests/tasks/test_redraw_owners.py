"""`tasks.redraw_owners`: a continuation that repeats another client's release is refused
before its reserve, through a real `privpipe ledger serve` (issue #28).

The end-to-end case (a stream day 2 under another releaser's credential reserved
its users, then was refused day 1's seeds, leaving the budget held) is in
`tests/ledger/test_ledger_served_acceptance.py`.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from ledger import Ledger, Request
from ledger.remote import LedgerAccessError, RemoteLedger
from tasks.continuation import Segment, StreamPlan
from tasks.redraw_owners import check_redraw_owners, earlier_releases
from tests.ledger.served_helpers import Served, serve_new_ledger

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Served:
    """A served ledger where rel-a reserved release ``d1`` for user ``u1``."""
    served = serve_new_ledger(tmp_path_factory.mktemp("served"))
    _remote(served, "rel-a").reserve("d1", [Request("u1", "ais", amount=Fraction(1, 10))],
                                     mechanism="curves_gp", parameters={"epsilon": "1/10"})
    yield served
    served.stop()


def _remote(served: Served, who: str) -> RemoteLedger:
    return RemoteLedger(served.url, token=served.tokens[who], ca=str(served.ca))


def _plans(*segments: Segment) -> dict:
    return {0: {"u1": {"s0": StreamPlan(segments, 9, None)}}}


REPEAT_D1 = _plans(Segment("d1", 0, 9, False), Segment("d2", 10, 19, True))


def test_earlier_releases_names_each_repeated_release_once():
    plans = {0: {"u1": {"s0": StreamPlan((Segment("d1", 0, 9, False),
                                          Segment("d3", 10, 19, False)), 19, None)},
                 "u2": {"s0": StreamPlan((Segment("d1", 0, 9, False),), 9, None)}},
             1: {"u3": {"s1": StreamPlan((Segment("d4", 0, 9, True),), None, None)}}}
    assert earlier_releases(plans, "d4") == {"d1": "u1", "d3": "u1"}
    assert earlier_releases(plans, "d1") == {"d3": "u1"}  # a rerun's own ranges


def test_another_releasers_release_is_refused(server):
    with pytest.raises(LedgerAccessError, match="'d1' of client 'rel-a'.*user 'u1'"):
        check_redraw_owners(_remote(server, "rel-b"), "d2", REPEAT_D1)


def test_its_releaser_an_admin_and_a_new_stream_pass(server):
    check_redraw_owners(_remote(server, "rel-a"), "d2", REPEAT_D1)
    check_redraw_owners(_remote(server, "adm"), "d2", REPEAT_D1)
    check_redraw_owners(_remote(server, "rel-b"), "d2", _plans(Segment("d2", 0, 9, True)))


def test_an_embedded_ledger_is_not_asked(tmp_path):
    """Embedded: whoever opens the file with its key gets every seed; nothing to check."""
    led = Ledger.init(tmp_path / "ledger.duckdb", actor="someone-else")
    check_redraw_owners(led, "d2", REPEAT_D1)
