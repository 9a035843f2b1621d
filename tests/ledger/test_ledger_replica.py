"""`privpipe ledger replicate`: a read-only replica that only moves forward along one chain.

Attacks first: a ledger rolled back by its own operator (a restore with
--accept-loss) or edited with plain DuckDB must not replace the replica, which
keeps the head it had as evidence; a directory that is not a replica is never
written into; auditors read the replica with the public key alone.
"""

from __future__ import annotations

import json

import duckdb
from ledger_helpers import chain_of as _chain
from ledger_helpers import charge_ais as _charge
from ledger_helpers import ledger_cli as _cli
from ledger_helpers import sha_of as _sha

from ledger import Ledger
from ledger.signing import public_key_path
from schemas.errors import EXIT_BAD_INPUT, EXIT_INTEGRITY


def test_a_replica_follows_the_chain_and_an_auditor_verifies_it(led, ledger_path, tmp_path):
    replica = tmp_path / "replica"
    _charge(led, "r1")
    code, out = _cli("replicate", "--ledger", ledger_path, "--to", replica)
    assert code == 0, out
    assert _chain(replica / "ledger.duckdb") == _chain(ledger_path)
    _charge(led, "r2", user="v")
    code, out = _cli("replicate", "--ledger", ledger_path, "--to", replica, "--rounds", "2",
                     "--every", "0")
    assert code == 0, out
    first = _chain(ledger_path)
    assert _chain(replica / "ledger.duckdb") == first
    manifest = json.loads((replica / "manifest.json").read_text())
    assert manifest["replica"]["rounds"] == 3
    assert manifest["head"]["seq"] == first[-1][0] == manifest["replica"]["previous_head"]["seq"]
    auditor = Ledger.open_auditor(replica / "ledger.duckdb",
                                  public_key=public_key_path(ledger_path))
    rep = auditor.verify()
    assert rep.ok and rep.entries_checked == len(first), rep.message
    assert {(b["user_id"], b["spent"]) for b in auditor.balances()} == {
        (b["user_id"], b["spent"]) for b in led.balances()}
    assert not list(replica.glob(".round-*"))


def test_a_rolled_back_ledger_does_not_replace_the_replica(led, ledger_path, tmp_path):
    _charge(led, "r1")
    code, out = _cli("backup", "--ledger", ledger_path, "--out", tmp_path / "old")
    assert code == 0, out
    _charge(led, "r2", user="v")
    replica = tmp_path / "replica"
    assert _cli("replicate", "--ledger", ledger_path, "--to", replica)[0] == 0
    held = _sha(replica / "ledger.duckdb")
    newest = led.head()
    # the operator, holding every key, rolls the ledger back to before r2 and charges again
    code, out = _cli("restore", tmp_path / "old", "--ledger", ledger_path, "--accept-loss",
                     f"{newest.seq}:{newest.hash}")
    assert code == 0, out
    _charge(Ledger(ledger_path), "r2-again", user="w")
    code, out = _cli("replicate", "--ledger", ledger_path, "--to", replica)
    assert code == EXIT_INTEGRITY, out
    assert "not replicated" in out and f"seq {newest.seq}" in out
    assert _sha(replica / "ledger.duckdb") == held  # kept as evidence
    assert not list(replica.glob(".round-*"))


def test_an_edited_ledger_does_not_replace_the_replica(led, ledger_path, tmp_path):
    _charge(led, "r1")
    replica = tmp_path / "replica"
    assert _cli("replicate", "--ledger", ledger_path, "--to", replica)[0] == 0
    held = _sha(replica / "ledger.duckdb")
    _charge(led, "r2")
    con = duckdb.connect(str(ledger_path))
    con.execute("UPDATE entries SET amount = 1 WHERE release_id = 'r2'")
    con.close()
    code, out = _cli("replicate", "--ledger", ledger_path, "--to", replica)
    assert code == EXIT_INTEGRITY, out
    assert _sha(replica / "ledger.duckdb") == held


def test_a_directory_that_is_not_a_replica_is_never_written(led, ledger_path, tmp_path):
    other = tmp_path / "home"
    other.mkdir(mode=0o700)
    (other / "notes.txt").write_text("mine")
    code, out = _cli("replicate", "--ledger", ledger_path, "--to", other)
    assert code == EXIT_BAD_INPUT and "holds files but no replica" in out
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    assert _cli("backup", "--ledger", ledger_path, "--out", tmp_path / "b")[0] == 0
    code, out = _cli("replicate", "--ledger", ledger_path, "--to", tmp_path / "b")
    assert code == EXIT_BAD_INPUT and "holds a backup, not a replica" in out


def test_a_replica_round_goes_in_while_an_auditor_reads_the_replica(led, ledger_path,
                                                                    tmp_path):
    replica = tmp_path / "replica"
    _charge(led, "r1")
    assert _cli("replicate", "--ledger", ledger_path, "--to", replica)[0] == 0
    reader = duckdb.connect(str(replica / "ledger.duckdb"), read_only=True)
    try:
        before = reader.execute("SELECT count(*) FROM entries").fetchall()[0][0]
        _charge(led, "r2", user="v")
        assert _cli("replicate", "--ledger", ledger_path, "--to", replica)[0] == 0
        # the open reader keeps its consistent view; a new one sees the new round
        assert reader.execute("SELECT count(*) FROM entries").fetchall()[0][0] == before
    finally:
        reader.close()
    assert _chain(replica / "ledger.duckdb") == _chain(ledger_path)


def test_a_replica_is_a_backup_restore_takes(led, ledger_path, tmp_path):
    _charge(led, "r1")
    replica = tmp_path / "replica"
    assert _cli("replicate", "--ledger", ledger_path, "--to", replica)[0] == 0
    held = _chain(ledger_path)
    ledger_path.write_bytes(b"\0" * 4096)  # the live ledger is lost
    code, out = _cli("restore", replica, "--ledger", ledger_path)
    assert code == 0, out
    assert _chain(ledger_path) == held and Ledger(ledger_path).verify().ok
