"""The attacks of issue #11, replayed as an operator with SQL access (no noise key) would.

Each test is the attack first, then what the ledger does about it now: verify
exits 4 naming what is wrong, or the change is refused, or nothing is admitted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest
from ledger_helpers import POLICY, PYTHON, REPO, load_fixture, subprocess_env
from typer.testing import CliRunner

from flows.cli_ledger import ledger_app
from ledger import Ledger, LedgerIntegrityError, LedgerOpenError, Request, key_path_for
from ledger.heads import load_checkpoint
from ledger.signing import public_key_path, signing_key_path
from mechanisms.cost import StepRun
from schemas.errors import EXIT_INTEGRITY
from schemas.policy import parse_policy


def _sql(path, *stmts, params=None):
    con = duckdb.connect(str(path))
    try:
        for s in stmts:
            con.execute(s, params or [])
    finally:
        con.close()


def _rows(path, sql, params=()):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def _policy(cap, **extra):
    pol = json.loads(json.dumps(POLICY))
    pol["domains"]["ais"]["cap"] = str(cap)
    pol["domains"]["ais"].update(extra)
    return parse_policy(pol, source=f"cap-{cap}")


def _cli(*args):
    res = CliRunner().invoke(ledger_app, [str(a) for a in args])
    assert "Traceback" not in res.output
    return res.exit_code, res.output


# -------------------------------------------------------------- 1. downgrade + raised caps


def test_a_downgrade_with_raised_caps_is_never_migrated_nor_charged(tmp_path):
    # The pre-split ledger (schema 2), attacked as in the issue: caps raised with SQL,
    # MAC columns dropped, schema_version set to 1.
    path = load_fixture("ledger_v2", tmp_path / "l.duckdb")
    _sql(path, "UPDATE domains SET cap = cap * 50 WHERE domain = 'ais'",
         "UPDATE accounts SET cap = cap * 50 WHERE domain = 'ais'",
         "ALTER TABLE domains DROP COLUMN mac", "ALTER TABLE releases DROP COLUMN mac",
         "UPDATE schema_version SET version = 1")
    led = Ledger(path)  # opening never migrates ...
    assert _rows(path, "SELECT version FROM schema_version") == [(1,)]
    with pytest.raises(LedgerOpenError, match="ledger migrate"):  # ... nor writes
        led.reserve("big", [Request("u", "ais", amount=50)], mechanism="m", parameters={})
    with pytest.raises(LedgerIntegrityError, match="cap was changed outside privpipe"):
        led.migrate()
    assert _rows(path, "SELECT version FROM schema_version") == [(1,)]
    assert _rows(path, "SELECT count(*) FROM entries WHERE user_id = 'u' AND amount > "
                       "(SELECT cap FROM entries WHERE seq = 1)") == [(0,)]


def test_editing_the_schema_version_of_a_current_ledger_fails_verify(led, ledger_path):
    led.reserve("r", [Request("u", "ais", amount=0.5)], mechanism="m", parameters={})
    _sql(ledger_path, "UPDATE schema_version SET version = 2")
    rep = Ledger(ledger_path).verify()
    # issue #26: the head counter file and the signing key show schema 4: a downgrade
    assert not rep.ok and "downgrade" in rep.message and "schema 2" in rep.message
    with pytest.raises(LedgerIntegrityError, match="refusing to migrate"):
        Ledger(ledger_path).migrate()


# -------------------------------------------------------------- 2. an old sealed row copied back


def test_an_old_sealed_domain_row_copied_back_is_detected_and_not_used(led, ledger_path):
    led.apply_policy(_policy(4))
    old_row = _rows(ledger_path, "SELECT * FROM domains WHERE domain = 'ais'")[0]
    led.apply_policy(_policy(1))  # lowered 4 -> 1
    _sql(ledger_path, "DELETE FROM domains WHERE domain = 'ais'")
    _sql(ledger_path, "INSERT INTO domains VALUES (" + ", ".join(["?"] * len(old_row)) + ")",
         params=list(old_row))
    _sql(ledger_path, "UPDATE accounts SET cap = (SELECT cap FROM domains WHERE domain = 'ais') "
                      "WHERE domain = 'ais'")
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and "domain 'ais'" in rep.message and "latest policy entry" in rep.message
    with pytest.raises(LedgerIntegrityError, match="'ais'"):
        Ledger(ledger_path).reserve("r", [Request("u", "ais", amount=3)], mechanism="m",
                                    parameters={})
    assert _rows(ledger_path, "SELECT count(*) FROM entries WHERE user_id <> ''") == [(0,)]


# -------------------------------------------------------------- 3. policy history in the chain


def test_every_policy_change_is_a_chain_entry_with_actor_time_old_and_new(led, ledger_path):
    led.apply_policy(_policy(2))
    led.apply_policy(_policy(1))
    led.apply_policy(_policy(1, description="vessel tracks"))
    hist = led.policy_history("ais")
    assert [h["change"] for h in hist] == ["create", "change", "change", "change"]
    assert [h["cap_after"] for h in hist] == [1, 2, 1, 1]
    assert [h["cap_before"] for h in hist] == [None, 1, 2, 1]
    assert hist[-1]["changed"] == ["description"]
    assert hist[-1]["new"]["definition"]["description"] == "vessel tracks"
    assert hist[-1]["old"]["definition"]["description"] == ""
    assert all(h["actor"] == "pytest" and h["created_at"] is not None for h in hist)
    assert Ledger(ledger_path).verify().ok
    # the policy entries are hashed like any other: editing one is named
    seq = hist[1]["seq"]
    _sql(ledger_path, f"UPDATE entries SET amount = amount * 10 WHERE seq = {seq}")
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and rep.first_bad_seq == seq


def test_a_cap_lowered_below_spend_is_recorded_and_those_accounts_admit_nothing(led, ledger_path):
    led.reserve("r1", [Request("u", "ais", amount=0.75), Request("v", "ais", amount=0.25),
                       Request("w", "power", notion="wevent", stream_id="s",
                               runs=(StepRun(0, 4, Fraction(1, 4)),))],
                mechanism="m", parameters={})
    lines = led.apply_policy(_policy("1/2"))
    assert any("1 account(s) above the lowered cap" in line for line in lines)
    [change] = led.policy_history("ais")[-1:]
    assert change["accounts_above_cap"] == 1 and change["cap_after"] == Fraction(1, 2)
    state = {(b["user_id"], b["domain"]): b["state"] for b in led.balances()}
    assert state[("u", "ais")] == "above a lowered cap" and state[("v", "ais")] == "ok"
    near = _rows(ledger_path, "SELECT user_id FROM near_cap")
    assert ("u",) not in near and _rows(ledger_path, "SELECT user_id FROM above_cap") == [("u",)]
    res = led.reserve("r2", [Request("u", "ais", amount=Fraction(1, 10**6))], mechanism="m",
                      parameters={})
    assert not res.admitted and res.denied[0].reason.startswith("above a lowered cap")
    # a w-event account above a lowered cap admits nothing, even in a far-away window
    pol = json.loads(json.dumps(POLICY))
    pol["domains"]["power"]["cap"] = "1/2"
    led.apply_policy(parse_policy(pol))
    res = led.reserve("r3", [Request("w", "power", notion="wevent", stream_id="s",
                                     runs=(StepRun(1000, 1001, Fraction(1, 8)),))],
                      mechanism="m", parameters={})
    assert not res.admitted and "above a lowered cap" in res.denied[0].reason
    assert Ledger(ledger_path).verify().ok


def test_history_cli_shows_the_policy_history_of_a_domain(led, ledger_path):
    led.apply_policy(_policy(2))
    code, out = _cli("history", "--domain", "ais", "--ledger", ledger_path, "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert [r["change"] for r in rows] == ["create", "change"]
    assert rows[1]["cap_before"] == 1 and rows[1]["cap_after"] == 2
    assert rows[1]["cap_before_exact"] == "1" and rows[1]["cap_after_exact"] == "2"


# -------------------------------------------------------------- 4. rollback, truncation, re-keying


@pytest.fixture
def charged(led, ledger_path):
    led.reserve("r1", [Request("u", "ais", amount=0.25)], mechanism="m", parameters={})
    return led


def test_a_backup_copied_back_is_detected_with_a_kept_checkpoint(charged, ledger_path, tmp_path):
    backup = tmp_path / "backup"
    backup.mkdir()
    for p in ledger_path.parent.glob("ledger.duckdb*"):
        shutil.copy2(p, backup / p.name)
    charged.reserve("r2", [Request("u", "ais", amount=0.5)], mechanism="m", parameters={})
    code, _ = _cli("checkpoint", "--out", tmp_path / "cp.json", "--ledger", ledger_path)
    assert code == 0
    for p in backup.iterdir():  # the operator restores the old files
        shutil.copy2(p, ledger_path.parent / p.name)
    assert Ledger(ledger_path).verify().ok  # consistent in itself ...
    code, out = _cli("verify", "--expect-head", tmp_path / "cp.json", "--ledger", ledger_path)
    assert code == EXIT_INTEGRITY and "rolled back or truncated" in out  # ... but rolled back


def test_a_rekeyed_ledger_with_its_history_deleted_is_detected(charged, ledger_path, tmp_path):
    keep = tmp_path / "auditor.pub"
    shutil.copy2(public_key_path(ledger_path), keep)  # what the auditor kept
    cp = tmp_path / "cp.json"
    charged.checkpoint(cp)
    # The operator throws the keys and the history away and starts a fresh ledger in place.
    for p in ledger_path.parent.glob("ledger.duckdb*"):
        p.unlink()
    fresh = Ledger.init(ledger_path)
    fresh.apply_policy(parse_policy(POLICY))
    assert fresh.verify().ok
    code, out = _cli("verify", "--public-key", keep, "--ledger", ledger_path)
    assert code == EXIT_INTEGRITY and "signature does not verify" in out
    rep = Ledger(ledger_path).verify(expect=[(str(cp), load_checkpoint(cp))])
    assert not rep.ok and ("re-keyed" in rep.message or "not of this one" in rep.message)


def test_a_truncated_chain_fails_the_kept_head_even_when_resealed_by_the_key_holder(
        charged, ledger_path, tmp_path):
    cp = tmp_path / "cp.json"
    charged.reserve("r2", [Request("v", "ais", amount=0.5)], mechanism="m", parameters={})
    charged.checkpoint(cp)
    head = load_checkpoint(cp)
    # someone with the keys truncates the chain and re-signs a consistent head
    _sql(ledger_path, f"DELETE FROM entries WHERE seq = {head.seq}",
         "DELETE FROM accounts WHERE user_id = 'v'")
    led = Ledger(ledger_path)
    from ledger.entries import move_head

    def tx(con):
        seq, h = con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1"
                             ).fetchall()[0]
        move_head(con, led._keys, seq, h)
    led._store.transact(tx)
    assert led.verify().ok
    rep = led.verify(expect=[(str(cp), head)])
    assert not rep.ok and "rolled back or truncated" in rep.message


def test_manifests_carrying_signed_heads_are_checked(charged, ledger_path, tmp_path):
    out = tmp_path / "out"
    (out / "r1").mkdir(parents=True)
    (out / "r1" / "manifest.json").write_text(json.dumps(
        {"release_id": "r1", "ledger_head": charged.head().to_dict()}))
    code, text = _cli("verify", "--manifests", out, "--ledger", ledger_path)
    # The kept head is consistent with the ledger; the manifest itself names no release the
    # ledger published (verify --manifests also checks the files and charges), so exit 4.
    assert "consistent with 1 kept signed head" in text
    assert code == EXIT_INTEGRITY and "not a release this ledger published" in text
    forged = charged.head().to_dict()
    forged["seq"] += 5
    (out / "r1" / "manifest.json").write_text(json.dumps({"ledger_head": forged}))
    code, text = _cli("verify", "--manifests", out, "--ledger", ledger_path)
    assert code == EXIT_INTEGRITY and "signature does not verify" in text


# -------------------------------------------------------------- 5. WAL damage after a SIGKILL


CHARGE_AND_HANG = textwrap.dedent("""
    import sys, time
    import duckdb
    from ledger import Ledger, Request
    led = Ledger(sys.argv[1])
    other = duckdb.connect(sys.argv[1])  # another thread's connection keeps the database open
    led.reserve("paid", [Request("u", "ais", amount=0.5)], mechanism="m", parameters={})
    print("COMMITTED", flush=True)
    time.sleep(60)
""")


@pytest.mark.parametrize("damage", ["truncate", "zero"])
def test_a_damaged_wal_after_sigkill_loses_no_committed_charge(led, ledger_path, damage):
    p = subprocess.Popen([PYTHON, "-c", CHARGE_AND_HANG, str(ledger_path)], cwd=REPO,
                         env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "COMMITTED"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    wal = Path(str(ledger_path) + ".wal")
    if wal.exists():
        size = wal.stat().st_size
        if damage == "truncate":
            os.truncate(wal, 0)
        else:
            wal.write_bytes(b"\0" * size)
    try:
        led = Ledger(ledger_path)
    except LedgerOpenError:  # a damaged file is a clear error, never a silent loss
        return
    [bal] = [b for b in led.balances() if b["user_id"] == "u"]
    assert bal["spent"] == Fraction(1, 2)
    assert led.verify().ok
    assert led.history("u")[0]["kind"] == "reserve"


# -------------------------------------------------------------- 6. the auditor without the keys


def test_an_auditor_checks_everything_but_the_macs_with_the_public_key(charged, ledger_path,
                                                                      tmp_path):
    keep = tmp_path / "auditor.pub"
    shutil.copy2(public_key_path(ledger_path), keep)
    for p in (key_path_for(ledger_path), signing_key_path(ledger_path)):
        shutil.move(p, tmp_path / p.name)  # the auditor has neither secret key
    code, out = _cli("verify", "--ledger", ledger_path, "--public-key", keep)
    assert code == 0 and "auditor mode" in out and "NOT checked" in out and "MACs" in out
    for argv in (["balance"], ["history", "--user", "u"], ["history", "--domain", "ais"],
                 ["releases"], ["denials"]):
        code, out = _cli(*argv, "--ledger", ledger_path, "--public-key", keep)
        assert code == 0, (argv, out)
    # tampering is still found without the noise key ...
    _sql(ledger_path, "UPDATE entries SET amount = amount - 1 WHERE user_id = 'u'")
    code, out = _cli("verify", "--ledger", ledger_path, "--public-key", keep)
    assert code == EXIT_INTEGRITY and "seq" in out
    # ... and a MAC-only change is reported as not checked, never as checked
    _sql(ledger_path, "UPDATE entries SET amount = amount + 1 WHERE user_id = 'u'",
         "UPDATE releases SET mac = 'forged'")
    rep = Ledger.open_auditor(ledger_path, public_key=keep).verify()
    assert rep.ok and "the domain and release MACs" in rep.not_checked
    assert "release MACs verified" not in rep.message


def test_the_auditor_opens_read_only_and_cannot_write(charged, ledger_path, tmp_path):
    aud = Ledger.open_auditor(ledger_path)
    with pytest.raises(LedgerIntegrityError, match="auditor"):
        aud.reserve("x", [Request("u", "ais", amount=0.1)], mechanism="m", parameters={})
    with pytest.raises(LedgerIntegrityError, match="auditor"):
        aud.noise_seeds("r1", ["u"], ["fp"], {})
    mode = ledger_path.stat().st_mode
    os.chmod(ledger_path, 0o444)  # the auditor's copy may be read-only
    try:
        assert Ledger.open_auditor(ledger_path).verify().ok or os.geteuid() == 0
    finally:
        os.chmod(ledger_path, mode)
