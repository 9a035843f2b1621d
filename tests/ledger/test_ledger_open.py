"""Opening and creating ledgers: foreign files, newer schemas, and the noise key."""

from __future__ import annotations

import hashlib
import hmac
import json
import os

import duckdb
import numpy as np
import pytest

from ledger import (
    Ledger,
    LedgerIntegrityError,
    LedgerOpenError,
    Request,
    default_ledger_path,
    key_path_for,
)
from schemas.errors import EXIT_BAD_INPUT, BadInputError


def test_init_creates_db_and_private_key_and_is_idempotent(ledger_path):
    led = Ledger.init(ledger_path)
    kp = key_path_for(ledger_path)
    assert kp.name == "ledger.duckdb.key" and kp.parent == ledger_path.parent
    assert (kp.stat().st_mode & 0o777) == 0o600
    key_before = kp.read_bytes()
    again = Ledger.init(ledger_path)
    assert kp.read_bytes() == key_before
    assert again.verify().ok and led.verify().entries_checked == 0


def test_open_missing_ledger_is_bad_input(tmp_path):
    with pytest.raises(LedgerOpenError) as err:
        Ledger(tmp_path / "nope.duckdb")
    assert isinstance(err.value, BadInputError) and err.value.exit_code == EXIT_BAD_INPUT
    assert "privpipe ledger init" in str(err.value)
    assert not (tmp_path / "nope.duckdb").exists()  # opening never creates a file


def test_foreign_duckdb_file_is_refused(tmp_path):
    p = tmp_path / "other.duckdb"
    con = duckdb.connect(str(p))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    key_path_for(p).write_text("00" * 32)
    os.chmod(key_path_for(p), 0o600)
    with pytest.raises(LedgerOpenError, match="not a privpipe ledger"):
        Ledger(p)


def test_non_duckdb_file_is_refused(tmp_path):
    p = tmp_path / "text.duckdb"
    p.write_text("this is not a database\n" * 200)
    key_path_for(p).write_text("00" * 32)
    os.chmod(key_path_for(p), 0o600)
    with pytest.raises(LedgerOpenError, match="not a readable DuckDB"):
        Ledger(p)


def test_newer_schema_is_refused(led, ledger_path):
    con = duckdb.connect(str(ledger_path))
    con.execute("UPDATE schema_version SET version = 99")
    con.close()
    with pytest.raises(LedgerOpenError, match="schema version 99, newer"):
        Ledger(ledger_path)


def test_migration_path_runs_in_order(tmp_path, monkeypatch):
    from ledger_helpers import load_fixture

    from ledger import schema

    path = load_fixture("ledger_v2", tmp_path / "old.duckdb")
    con = duckdb.connect(str(path))
    con.execute("UPDATE schema_version SET version = 0")
    con.close()
    calls = []
    monkeypatch.setitem(schema.MIGRATIONS, 0, lambda c, key: calls.append(
        c.execute("SELECT count(*) FROM entries").fetchall()[0][0]))
    monkeypatch.setitem(schema.MIGRATIONS, 1, lambda c, key: calls.append("v1->v2"))
    led = Ledger(path)
    assert calls == []  # opening never migrates
    led.migrate()
    assert calls == [13, "v1->v2"]
    con = duckdb.connect(str(path))
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(4,)]
    con.execute("UPDATE schema_version SET version = 0")
    con.close()
    monkeypatch.delitem(schema.MIGRATIONS, 0)
    with pytest.raises((LedgerOpenError, LedgerIntegrityError)):
        Ledger(path).migrate()  # a schema-4 ledger set back to 0 is refused (a downgrade)


def test_missing_key_is_an_error_never_regenerated(led, ledger_path):
    kp = key_path_for(ledger_path)
    kp.unlink()
    with pytest.raises(LedgerOpenError, match="missing"):
        Ledger(ledger_path)
    with pytest.raises(LedgerOpenError, match="missing"):
        Ledger.init(ledger_path)
    assert not kp.exists()


def test_stray_key_without_ledger_is_not_adopted(tmp_path):
    p = tmp_path / "l.duckdb"
    key_path_for(p).write_text("11" * 32)
    with pytest.raises(LedgerOpenError, match="without its ledger"):
        Ledger.init(p)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_key_readable_by_others_is_refused(led, ledger_path, mode):
    os.chmod(key_path_for(ledger_path), mode)
    with pytest.raises(LedgerOpenError, match="wider than 0600"):
        Ledger(ledger_path)


def test_unreadable_or_malformed_key(led, ledger_path):
    kp = key_path_for(ledger_path)
    kp.write_text("not hex")
    with pytest.raises(LedgerOpenError, match="malformed"):
        Ledger(ledger_path)


def _seed(led, rid, user, fp="fp-1", params=None):
    return led.noise_seeds(rid, [user], [fp], params or {"m": "x"})[user]


def test_noise_seed_is_hmac_sha256_of_ids_data_and_parameters(led, ledger_path):
    key = bytes.fromhex(key_path_for(ledger_path).read_text().strip())
    digest = hashlib.sha256(b'{"m":"x"}').hexdigest()
    msg = json.dumps(["privpipe noise seed v2", "rel-1", "user'1", "fp-1", digest],
                     ensure_ascii=False)
    expected = int.from_bytes(hmac.new(key, msg.encode(), hashlib.sha256).digest(), "big")
    assert _seed(led, "rel-1", "user'1") == expected
    assert 0 < expected < 2**256
    # deterministic across ledger objects; different ids give different seeds
    assert _seed(Ledger(ledger_path), "rel-1", "user'1") == expected
    assert _seed(led, "rel-2", "user'1") != expected
    assert _seed(led, "rel-1", "user'2") != expected
    # Attack (issue #10): one release id on other data, or with other parameters, must
    # never reuse the noise (subtracting two outputs would reveal the difference).
    assert _seed(led, "rel-1", "user'1", fp="fp-2") != expected
    assert _seed(led, "rel-1", "user'1", params={"m": "y"}) != expected
    # no separator ambiguity: ("a,b", "c") vs ("a", "b,c")
    assert _seed(led, "a,b", "c") != _seed(led, "a", "b,c")
    a = np.random.default_rng(_seed(led, "r", "u")).normal(size=3)
    b = np.random.default_rng(_seed(led, "r", "u")).normal(size=3)
    assert np.array_equal(a, b)


def test_replaced_key_is_detected(led, ledger_path):
    led.reserve("r", [Request("u", "ais", amount=0.1)], mechanism="m", parameters={})
    kp = key_path_for(ledger_path)
    kp.write_text("ab" * 32 + "\n")
    os.chmod(kp, 0o600)
    other = Ledger(ledger_path)
    rep = other.verify()
    assert not rep.ok and "noise key" in rep.message
    with pytest.raises(LedgerIntegrityError):
        _seed(other, "r", "u")
    with pytest.raises(LedgerIntegrityError):
        other.reserve("r2", [Request("u", "ais", amount=0.1)], mechanism="m", parameters={})


def test_key_never_appears_in_exports_or_errors(led, ledger_path, tmp_path):
    key_hex = key_path_for(ledger_path).read_text().strip()
    led.reserve("r", [Request("u", "ais", amount=0.1)], mechanism="m", parameters={})
    led.reserve("r2", [Request("u", "ais", amount=1)], mechanism="m", parameters={})
    texts = []
    for fmt in ("csv", "json", "parquet"):
        for what in ("entries", "balances", "releases", "denials"):
            out = tmp_path / f"x.{what}.{fmt}"
            led.export(out, fmt=fmt, what=what)
            texts.append(out.read_bytes().hex() if fmt == "parquet" else out.read_text())
    kp = key_path_for(ledger_path)
    os.chmod(kp, 0o644)
    for call in (lambda: Ledger(ledger_path),):
        with pytest.raises(LedgerOpenError) as err:
            call()
        texts.append(str(err.value))
    os.chmod(kp, 0o600)
    kp.write_text("cd" * 32)
    os.chmod(kp, 0o600)
    texts.append(Ledger(ledger_path).verify().message)
    for t in texts:
        assert key_hex not in t and key_hex.upper() not in t
        assert "cd" * 32 not in t


def test_default_ledger_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIVPIPE_HOME", str(tmp_path))
    assert default_ledger_path() == tmp_path / "ledger.duckdb"
    monkeypatch.delenv("PRIVPIPE_HOME")
    monkeypatch.chdir(tmp_path)
    assert default_ledger_path() == tmp_path / ".privpipe" / "ledger.duckdb"


def test_a_version_1_ledger_is_read_as_it_is_and_migrated_only_on_request(tmp_path):
    from ledger_helpers import load_fixture

    path = load_fixture("ledger_v2", tmp_path / "old.duckdb")
    # turn the file into what schema version 1 wrote: no MAC columns
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE domains DROP COLUMN mac")
    con.execute("ALTER TABLE releases DROP COLUMN mac")
    con.execute("UPDATE schema_version SET version = 1")
    con.close()
    old = Ledger(path)
    assert old.verify().ok and old.schema_version == 1
    assert old.release("r1")["manifest"] == {"files": {"curves": "curves.parquet"}, "eps": "1/2"}
    with pytest.raises(LedgerOpenError, match="ledger migrate"):
        old.close("r1", "writes need the current schema")
    lines = old.migrate()
    assert any("schema 1 -> 4" in line for line in lines)
    con = duckdb.connect(str(path))
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(4,)]
    assert con.execute("SELECT count(*) FROM domains WHERE mac IS NULL").fetchall() == [(0,)]
    con.close()
    rep = old.verify()
    assert rep.ok and rep.entries_checked == 13 + 3, rep.message  # a baseline per domain
    assert [h["change"] for h in old.policy_history()] == ["baseline"] * 3
    assert old.migrate() == ["already at schema 4: nothing to migrate"]


def test_truncated_ledger_is_an_open_error_not_a_crash(led, ledger_path):
    for i in range(30):
        led.reserve(f"r{i}", [Request(f"u{j}", "ais", amount=0.01) for j in range(50)],
                    mechanism="m", parameters={})
    data = ledger_path.read_bytes()
    ledger_path.write_bytes(data[: len(data) // 2])
    with pytest.raises(LedgerOpenError):
        Ledger(ledger_path).verify()


def test_ids_with_lone_surrogates_are_bad_input_in_queries(led):
    from schemas.errors import ParameterError

    for call in (lambda: led.history("\udcff"), lambda: led.balances("\udcff"),
                 lambda: led.release("\udcff"), lambda: led.entry_range("\udcff"),
                 lambda: led.reserve("r", [Request("\udcff", "ais", amount=0.1)],
                                     mechanism="m", parameters={})):
        with pytest.raises(ParameterError, match="Unicode"):
            call()


def test_a_ledger_written_before_the_package_split_verifies_migrates_and_continues(tmp_path):
    from fractions import Fraction

    from ledger_helpers import POLICY, load_fixture

    from schemas.policy import parse_policy

    path = load_fixture("ledger_v2", tmp_path / "old.duckdb")
    led = Ledger(path)
    rep = led.verify()
    assert rep.ok and rep.entries_checked == 13, rep.message
    con = duckdb.connect(str(path))
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(2,)]  # untouched
    con.close()
    bal = {(b["user_id"], b["domain"]): b["spent"] for b in led.balances()}
    # u: 1/2 reserved, 1/8 + 1/8 settled; ecg: ε = 1/4 settled on a CGP domain is (1/4)²/2;
    # m: steps 0..6 at 1/4 reserved, 0..4 settled: the largest window of 4 steps holds 1
    assert bal == {("u", "ais"): Fraction(1, 4), ("v", "ais"): 0, ("x", "ais"): 0,
                   ("o'brien\n", "ais"): Fraction(1, 4), ("u", "ecg"): Fraction(1, 32),
                   ("m", "power"): 1}
    assert led.release("r1")["manifest"] == {"files": {"curves": "curves.parquet"}, "eps": "1/2"}
    assert led.release("dead")["state"] == "closed"
    led.migrate(parse_policy(POLICY))  # the policy it was charged under: whole definitions
    assert led.domain("ais").value_columns == ("x", "y") and led.domain("ais").public.points
    again = led.reserve("r1", [Request("u", "ais", amount=0.5)], mechanism="privfuncseg",
                        parameters={"epsilon": "1/2"}, input_fingerprint="fp-1")
    assert again.admitted[0].replayed and again.admitted[0].entry_seq == 1
    more = led.reserve("r2", [Request("u", "ais", amount=0.75), Request("v", "ais", amount=1.5)],
                       mechanism="m", parameters={})
    assert [d.user_id for d in more.admitted] == ["u"] and more.admitted[0].entry_seq == 17
    assert led.verify().ok


def test_a_migration_without_a_policy_records_definitions_when_one_is_applied(tmp_path):
    from ledger_helpers import POLICY, load_fixture

    from schemas.errors import ParameterError
    from schemas.policy import parse_policy

    led = Ledger(load_fixture("ledger_v2", tmp_path / "old.duckdb"))
    led.migrate()
    with pytest.raises(ParameterError, match="no complete definition"):
        led.domain("ais")
    as_charged = json.loads(json.dumps(POLICY))  # its w-event accounts were per stream
    as_charged["domains"]["power"]["wevent_budget"] = "per_stream"
    lines = led.apply_policy(parse_policy(as_charged))
    assert any("'ais': changed definition" in line for line in lines)
    assert led.domain("power").w == 4
    assert led.verify().ok
    other = json.loads(json.dumps(POLICY))
    other["domains"]["ais"]["notion"] = "cgp"  # a charged domain's meaning: refused
    from ledger import PolicyChangeError

    fresh = Ledger(load_fixture("ledger_v2", tmp_path / "again.duckdb"))
    with pytest.raises(PolicyChangeError, match="does not describe domain 'ais'"):
        fresh.migrate(parse_policy(other))


def test_a_schema_3_ledger_verifies_as_it_is_and_migrates_to_4(led, ledger_path):
    # what the privpipe before issue #26 wrote: no head counter column or file, no pin,
    # the head sealed with the v2 seal and signed over (id, version, seq, hash)
    from ledger import keys, signing
    from ledger.counter import counter_path

    led.reserve("r", [Request("u", "ais", amount=0.5)], mechanism="m", parameters={})
    noise = keys.load_key(key_path_for(ledger_path))
    signer = signing.load_signing_key(ledger_path)
    con = duckdb.connect(str(ledger_path))
    ledger_id = con.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchall()[0][0]
    seq, h = con.execute("SELECT last_seq, last_hash FROM chain_head").fetchall()[0]
    con.execute("ALTER TABLE chain_head DROP COLUMN counter")
    con.execute("UPDATE schema_version SET version = 3")
    message = json.dumps(["privpipe chain head v1", ledger_id, 3, seq, h]).encode()
    con.execute("UPDATE chain_head SET seal = ?, signature = ?",
                [keys.chain_seal_v2(noise, 3, seq, h), signer.sign(message).hex()])
    con.close()
    counter_path(ledger_path).unlink()
    signing.pin_path(ledger_path).unlink()
    old = Ledger(ledger_path)
    rep = old.verify()
    assert rep.ok and old.schema_version == 3, rep.message
    assert Ledger.open_auditor(ledger_path).verify().ok
    assert any("schema 3 -> 4" in line for line in old.migrate())
    assert signing.pin_path(ledger_path).read_text().strip() == signing.fingerprint(
        signing.public_bytes(signer))
    assert json.loads(counter_path(ledger_path).read_text())["seq"] == old.head().seq
    old.reserve("r2", [Request("u", "ais", amount=0.25)], mechanism="m", parameters={})
    assert old.verify().ok and Ledger.open_auditor(ledger_path).verify().ok
