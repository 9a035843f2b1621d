"""Tamper evidence beyond tests/ledger/test_ledger_tamper.py.

That file covers a changed amount, forged entries, deletion, a swap of two
adjacent entries, edited step runs and balances and a whole-chain rehash.
Here: an edit of *every* entry column, reordering far apart, deleting the
first entry or everything, edits of the noise key file (one character,
truncation, permissions), a truncated or corrupted database, and the tables
outside the entry chain (release manifests, caps; protected by keyed MACs),
through `privpipe ledger verify` as an operator would run it.
"""

from __future__ import annotations

import hashlib
import os
from fractions import Fraction
from pathlib import Path

import duckdb
import harness
import pytest
from typer.testing import CliRunner

from flows.cli import app
from ledger import Ledger, Request
from mechanisms.cost import StepRun

HASHED = ("entry_id", "created_at", "actor", "release_id", "user_id", "domain", "step",
          "stream_id", "kind", "amount", "notion", "cap", "balance_after", "mechanism",
          "parameters", "detail", "reason", "flow_run_id", "input_fingerprint", "prev_hash",
          "hash")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    path = harness.make_template(tmp_path_factory.mktemp("tamper"))
    led = Ledger(path)
    led.reserve("w1", [Request(f"meter-{u}", "meters", notion="wevent", stream_id="s0",
                               runs=(StepRun(0, 8, Fraction(1, 2)),)) for u in range(2)],
                mechanism="square_wave", parameters={"e": "2"}, flow_run_id="run-1",
                input_fingerprint="fp")
    led.reserve("big", [Request("user-1", "tracks", amount=5)], mechanism="m", parameters={})
    led.record_release("w1", {"release_id": "w1", "files": {"samples": "samples.parquet"}},
                       "settled")
    assert led.verify().ok and led.verify().entries_checked >= 8
    return path


@pytest.fixture()
def ledger(base, tmp_path) -> Path:
    return harness.clone_ledger(base, tmp_path / "home")


def _sql(path: Path, *stmts: str, params: list | None = None) -> None:
    con = duckdb.connect(str(path))
    try:
        for s in stmts:
            con.execute(s, params or [])
    finally:
        con.close()


def _verify_cli(path: Path) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["ledger", "verify", "--ledger", str(path)])
    assert "Traceback" not in res.output
    return res.exit_code, res.output


def _entry(path: Path, seq: int) -> dict:
    con = duckdb.connect(str(path), read_only=True)
    try:
        cur = con.execute("SELECT * FROM entries WHERE seq = ?", [seq])
        names = [d[0] for d in cur.description]
        return dict(zip(names, cur.fetchone(), strict=True))
    finally:
        con.close()


@pytest.mark.parametrize("column", HASHED)
def test_editing_any_column_of_any_entry_is_named(ledger, column):
    for seq in (1, 4, 7):
        e = _entry(ledger, seq)
        if column in ("amount", "cap", "balance_after"):
            new = f"CAST(coalesce({column}, 0) + 1 AS HUGEINT)"
        elif column == "created_at":
            new = "created_at + INTERVAL 1 SECOND"
        else:
            new = f"coalesce({column}, '') || 'x'"
        _sql(ledger, f"UPDATE entries SET {column} = {new} WHERE seq = {seq}")  # noqa: S608
        rep = Ledger(ledger).verify()
        assert not rep.ok, (column, seq)
        assert rep.first_bad_seq == seq, rep.message
        code, out = _verify_cli(ledger)
        assert code == 4 and f"seq {seq}" in out
        # restore the original value, so the next seq is tested on an intact chain
        _sql(ledger, f"UPDATE entries SET {column} = ? WHERE seq = {seq}",  # noqa: S608
             params=[e[column]])
        assert Ledger(ledger).verify().ok


def test_reordering_far_apart_is_named(ledger):
    _sql(ledger, "UPDATE entries SET seq = -2 WHERE seq = 2",
         "UPDATE entries SET seq = 2 WHERE seq = 6", "UPDATE entries SET seq = 6 WHERE seq = -2",
         "UPDATE step_runs SET seq = -2 WHERE seq = 2",
         "UPDATE step_runs SET seq = 2 WHERE seq = 6",
         "UPDATE step_runs SET seq = 6 WHERE seq = -2")
    rep = Ledger(ledger).verify()
    assert not rep.ok and rep.first_bad_seq == 2


def test_deleting_the_first_entry_is_named(ledger):
    _sql(ledger, "DELETE FROM step_runs WHERE seq = 1", "DELETE FROM entries WHERE seq = 1")
    rep = Ledger(ledger).verify()
    assert not rep.ok and rep.first_bad_seq == 1 and "missing" in rep.message


def test_emptying_the_ledger_and_resetting_the_head_fails_the_seal(ledger):
    _sql(ledger, "DELETE FROM step_runs", "DELETE FROM entries", "UPDATE accounts SET spent = 0",
         "UPDATE chain_head SET last_seq = 0, last_hash = '" + "0" * 64 + "'")
    code, out = _verify_cli(ledger)
    assert code == 4 and "seal" in out


def test_key_file_with_one_character_changed_is_detected(ledger):
    kp = Path(str(ledger) + ".key")
    text = kp.read_text().strip()
    kp.write_text(("0" if text[0] != "0" else "1") + text[1:] + "\n")
    os.chmod(kp, 0o600)
    code, out = _verify_cli(ledger)
    assert code == 4 and "noise key" in out


def test_truncated_key_file_is_bad_input(ledger):
    kp = Path(str(ledger) + ".key")
    kp.write_text(kp.read_text()[:20])
    os.chmod(kp, 0o600)
    code, out = _verify_cli(ledger)
    assert code == 2 and "malformed" in out


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o666])
def test_key_readable_by_others_is_refused_by_every_command(ledger, mode):
    os.chmod(Path(str(ledger) + ".key"), mode)
    for argv in (["ledger", "verify"], ["ledger", "balance"], ["ledger", "releases"]):
        res = CliRunner().invoke(app, [*argv, "--ledger", str(ledger)])
        assert res.exit_code == 2, res.output
        assert "permissions" in res.output and "chmod 600" in res.output


@pytest.mark.parametrize("how", ["half", "header", "tail"])
def test_truncated_or_corrupted_database_is_never_ok(ledger, how):
    data = ledger.read_bytes()
    if how == "half":
        ledger.write_bytes(data[: len(data) // 2])
    elif how == "header":
        ledger.write_bytes(b"\0" * 4096 + data[4096:])
    else:
        ledger.write_bytes(data[:-4096])
    code, out = _verify_cli(ledger)
    assert code in (2, 4), out
    assert "internal error" not in out and "error" in out


def test_key_bytes_are_not_recoverable_from_the_database(ledger):
    # the ledger stores an HMAC fingerprint of the noise key and the signing key's public
    # half, never a secret key or its hash
    key_hex = Path(str(ledger) + ".key").read_text().strip()
    key = bytes.fromhex(key_hex)
    sign_hex = Path(str(ledger) + ".sign").read_text().strip()
    blob = ledger.read_bytes()
    for needle in (key, key_hex.encode(), hashlib.sha256(key).hexdigest().encode(),
                   bytes.fromhex(sign_hex), sign_hex.encode()):
        assert needle not in blob


def test_edited_release_manifest_is_detected(ledger):
    _sql(ledger, "UPDATE releases SET manifest = '{\"release_id\": \"w1\", \"files\": {}}' "
                 "WHERE release_id = 'w1'")
    rep = Ledger(ledger).verify()
    assert not rep.ok and "'w1'" in rep.message and "manifest" in rep.message
    code, _ = _verify_cli(ledger)
    assert code == 4


def test_raised_account_cap_is_detected(ledger):
    _sql(ledger, "UPDATE accounts SET cap = cap * 100 WHERE user_id = 'user-0'")
    led = Ledger(ledger)
    res = led.reserve("over", [Request("user-0", "tracks", amount=50)], mechanism="m",
                      parameters={})
    # the forged cap is not honoured, and verify names the account
    assert res.denied and not res.admitted
    rep = led.verify()
    assert not rep.ok and "user-0" in rep.message and "cap" in rep.message


def test_raised_domain_cap_is_detected(ledger):
    _sql(ledger, "UPDATE domains SET cap = cap * 100 WHERE domain = 'tracks'")
    rep = Ledger(ledger).verify()
    assert not rep.ok and "'tracks'" in rep.message
