"""`by_user`: reserve batches never split a user's requests (all-or-nothing per user)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from ledger import Request
from tasks.ledger_ops import by_user


def _req(user: str, step: str) -> Request:
    return Request(user_id=user, domain="d", step=step, notion="gp", amount=Fraction(1, 2))


def test_a_users_requests_share_one_batch_even_when_not_adjacent():
    reqs = [_req("a", "s1"), _req("b", "s1"), _req("a", "s2"), _req("c", "s1"),
            _req("b", "s2"), _req("d", "s1")]
    batches = list(by_user(reqs, 2))
    assert [[(r.user_id, r.step) for r in b] for b in batches] == [
        [("a", "s1"), ("a", "s2"), ("b", "s1"), ("b", "s2")],
        [("c", "s1"), ("d", "s1")]]
    # every request once, and each user in exactly one batch
    assert sorted(id(r) for b in batches for r in b) == sorted(id(r) for r in reqs)


def test_one_empty_batch_without_requests_and_a_bad_size_is_refused():
    assert list(by_user([], 3)) == [[]]
    with pytest.raises(ValueError, match="max_users"):
        list(by_user([_req("a", "s")], 0))
