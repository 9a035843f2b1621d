"""Tampering with plain duckdb (a separate connection) is detected and the entry named."""

from __future__ import annotations

import hashlib
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_helpers import POLICY, POLICY_ENTRIES, copy_tree

from ledger import Ledger, LedgerIntegrityError, Request, Settlement
from ledger.chain import HASHED_COLUMNS, BatchEncoder, canonical
from mechanisms.cost import Cost, CostItem, StepRun
from schemas.errors import EXIT_INTEGRITY
from schemas.policy import parse_policy

P = POLICY_ENTRIES  # the fixture's policy writes these entries (seq 1..P) before any charge


@pytest.fixture(scope="module")
def filled_built(tmp_path_factory) -> Path:
    """The directory of `filled`'s ledger, built once per module."""
    root = tmp_path_factory.mktemp("filled")
    led = Ledger.init(root / "ledger.duckdb", actor="pytest")
    led.apply_policy(parse_policy(POLICY, source="test-policy"))
    _fill(led)
    return root


@pytest.fixture
def filled(filled_built, ledger_path):
    """A private copy of the filled ledger at `ledger_path` (each test tampers with its own)."""
    copy_tree(filled_built, ledger_path.parent)
    led = Ledger(ledger_path, actor="pytest")
    assert led.verify().ok
    return led


def _fill(led):
    """Four reservations of a and b, one settlement of a, one w-event reservation of c."""
    for i in range(4):
        led.reserve(f"r{i}", [Request("a", "ais", amount=0.1), Request("b", "ais", amount=0.2)],
                    mechanism="m", parameters={"i": i})
    half = Cost("gp", Fraction(1, 10), (CostItem("x", "gp", Fraction(1, 20)),))
    led.settle("r0", [Settlement("a", "ais", "release", half)])
    led.reserve("w", [Request("c", "power", notion="wevent", stream_id="s",
                              runs=(StepRun(0, 6, Fraction(1, 4)),))],
                mechanism="sw", parameters={})
    assert led.verify().ok


def _sql(path, *stmts):
    con = duckdb.connect(str(path))
    try:
        for s in stmts:
            con.execute(s)
    finally:
        con.close()


def _entry_id(path, seq):
    con = duckdb.connect(str(path))
    try:
        return con.execute("SELECT entry_id FROM entries WHERE seq = ?", [seq]).fetchall()[0][0]
    finally:
        con.close()


def _fails_at(led, seq, entry_id=None):
    rep = Ledger(led.path).verify()
    assert not rep.ok
    assert rep.first_bad_seq == seq, rep.message
    if entry_id is not None:
        assert rep.first_bad_entry_id == entry_id and entry_id in rep.message
    with pytest.raises(LedgerIntegrityError) as err:
        Ledger(led.path).verify_or_raise()
    assert err.value.exit_code == EXIT_INTEGRITY and err.value.seq == seq
    return rep


def test_changed_amount_is_named(filled, ledger_path):
    eid = _entry_id(ledger_path, P + 5)
    _sql(ledger_path, f"UPDATE entries SET amount = amount + 1 WHERE seq = {P + 5}")
    rep = _fails_at(filled, P + 5, eid)
    assert "does not match its hash" in rep.message


def _forge(path, seq, **changes):
    """Edit entry `seq` and recompute its own hash, as a forger without the key would."""
    con = duckdb.connect(str(path))
    cols = [d[0] for d in con.execute("SELECT * FROM entries LIMIT 0").description]
    row = dict(zip(cols, con.execute("SELECT * FROM entries WHERE seq = ?", [seq]).fetchall()[0],
                   strict=True))
    row.update(changes)
    h = hashlib.sha256(row["prev_hash"].encode() + b"|" + canonical(row)).hexdigest()
    con.execute("UPDATE entries SET amount = CAST(? AS HUGEINT), actor = ?, hash = ? WHERE seq = ?",
                [str(row["amount"]), row["actor"], h, seq])
    con.close()


def test_forged_entry_with_recomputed_hash_breaks_the_next_link(filled, ledger_path):
    _forge(ledger_path, P + 3, actor="someone else")
    rep = _fails_at(filled, P + 4, _entry_id(ledger_path, P + 4))
    assert "prev_hash" in rep.message


def test_forged_amount_with_recomputed_hash_fails_the_balance_replay(filled, ledger_path):
    con = duckdb.connect(str(ledger_path))
    amount = con.execute("SELECT amount FROM entries WHERE seq = ?", [P + 3]).fetchall()[0][0]
    con.close()
    _forge(ledger_path, P + 3, amount=int(amount) // 2)
    rep = _fails_at(filled, P + 3, _entry_id(ledger_path, P + 3))
    assert "balance_after" in rep.message


def test_deleted_entry_is_named(filled, ledger_path):
    _sql(ledger_path, f"DELETE FROM entries WHERE seq = {P + 6}")
    rep = _fails_at(filled, P + 6)
    assert "missing" in rep.message and _entry_id(ledger_path, P + 7) in rep.message


def test_deleted_last_entry_is_detected_by_the_head(filled, ledger_path):
    _sql(ledger_path, "DELETE FROM step_runs WHERE seq = (SELECT max(seq) FROM entries)",
         "DELETE FROM entries WHERE seq = (SELECT max(seq) FROM entries)")
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and "chain head" in rep.message


def test_swapped_entries_are_named(filled, ledger_path):
    eid3 = _entry_id(ledger_path, P + 3)
    _sql(ledger_path, f"UPDATE entries SET seq = -1 WHERE seq = {P + 3}",
         f"UPDATE entries SET seq = {P + 3} WHERE seq = {P + 4}",
         f"UPDATE entries SET seq = {P + 4} WHERE seq = -1")
    rep = _fails_at(filled, P + 3)
    assert eid3 not in rep.message  # the entry now at seq 3 is the former seq 4


def test_edited_step_run_is_detected(filled, ledger_path):
    _sql(ledger_path, "UPDATE step_runs SET run_stop = run_stop - 1")
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and rep.first_bad_seq is not None


def test_edited_account_balance_is_detected(filled, ledger_path):
    _sql(ledger_path, "UPDATE accounts SET spent = 0 WHERE user_id = 'b'")
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and "recomputed from the entries" in rep.message


def test_whole_chain_rehashed_without_the_key_fails_the_seal(filled, ledger_path):
    con = duckdb.connect(str(ledger_path))
    cols = [d[0] for d in con.execute("SELECT * FROM entries LIMIT 0").description]
    rows = [dict(zip(cols, r, strict=True))
            for r in con.execute("SELECT * FROM entries ORDER BY seq").fetchall()]
    runs = {}
    for seq, a, b, q in con.execute("SELECT seq, run_start, run_stop, amount FROM step_runs "
                                    "ORDER BY seq, run_start").fetchall():
        runs.setdefault(seq, []).append((a, b, q))
    prev = "0" * 64
    rows[1]["reason"] = "forged"
    for r in rows:
        h = hashlib.sha256(prev.encode() + b"|" + canonical(r, runs.get(r["seq"], []))).hexdigest()
        con.execute("UPDATE entries SET prev_hash = ?, hash = ?, reason = ? WHERE seq = ?",
                    [prev, h, r["reason"], r["seq"]])
        prev = h
    con.execute("UPDATE chain_head SET last_hash = ?", [prev])
    con.close()
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and "seal" in rep.message


def test_batch_encoder_matches_canonical():
    shared = {"created_at": "2026-01-01 00:00:00.000001", "actor": "a'b", "release_id": "r",
              "mechanism": None, "parameters": '{"k":"é"}', "flow_run_id": None,
              "input_fingerprint": "fp"}
    enc = BatchEncoder(shared)
    for i, user in enumerate(["u", "ü\n", '"; DROP', "x" * 100]):
        row = {"seq": i + 1, "entry_id": f"e{i}", "user_id": user, "domain": "d", "step": "s",
               "stream_id": "", "kind": "reserve", "amount": 10**23 + i, "notion": "gp",
               "cap": 5, "balance_after": None, "detail": "{}", "reason": "admitted"}
        runs = [(0, 3, 7)] if i % 2 else []
        assert enc.encode(row, runs) == canonical({**shared, **row}, runs)


def test_edited_release_manifest_or_state_is_detected(filled, ledger_path):
    filled.record_release("r0", {"files": ["a.parquet"]}, "settled")
    assert Ledger(ledger_path).verify().ok
    _sql(ledger_path, "UPDATE releases SET manifest = '{\"files\": []}' WHERE release_id = 'r0'")
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and "release 'r0'" in rep.message
    _sql(ledger_path, "UPDATE releases SET manifest = '{\"files\":[\"a.parquet\"]}', "
                      "state = 'closed' WHERE release_id = 'r0'")
    assert not Ledger(ledger_path).verify().ok


def test_raised_domain_cap_is_detected_and_never_used(filled, ledger_path):
    _sql(ledger_path, "UPDATE domains SET cap = cap * 100 WHERE domain = 'ais'")
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and "domain 'ais'" in rep.message
    with pytest.raises(LedgerIntegrityError, match="changed outside privpipe"):
        Ledger(ledger_path).reserve("more", [Request("a", "ais", amount=5)], mechanism="m",
                                    parameters={})


def test_raised_account_cap_is_detected_and_never_used(filled, ledger_path):
    _sql(ledger_path, "UPDATE accounts SET cap = cap * 100 WHERE user_id = 'b'")
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and "differs from the domain's cap" in rep.message
    # b has spent 0.8 of 1.0: admission still uses the domain's cap
    res = Ledger(ledger_path).reserve("more", [Request("b", "ais", amount=0.5)], mechanism="m",
                                      parameters={})
    assert not res.admitted and res.denied[0].remaining == Fraction(1, 5)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ['"', "\\", "\\\"", "\x00", "\x1f", "\x7f", "\u2028", "é", "%s", "", "null"])
_INT = st.none() | st.integers(-(2**127), 2**127 - 1)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_TEXT, st.none() | _TEXT, _INT, _INT,
                          st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9),
                                             st.integers(-9, 10**24)), max_size=2)),
                min_size=1, max_size=6),
       st.sampled_from([{}, {"actor": 'a"\n', "mechanism": None, "created_at":
                             "2026-01-01 00:00:00.000001"}]))
def test_vectorised_encoding_is_canonical_for_any_text(rows, shared):
    enc = BatchEncoder(shared)
    cols = {c: [] for c in HASHED_COLUMNS if c not in shared}
    runs = []
    for i, (user, detail, amount, bal, rr) in enumerate(rows):
        row = {"seq": i + 1, "entry_id": "e" * 32, "created_at": "2026-12-01 06:00:00.123456",
               "actor": "x", "release_id": user[::-1], "user_id": user, "domain": "d",
               "step": "s", "stream_id": "", "kind": "reserve", "amount": amount or 0,
               "notion": "gp", "cap": bal, "balance_after": amount, "mechanism": user,
               "parameters": detail, "detail": detail, "reason": user + "!",
               "flow_run_id": None, "input_fingerprint": detail}
        for c in cols:
            cols[c].append(row[c])
        runs.append(rr)
        assert enc.encode(row, rr) == canonical({**row, **shared}, rr)
    got = enc.encode_columns(cols, runs)
    want = [canonical({**{c: cols[c][i] for c in cols}, **shared}, runs[i])
            for i in range(len(rows))]
    assert got == want


_TAMPERING = {
    "amount": [f"UPDATE entries SET amount = amount + 1 WHERE seq = {P + 5}"],
    "reason": [f"UPDATE entries SET reason = 'x' WHERE seq = {P + 2}"],
    "policy entry": ["UPDATE entries SET amount = amount * 2 WHERE kind = 'policy'"],
    "hostile-id entry": ["UPDATE entries SET detail = '{}' WHERE user_id = 'q\"\\\n'"],
    "created_at": ["UPDATE entries SET created_at = created_at + INTERVAL 1 MICROSECOND "
                   f"WHERE seq = {P + 3}"],
    "deleted": [f"DELETE FROM entries WHERE seq = {P + 6}"],
    "deleted last": ["DELETE FROM step_runs WHERE seq = (SELECT max(seq) FROM entries)",
                     "DELETE FROM entries WHERE seq = (SELECT max(seq) FROM entries)"],
    "swapped": [f"UPDATE entries SET seq = -1 WHERE seq = {P + 3}",
                f"UPDATE entries SET seq = {P + 3} WHERE seq = {P + 4}",
                f"UPDATE entries SET seq = {P + 4} WHERE seq = -1"],
    "step run": ["UPDATE step_runs SET run_stop = run_stop - 1"],
    "step run kind": ["UPDATE step_runs SET kind = 'refund'"],
    "orphan step run": ["INSERT INTO step_runs SELECT 999, kind, user_id, domain, stream_id, "
                        "run_start, run_stop, amount FROM step_runs LIMIT 1"],
    "gp balance": ["UPDATE accounts SET spent = 0 WHERE user_id = 'b'"],
    "w-event balance": ["UPDATE accounts SET spent = 0 WHERE user_id = 'c'"],
    "account without entries": ["INSERT INTO accounts VALUES ('z', 'ais', '', "
                                "(SELECT cap FROM domains WHERE domain = 'ais'), 5)"],
    "account cap": ["UPDATE accounts SET cap = cap * 100 WHERE user_id = 'b'"],
    "domain cap": ["UPDATE domains SET cap = cap * 100 WHERE domain = 'ais'"],
    "manifest": ["UPDATE releases SET state = 'closed' WHERE release_id = 'r0'"],
    "head": ["UPDATE chain_head SET last_seq = last_seq + 1"],
}


@pytest.mark.parametrize("what", sorted(_TAMPERING))
def test_verify_never_passes_a_tampered_ledger(filled, ledger_path, what):
    filled.reserve("h", [Request('q"\\\n', "ais", amount=0.1)], mechanism="m", parameters={})
    filled.close("r3", "test")
    assert Ledger(ledger_path).verify().ok  # it does pass a good ledger, hostile ids too
    _sql(ledger_path, *_TAMPERING[what])
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and rep.message.startswith("ledger integrity check failed")
