"""`privpipe ledger backup` and `restore`, operator- and attacker-first.

A backup taken while another process charges is one consistent prefix of the
final chain and verifies; a snapshot edited with plain DuckDB is refused; an
older snapshot never silently replaces a newer ledger or loses a kept
checkpoint; a refused restore leaves the ledger byte for byte as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import time

import duckdb
import pytest
from ledger_helpers import PYTHON, REPO, subprocess_env
from ledger_helpers import chain_of as _chain
from ledger_helpers import charge_ais as _charge
from ledger_helpers import ledger_cli as _cli
from ledger_helpers import sha_of as _sha

from ledger import Ledger
from ledger.counter import counter_path
from ledger.keys import key_path_for
from ledger.signing import signing_key_path
from schemas.errors import EXIT_BAD_INPUT, EXIT_INTEGRITY

CHARGER = textwrap.dedent("""
    import sys, time
    from fractions import Fraction
    from ledger import Ledger, Request

    path, stop = sys.argv[1], sys.argv[2]
    led = Ledger(path, actor="charger", lock_timeout=120)
    i = 0
    import os
    while not os.path.exists(stop):
        led.reserve(f"bg-{i}", [Request(f"u{i}", "ais", amount=Fraction(1, 1000))],
                    mechanism="m", parameters={})
        i += 1
    print(i)
""")


def _head_arg(led):
    h = led.head()
    return f"{h.seq}:{h.hash}"


@pytest.mark.slow
def test_a_backup_taken_while_another_process_charges_is_a_verified_prefix(led, ledger_path,
                                                                            tmp_path):
    stop = tmp_path / "stop"
    p = subprocess.Popen([PYTHON, "-c", CHARGER, str(ledger_path), str(stop)], cwd=REPO,
                         env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    try:
        start = len(_chain(ledger_path))
        deadline = time.monotonic() + 60
        while len(_chain(ledger_path)) < start + 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        outs = []
        for k in range(3):  # while the charger runs
            code, out = _cli("backup", "--out", tmp_path / f"b{k}", "--ledger", ledger_path)
            assert code == 0, out
            outs.append(tmp_path / f"b{k}")
    finally:
        stop.touch()
        n_bg = int(p.communicate(timeout=120)[0].strip())
    assert p.returncode == 0 and n_bg > 0
    final = _chain(ledger_path)
    assert len(final) == start + n_bg
    sizes = []
    for b in outs:
        snap = _chain(b / "ledger.duckdb")
        assert snap == final[:len(snap)]  # exactly a prefix of the final chain
        sizes.append(len(snap))
        m = json.loads((b / "manifest.json").read_text())
        assert (m["head"]["seq"], m["head"]["hash"]) == snap[-1]
        assert m["sha256"] == _sha(b / "ledger.duckdb")
        assert m["includes_keys"] is False and not list(b.glob("*.key"))
        assert oct((b / "ledger.duckdb").stat().st_mode & 0o777) == "0o600"
    assert sizes == sorted(sizes) and sizes[0] >= start + 5
    assert Ledger(ledger_path).verify().ok


def test_backup_refuses_a_non_empty_out_dir_and_keys_only_on_request(led, ledger_path,
                                                                     tmp_path):
    out = tmp_path / "full"
    out.mkdir()
    (out / "x").write_text("x")
    code, msg = _cli("backup", "--out", out, "--ledger", ledger_path)
    assert code == EXIT_BAD_INPUT and "--out" in msg and "not an empty directory" in msg
    code, msg = _cli("backup", "--out", tmp_path / "k", "--ledger", ledger_path,
                     "--include-keys")
    assert code == 0, msg
    key = tmp_path / "k" / "ledger.duckdb.key"
    assert key.read_bytes() == key_path_for(ledger_path).read_bytes()
    assert (tmp_path / "k" / "ledger.duckdb.sign").read_bytes() == \
        signing_key_path(ledger_path).read_bytes()
    assert key.stat().st_mode & 0o777 == 0o600
    assert json.loads((tmp_path / "k" / "manifest.json").read_text())["includes_keys"]


@pytest.fixture
def older(led, ledger_path, tmp_path):
    """A backup at one charge, then two more charges on the live ledger."""
    _charge(led, "r1")
    code, out = _cli("backup", "--out", tmp_path / "old", "--ledger", ledger_path)
    assert code == 0, out
    _charge(led, "r2")
    _charge(led, "r3")
    return tmp_path / "old"


def test_a_snapshot_edited_with_duckdb_is_refused_and_the_ledger_untouched(led, ledger_path,
                                                                           older, tmp_path):
    snap = older / "ledger.duckdb"
    con = duckdb.connect(str(snap))
    con.execute("UPDATE accounts SET spent = 0")
    con.close()
    before = _sha(ledger_path)
    code, out = _cli("restore", older, "--ledger", ledger_path, "--accept-loss",
                     _head_arg(led))
    assert code == EXIT_INTEGRITY and "SHA-256" in out
    # the attacker also rewrites the manifest's hash: verify still refuses it
    m = json.loads((older / "manifest.json").read_text())
    m["sha256"] = _sha(snap)
    (older / "manifest.json").write_text(json.dumps(m))
    code, out = _cli("restore", older, "--ledger", ledger_path, "--accept-loss",
                     _head_arg(led))
    assert code == EXIT_INTEGRITY and "does not verify" in out
    assert _sha(ledger_path) == before
    assert not list(ledger_path.parent.glob(".*restore*"))
    assert Ledger(ledger_path).verify().ok


def test_an_older_snapshot_over_a_newer_ledger_needs_the_exact_loss(led, ledger_path, older,
                                                                     tmp_path):
    newest = _head_arg(led)
    before = _sha(ledger_path)
    code, out = _cli("restore", older, "--ledger", ledger_path)
    seq = newest.split(":")[0]
    assert code == EXIT_INTEGRITY
    assert f"snapshot ends at seq {int(seq) - 2}" in out and f"at seq {seq} would be lost" in out
    assert _sha(ledger_path) == before
    wrong = f"{int(seq) - 1}:{_chain(ledger_path)[int(seq) - 2][1]}"  # a lost head, not newest
    code, out = _cli("restore", older, "--ledger", ledger_path, "--accept-loss", wrong)
    assert code == EXIT_INTEGRITY and "is not it" in out
    assert _sha(ledger_path) == before
    code, out = _cli("restore", older, "--ledger", ledger_path, "--accept-loss", "12:zz")
    assert code == EXIT_BAD_INPUT and "--accept-loss" in out
    code, out = _cli("restore", older, "--ledger", ledger_path, "--accept-loss", newest)
    assert code == 0, out
    assert _chain(ledger_path) == _chain(older / "ledger.duckdb")
    again = Ledger(ledger_path)
    assert again.verify().ok
    _charge(again, "r4")  # writes work again, above the old counter
    assert again.verify().ok


def test_a_copy_of_the_replaced_ledger_is_caught_after_a_restore(led, ledger_path, older,
                                                                 tmp_path):
    """The counter moves above the replaced ledger's: that ledger cannot come back unnoticed."""
    keep = tmp_path / "replaced.duckdb"
    shutil.copy2(ledger_path, keep)
    code, out = _cli("restore", older, "--ledger", ledger_path, "--accept-loss", _head_arg(led))
    assert code == 0, out
    shutil.copy2(keep, ledger_path)  # the newer, replaced file copied back over the restore
    rep = Ledger(ledger_path).verify()
    assert not rep.ok and "counter" in rep.message


def test_a_kept_checkpoint_newer_than_the_snapshot_is_named(led, ledger_path, tmp_path):
    _charge(led, "r1")
    code, _ = _cli("backup", "--out", tmp_path / "old", "--ledger", ledger_path)
    assert code == 0
    _charge(led, "r2")
    cp = tmp_path / "cp.json"
    code, _ = _cli("checkpoint", "--out", cp, "--ledger", ledger_path)
    assert code == 0
    cp_head = _head_arg(led)
    # the live ledger is lost too (a disk failure): restore into a fresh file beside the keys
    os.unlink(ledger_path)
    os.unlink(counter_path(ledger_path))
    code, out = _cli("restore", tmp_path / "old", "--ledger", ledger_path, "--expect-head", cp)
    assert code == EXIT_INTEGRITY and f"at seq {cp_head.split(':')[0]} would be lost" in out
    assert not ledger_path.exists()
    forged = json.loads(cp.read_text())
    forged["seq"] += 1  # a checkpoint the key never signed: refused, not a loss to accept
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    code, out = _cli("restore", tmp_path / "old", "--ledger", ledger_path, "--expect-head",
                     tmp_path / "forged.json", "--accept-loss", f"{forged['seq']}:{forged['hash']}")
    assert code == EXIT_INTEGRITY and "signature does not verify" in out
    assert not ledger_path.exists()
    code, out = _cli("restore", tmp_path / "old", "--ledger", ledger_path, "--expect-head", cp,
                     "--accept-loss", cp_head)
    assert code == 0, out
    assert Ledger(ledger_path).verify().ok


def test_restoring_the_latest_backup_needs_no_loss_and_refuses_a_needless_one(led, ledger_path,
                                                                               tmp_path):
    _charge(led, "r1")
    code, _ = _cli("backup", "--out", tmp_path / "b", "--ledger", ledger_path)
    assert code == 0
    head = _head_arg(led)
    code, out = _cli("restore", tmp_path / "b", "--ledger", ledger_path, "--accept-loss", head)
    assert code == EXIT_BAD_INPUT and "nothing would be lost" in out
    code, out = _cli("restore", tmp_path / "b", "--ledger", ledger_path, "--expect-head", head)
    assert code == 0, out
    assert _head_arg(Ledger(ledger_path)) == head
    code, out = _cli("restore", tmp_path / "nope", "--ledger", ledger_path)
    assert code == EXIT_BAD_INPUT and "manifest.json" in out


def test_a_snapshot_of_another_ledger_is_refused(led, ledger_path, tmp_path, policy):
    other = Ledger.init(tmp_path / "o" / "ledger.duckdb")
    other.apply_policy(policy)
    code, _ = _cli("backup", "--out", tmp_path / "ob", "--ledger", other.path)
    assert code == 0
    before = _sha(ledger_path)
    code, out = _cli("restore", tmp_path / "ob", "--ledger", ledger_path)
    assert code == EXIT_INTEGRITY
    assert _sha(ledger_path) == before


RESTORER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from ledger.backup import load_snapshot, parse_accept_loss, restore
    print("start", flush=True)
    restore(load_snapshot(Path(sys.argv[1])), Path(sys.argv[2]), lock_timeout=60,
            accept_loss=parse_accept_loss(sys.argv[3]))
""")


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1, 0.15, 0.25, 0.4, 0.8])
def test_a_restore_killed_at_any_moment_leaves_the_old_or_the_new_ledger(led, ledger_path,
                                                                         older, delay):
    before, newest = _sha(ledger_path), _head_arg(led)
    old_chain, new_chain = _chain(ledger_path), _chain(older / "ledger.duckdb")
    p = subprocess.Popen([PYTHON, "-c", RESTORER, str(older), str(ledger_path), newest],
                         cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "start"  # imports done: the restore (~0.2 s) begins
    time.sleep(delay)
    p.kill()
    p.communicate(timeout=60)
    if _sha(ledger_path) != before:  # replaced: then wholly the snapshot, and it verifies
        assert _chain(ledger_path) == new_chain
    else:
        assert _chain(ledger_path) == old_chain
    assert Ledger(ledger_path).verify().ok


def test_a_backup_of_a_ledger_that_does_not_verify_is_refused_and_nothing_kept(led, ledger_path,
                                                                               tmp_path):
    _charge(led, "r1")
    con = duckdb.connect(str(ledger_path))
    con.execute("UPDATE accounts SET spent = 0")  # an operator hides a spend with plain SQL
    con.close()
    code, out = _cli("backup", "--out", tmp_path / "b", "--ledger", ledger_path)
    assert code == EXIT_INTEGRITY and "does not verify" in out
    assert list((tmp_path / "b").iterdir()) == []


def test_a_damaged_ledger_is_restored_from_its_latest_backup(led, ledger_path, tmp_path):
    _charge(led, "r1")
    code, _ = _cli("backup", "--out", tmp_path / "b", "--ledger", ledger_path)
    assert code == 0
    head = _head_arg(led)
    with open(ledger_path, "r+b") as f:  # the disk damaged the file
        f.truncate(4096)
    assert _cli("verify", "--ledger", ledger_path)[0] != 0
    code, out = _cli("restore", tmp_path / "b", "--ledger", ledger_path)
    assert code == 0, out  # the counter file's head is in the snapshot: nothing lost
    assert _head_arg(Ledger(ledger_path)) == head and Ledger(ledger_path).verify().ok


def test_a_held_ledger_is_not_restored_over_even_without_its_counter_file(led, ledger_path,
                                                                          older):
    """Attack (review): delete the counter file and hold the ledger's lock past restore's wait.

    A busy ledger was taken for a damaged one, so only the (deleted) counter file was
    compared with the snapshot: the old snapshot went in without --accept-loss and the
    spent budget came back. Now the restore gives up on the lock and changes nothing.
    """
    from ledger.backup import load_snapshot, restore
    from ledger.errors import LedgerBusyError

    counter_path(ledger_path).unlink()
    before = _sha(ledger_path)
    hold = ("import sys, time, duckdb\ncon = duckdb.connect(sys.argv[1])\n"
            "print('HELD', flush=True)\ntime.sleep(60)\n")
    holder = subprocess.Popen([PYTHON, "-c", hold, str(ledger_path)], stdout=subprocess.PIPE,
                              text=True, env=subprocess_env())
    try:
        assert holder.stdout.readline().strip() == "HELD"  # another process holds the lock
        with pytest.raises(LedgerBusyError):
            restore(load_snapshot(older), ledger_path, lock_timeout=1)
    finally:
        holder.kill()
        holder.wait()
    assert _sha(ledger_path) == before
    assert not list(ledger_path.parent.glob(".*restore*"))


def test_the_replaced_ledger_is_kept_beside_the_restored_one(led, ledger_path, older):
    before, mode = _sha(ledger_path), ledger_path.stat().st_mode & 0o777
    code, out = _cli("restore", older, "--ledger", ledger_path, "--accept-loss", _head_arg(led))
    assert code == 0, out
    kept = list(ledger_path.parent.glob(f"{ledger_path.name}.replaced-*"))
    assert len(kept) == 1 and _sha(kept[0]) == before
    assert kept[0].stat().st_mode & 0o777 == mode  # the ledger's own file, kept as it was


def test_the_restored_counter_is_above_a_commit_the_counter_file_has_not_seen(led, ledger_path,
                                                                               older):
    """A writer advances the counter file after its commit: the file can lag the ledger."""
    from ledger.counter import read

    rec = read(counter_path(ledger_path), private=True)
    con = duckdb.connect(str(ledger_path))
    ledger_counter = con.execute("SELECT counter FROM chain_head").fetchall()[0][0]
    con.close()
    assert rec is not None and rec.counter == ledger_counter
    # the file as it would be between a commit and its advance: one counter behind
    lagging = counter_path(ledger_path).read_text().replace(
        f'"counter": {rec.counter}', f'"counter": {rec.counter - 1}')
    assert lagging != counter_path(ledger_path).read_text()
    counter_path(ledger_path).write_text(lagging)
    code, out = _cli("restore", older, "--ledger", ledger_path, "--accept-loss", _head_arg(led))
    assert code == 0, out
    con = duckdb.connect(str(ledger_path))
    restored = con.execute("SELECT counter FROM chain_head").fetchall()[0][0]
    con.close()
    assert restored == ledger_counter + 1
