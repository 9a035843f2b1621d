"""The audit's figures all describe one state of the ledger, even while releases commit.

`ledger.audit_data.collect` reads the ledger in several transactions (the export
of the entries, the verification, the head, the balances, the policy). A release
that commits between two of them used to give a report whose listed entries
end at one head while its signed head, verification and balances describe a
later one: an auditor signs figures that never held together.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from ledger import Ledger, LedgerBusyError, Request, audit_data


def _charge(path, release: str) -> None:
    Ledger(path).reserve(release, [Request("late", "ais", amount=Fraction(1, 10))],
                         mechanism="m", parameters={})


def _spent(balances, user: str) -> Fraction:
    return sum((b["spent"] for b in balances if b["user_id"] == user),
               Fraction(0))


def test_a_release_committing_mid_audit_does_not_split_the_report(led, monkeypatch):
    led.reserve("r1", [Request("a", "ais", amount=Fraction(1, 2))], mechanism="m",
                parameters={})
    honest = Ledger.verify
    calls = []

    def verify_after_a_release(self, expect=()):
        calls.append(1)
        if len(calls) == 1:  # another process's release lands between export and verify
            _charge(led.path, "late-1")
        return honest(self, expect)

    monkeypatch.setattr(Ledger, "verify", verify_after_a_release)
    data = audit_data.collect(str(led.path))
    assert data.verification.ok
    assert data.head["seq"] == data.signed_head["seq"]
    assert data.head["hash"] == data.signed_head["hash"]
    assert data.verification.entries_checked == data.entries  # verified what is listed
    assert _spent(data.balances, "late") == Fraction(1, 10)  # the export has it too
    assert any(r["release_id"] == "late-1" for r in data.releases)


def test_a_ledger_that_never_stops_changing_is_reported_busy(led, monkeypatch):
    honest = Ledger.verify
    n = []

    def verify_after_a_release(self, expect=()):
        n.append(1)
        _charge(led.path, f"late-{len(n)}")
        return honest(self, expect)

    monkeypatch.setattr(Ledger, "verify", verify_after_a_release)
    with pytest.raises(LedgerBusyError, match="changed while"):
        audit_data.collect(str(led.path))
