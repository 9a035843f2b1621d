"""The attacks of issue #26 on `verify`, replayed as the reviewer did: plain duckdb and files.

Each test is the attack first (plain ``duckdb.connect(path)`` edits, key files
written or copied, using only the published chain format), then what the CLI
says about it now: `privpipe ledger verify` / `audit` exit 4 naming what is
wrong, or `migrate` refuses. Every one of them passed (exit 0) before the fix.
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from ledger_helpers import POLICY, PYTHON, REPO, copy_tree, subprocess_env
from typer.testing import CliRunner

from flows.cli import app
from ledger import Ledger, key_path_for, keys, schema, signing
from ledger.amounts import UNITS_PER_EPSILON
from ledger.chain import GENESIS_HASH, canonical, entry_hash
from schemas.errors import EXIT_BAD_INPUT, EXIT_INTEGRITY, EXIT_OK
from schemas.policy import parse_policy

QUARTER = UNITS_PER_EPSILON // 4


def _cli(*args):
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output, res.output
    return res.exit_code, res.output


def _ledger_cli(*args):
    return _cli("ledger", *args)


def _charge(path, release, user="u", eps="0.25"):
    return _ledger_cli("charge", "--user", user, "--domain", "ais", "--epsilon", eps,
                       "--release", release, "--ledger", path)


def _spent(path, user="u"):
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT spent FROM accounts WHERE user_id = ?", [user]
                           ).fetchall()[0][0]
    finally:
        con.close()


@pytest.fixture(scope="module")
def three_built(tmp_path_factory) -> Path:
    """The directory of `three`, built once per module (each test attacks its own copy)."""
    root = tmp_path_factory.mktemp("three")
    path = root / "ops" / "ledger.duckdb"
    path.parent.mkdir()
    Ledger.init(path).apply_policy(parse_policy(POLICY))
    for r in ("r1", "r2", "r3"):
        assert _charge(path, r)[0] == EXIT_OK
    shutil.copy2(signing.public_key_path(path), root / "AUDITOR.pub")
    return root


@pytest.fixture
def three(three_built, tmp_path):
    """A ledger with three charges of 1/4 to user u (r1, r2, r3) and the auditor's copies."""
    copy_tree(three_built, tmp_path)
    path, keep = tmp_path / "ops" / "ledger.duckdb", tmp_path / "AUDITOR.pub"
    assert _spent(path) == 3 * QUARTER
    return path, keep


# ---------------------------------------------------------------- what the attacker does


def _entries(con):
    cur = con.execute("SELECT * FROM entries ORDER BY seq")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _runs(con, seq):
    return [list(r) for r in con.execute(
        "SELECT run_start, run_stop, amount FROM step_runs WHERE seq = ? "
        "ORDER BY run_start, run_stop, amount", [seq]).fetchall()]


def _rehash(con):
    """Re-link the whole chain with plain SHA-256 (the published format); return the head."""
    prev = GENESIS_HASH
    for e in _entries(con):
        e["prev_hash"] = prev
        h = entry_hash(prev, canonical(e, _runs(con, e["seq"])))
        con.execute("UPDATE entries SET prev_hash = ?, hash = ? WHERE seq = ?",
                    [prev, h, e["seq"]])
        prev = h
    n = con.execute("SELECT count(*) FROM entries").fetchall()[0][0]
    con.execute("UPDATE chain_head SET last_seq = ?, last_hash = ? WHERE id = 1", [n, prev])
    return n, prev


def _delete_release_and_renumber(con, release):
    """Delete a release's entries, renumber the later ones, lower the balances after it."""
    gone = con.execute("SELECT seq, amount FROM entries WHERE release_id = ? AND kind = "
                       "'reserve'", [release]).fetchall()
    last = con.execute("SELECT max(seq) FROM entries WHERE release_id = ?", [release]
                       ).fetchall()[0][0]
    n_gone = con.execute("SELECT count(*) FROM entries WHERE release_id = ?", [release]
                         ).fetchall()[0][0]
    amount = sum(a for _, a in gone)
    con.execute("DELETE FROM entries WHERE release_id = ?", [release])
    con.execute("UPDATE entries SET balance_after = balance_after - ? WHERE seq > ? AND "
                "user_id = 'u' AND balance_after IS NOT NULL", [amount, last])
    for e in _entries(con):
        if e["seq"] > last:
            detail = e["detail"]
            if detail:
                detail = re.sub(r'"reserve_seq":(\d+)',
                                lambda m: f'"reserve_seq":{int(m.group(1)) - n_gone}', detail)
            con.execute("UPDATE entries SET seq = ?, detail = ? WHERE seq = ?",
                        [e["seq"] - n_gone, detail, e["seq"]])
    con.execute("UPDATE accounts SET spent = spent - ? WHERE user_id = 'u'", [amount])


def _downgrade(path, release, noise_key=None):
    """Schema version 2, a middle release deleted, the chain renumbered and re-hashed.

    With the noise key (not the signing key) the v2 seal and domain MACs are
    recomputed too, as an operator holding only the noise key can.
    """
    con = duckdb.connect(str(path))
    try:
        con.execute("UPDATE schema_version SET version = 2")
        _delete_release_and_renumber(con, release)
        seq, h = _rehash(con)
        if noise_key is not None:
            con.execute("UPDATE chain_head SET seal = ? WHERE id = 1",
                        [keys.chain_seal(noise_key, seq, h)])
            cols = ", ".join(schema.DOMAIN_MAC_COLUMNS)
            for row in con.execute(f"SELECT {cols} FROM domains").fetchall():  # noqa: S608
                con.execute("UPDATE domains SET mac = ? WHERE domain = ?",
                            [schema.domain_mac(noise_key, row, 2), row[0]])
    finally:
        con.close()


def _sign_as_attacker(priv, con, seq, h):
    """Sign a head with the attacker's own key, in the format the file's version uses."""
    ledger_id = con.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchall()[0][0]
    version = con.execute("SELECT version FROM schema_version").fetchall()[0][0]
    extra = {}
    if "counter" in inspect.signature(signing.sign_head).parameters:
        extra["counter"] = con.execute("SELECT counter FROM chain_head").fetchall()[0][0]
    return signing.sign_head(priv, ledger_id, version, seq, h, **extra)


def _vouch_for_itself(path, release):
    """Drop the last charge, put a new key pair's public half in meta, sign the head."""
    priv = Ed25519PrivateKey.generate()
    public = signing.public_bytes(priv)
    con = duckdb.connect(str(path))
    try:
        amount = con.execute("SELECT sum(amount) FROM entries WHERE release_id = ? AND kind = "
                             "'reserve'", [release]).fetchall()[0][0]
        con.execute("DELETE FROM entries WHERE release_id = ?", [release])
        con.execute("UPDATE accounts SET spent = spent - ? WHERE user_id = 'u'", [amount])
        seq, h = con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1"
                             ).fetchall()[0]
        con.execute("UPDATE meta SET value = ? WHERE key = 'signing_public_key'",
                    [public.hex()])
        con.execute("UPDATE meta SET value = ? WHERE key = 'signing_key_fingerprint'",
                    [signing.fingerprint(public)])
        con.execute("UPDATE chain_head SET last_seq = ?, last_hash = ?, signature = ? "
                    "WHERE id = 1", [seq, h, _sign_as_attacker(priv, con, seq, h)])
    finally:
        con.close()


# ---------------------------------------------------------------- 1. downgrade


def test_a_downgrade_to_v2_with_a_rewritten_chain_fails_the_auditors_public_key(three):
    path, keep = three
    _downgrade(path, "r2")
    assert _spent(path) == 2 * QUARTER  # the balance dropped 0.75 -> 0.5
    code, out = _ledger_cli("verify", "--public-key", keep, "--ledger", path)
    assert code == EXIT_INTEGRITY, out
    assert "downgrade" in out and "schema 2" in out


def test_a_downgrade_resealed_with_the_noise_key_fails_and_is_never_migrated(three, tmp_path):
    path, keep = three
    cp = tmp_path / "before.json"
    assert _ledger_cli("checkpoint", "--out", cp, "--ledger", path)[0] == EXIT_OK
    noise = keys.load_key(key_path_for(path))
    _downgrade(path, "r2", noise_key=noise)
    code, out = _ledger_cli("verify", "--ledger", path)  # the operator's own verify
    assert code == EXIT_INTEGRITY and "downgrade" in out, out
    # the signing-key holder's migrate refuses it instead of signing the forged chain
    code, out = _ledger_cli("migrate", "--ledger", path)
    assert code == EXIT_INTEGRITY and "refusing to migrate" in out and "downgrade" in out, out
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(2,)]
    con.close()
    code, out = _ledger_cli("verify", "--expect-head", cp, "--ledger", path)
    assert code == EXIT_INTEGRITY, out


def test_a_downgrade_with_the_signing_key_files_removed_still_fails_a_pinned_fingerprint(
        three, tmp_path):
    path, keep = three
    fp = signing.fingerprint(signing.load_public_key(keep))
    _downgrade(path, "r2")
    for p in path.parent.iterdir():  # only the database reaches the auditor
        if p != path:
            p.unlink()
    code, out = _ledger_cli("verify", "--expect-fingerprint", fp, "--ledger", path)
    assert code == EXIT_INTEGRITY and "downgrade" in out, out


# ---------------------------------------------------------------- 2. the ledger vouches for itself


def _auditor_copy(path, tmp_path, *suffixes):
    """The ledger file (and the given companion files, if they exist) in a fresh directory."""
    dst = tmp_path / "auditor" / "ledger.duckdb"
    dst.parent.mkdir()
    shutil.copy2(path, dst)
    for s in suffixes:
        if Path(str(path) + s).exists():
            shutil.copy2(str(path) + s, str(dst) + s)
    return dst


def test_a_ledger_signed_by_a_key_in_its_own_meta_is_not_independently_verified(three,
                                                                                tmp_path):
    path, _ = three
    copy = _auditor_copy(path, tmp_path)
    _vouch_for_itself(copy, "r3")
    code, out = _ledger_cli("verify", "--ledger", copy)
    assert code == EXIT_INTEGRITY and "not independently verified" in out.lower(), out
    assert "Ed25519-signed head verified" not in out


def test_a_ledger_signed_by_a_key_in_its_own_meta_fails_the_pinned_fingerprint(three,
                                                                               tmp_path):
    path, keep = three
    fp = signing.fingerprint(signing.load_public_key(keep))
    copy = _auditor_copy(path, tmp_path, ".pin")  # the pin written at init, next to it
    _vouch_for_itself(copy, "r3")
    code, out = _ledger_cli("verify", "--ledger", copy)
    assert code == EXIT_INTEGRITY and "pinned" in out, out
    code, out = _ledger_cli("verify", "--expect-fingerprint", fp, "--ledger", copy)
    assert code == EXIT_INTEGRITY and "fingerprint" in out, out
    code, out = _ledger_cli("verify", "--public-key", keep, "--ledger", copy)
    assert code == EXIT_INTEGRITY and "signature does not verify" in out, out


def test_init_prints_the_fingerprint_the_auditor_pins(tmp_path):
    path = tmp_path / "ledger.duckdb"
    code, out = _ledger_cli("init", "--ledger", path)
    fp = signing.fingerprint(signing.load_public_key(signing.public_key_path(path)))
    assert code == EXIT_OK and fp in out
    assert Path(str(path) + ".pin").read_text().strip() == fp
    code, out = _ledger_cli("verify", "--expect-fingerprint", fp, "--ledger", path)
    assert code == EXIT_OK and "independently" not in out, out
    code, out = _ledger_cli("verify", "--expect-fingerprint", "ab" * 32, "--ledger", path)
    assert code == EXIT_INTEGRITY and "fingerprint" in out, out
    code, out = _ledger_cli("verify", "--expect-fingerprint", "xyz", "--ledger", path)
    assert code == EXIT_BAD_INPUT, out


# ---------------------------------------------------------------- 3. keyless truncation


def _truncate_by_restoring_the_head(path, after):
    """Run `after()`, then delete what it wrote and put the saved head and accounts back."""
    con = duckdb.connect(str(path))
    head = con.execute("SELECT * FROM chain_head").fetchall()[0]
    accounts = con.execute("SELECT * FROM accounts").fetchall()
    n = con.execute("SELECT max(seq) FROM entries").fetchall()[0][0]
    con.close()
    after()
    con = duckdb.connect(str(path))
    try:
        con.execute("DELETE FROM entries WHERE seq > ?", [n])
        con.execute("DELETE FROM accounts")
        con.executemany("INSERT INTO accounts VALUES (?, ?, ?, ?, ?)", accounts)
        con.execute("DELETE FROM chain_head")
        con.execute("INSERT INTO chain_head VALUES (" + ", ".join("?" * len(head)) + ")",
                    list(head))
    finally:
        con.close()


def test_a_truncation_by_restoring_an_old_head_row_is_detected(three, tmp_path):
    path, keep = three
    _truncate_by_restoring_the_head(path, lambda: _charge(path, "c2", eps="0.25"))
    assert _spent(path) == 3 * QUARTER  # c2's budget is free again
    code, out = _ledger_cli("verify", "--ledger", path)
    assert code == EXIT_INTEGRITY and "counter" in out, out
    code, out = _ledger_cli("verify", "--public-key", keep, "--ledger", path)
    assert code == EXIT_INTEGRITY and "counter" in out, out
    code, out = _charge(path, "c3", eps="0.25")  # c2's budget is not spent again
    assert code == EXIT_INTEGRITY, out


def test_a_truncation_is_detected_by_a_head_the_auditor_kept_as_seq_and_hash(three, tmp_path):
    path, keep = three
    kept = {}

    def charge_and_keep():
        _charge(path, "c2", eps="0.25")
        kept["head"] = Ledger(path).head()

    _truncate_by_restoring_the_head(path, charge_and_keep)
    copy = _auditor_copy(path, tmp_path)  # no counter file where the auditor is
    h = kept["head"]
    code, out = _ledger_cli("verify", "--public-key", keep, "--ledger", copy)
    assert code == EXIT_OK and "head counter" in out, out  # named as not checked
    code, out = _ledger_cli("verify", "--public-key", keep, "--expect-head",
                            f"{h.seq}:{h.hash}", "--ledger", copy)
    assert code == EXIT_INTEGRITY and "rolled back or truncated" in out, out


def test_the_head_counter_file_is_private_and_follows_every_head_write(three):
    path, _ = three
    counter = Path(str(path) + ".counter")
    assert counter.stat().st_mode & 0o777 == 0o600
    before = json.loads(counter.read_text())["counter"]
    assert _charge(path, "c2")[0] == EXIT_OK
    data = json.loads(counter.read_text())
    head = Ledger(path).head()
    assert data["counter"] == before + 2 == head.counter  # reserve, then settle
    assert (data["seq"], data["hash"]) == (head.seq, head.hash)


# ---------------------------------------------------------------- 4. migrate refuses clearly


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_migrate_refuses_an_edited_schema_version_with_a_clear_message(three, version):
    path, _ = three
    noise = keys.load_key(key_path_for(path))
    con = duckdb.connect(str(path))
    con.execute("UPDATE schema_version SET version = ?", [version])
    seq, h = con.execute("SELECT last_seq, last_hash FROM chain_head").fetchall()[0]
    con.execute("UPDATE chain_head SET seal = ?", [keys.chain_seal(noise, seq, h)])
    con.close()
    code, out = _ledger_cli("migrate", "--ledger", path)
    assert code in (EXIT_BAD_INPUT, EXIT_INTEGRITY) and "refusing to migrate" in out, out


def test_the_cli_as_a_process_exits_4_on_the_downgrade(three):
    path, keep = three
    _downgrade(path, "r2")
    res = subprocess.run([PYTHON, "-m", "flows.cli", "ledger", "verify", "--public-key",
                          str(keep), "--ledger", str(path)], cwd=REPO, env=subprocess_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == EXIT_INTEGRITY, res.stdout + res.stderr
    assert "downgrade" in res.stdout + res.stderr


# ---------------------------------------------------------------- 5. audit


def test_audit_takes_the_public_key_and_a_kept_head(three, tmp_path):
    path, keep = three
    copy = _auditor_copy(path, tmp_path)
    _vouch_for_itself(copy, "r3")
    code, out = _cli("audit", "--ledger", copy, "--out", tmp_path / "o1")
    assert code == EXIT_INTEGRITY, out
    code, out = _cli("audit", "--ledger", copy, "--public-key", keep, "--out", tmp_path / "o2")
    assert code == EXIT_INTEGRITY, out
    h = Ledger(path).head()
    code, out = _cli("audit", "--ledger", path, "--expect-head", f"{h.seq + 1}:{h.hash}",
                     "--out", tmp_path / "o3")
    assert code == EXIT_INTEGRITY, out
    code, out = _cli("audit", "--ledger", path, "--public-key", keep, "--expect-head",
                     f"{h.seq}:{h.hash}", "--out", tmp_path / "o4")
    assert code == EXIT_OK, out


def test_a_public_key_file_replaced_beside_the_ledger_fails_the_operators_verify(three):
    path, _ = three
    other = signing.public_bytes(Ed25519PrivateKey.generate())
    signing.public_key_path(path).write_text(other.hex() + "\n")  # what auditors would be given
    code, out = _ledger_cli("verify", "--ledger", path)
    assert code == EXIT_INTEGRITY and "another key" in out, out
