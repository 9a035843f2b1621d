"""Several processes and threads on one ledger file; a SIGKILL in the middle of a reserve."""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
import time
from fractions import Fraction

import duckdb
import pytest
from ledger_helpers import POLICY_ENTRIES, PYTHON, REPO, subprocess_env

from ledger import Ledger, LedgerBusyError, Request

WORKER = textwrap.dedent("""
    import json, sys, threading
    from fractions import Fraction
    from ledger import Ledger, Request

    path, tag = sys.argv[1], sys.argv[2]
    led = Ledger(path, actor="worker-" + tag, lock_timeout=120)
    results = {}

    def run(tid):
        admitted = denied = 0
        i = 0
        while True:
            rel = f"{tag}-t{tid}-{i}"
            res = led.reserve(rel, [Request("shared", "ais", amount=Fraction(1, 10))],
                              mechanism="m", parameters={})
            i += 1
            if res.admitted:
                admitted += 1
            else:
                denied += 1
                break
        results[tid] = (admitted, denied)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(results))
""")


@pytest.mark.slow
def test_processes_and_threads_never_overspend_or_lose_entries(led, ledger_path):
    procs = [subprocess.Popen([PYTHON, "-c", WORKER, str(ledger_path), f"p{k}"], cwd=REPO,
                              env=subprocess_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in range(4)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    admitted = sum(a for o in outs for a, _ in o.values())
    denied = sum(d for o in outs for _, d in o.values())
    assert admitted == 10  # cap 1.0 / 0.1, exactly
    assert denied == 8  # every thread stops at its first denial
    [bal] = led.balances("ais")
    assert bal["spent"] == 1 and bal["remaining"] == 0
    rep = led.verify()
    assert rep.ok, rep.message
    assert rep.entries_checked == POLICY_ENTRIES + admitted + denied  # no entry lost


def test_threads_of_one_process_share_the_file(led):
    import threading

    got = []

    def run(t):
        for i in range(6):
            r = led.reserve(f"t{t}-{i}", [Request("u", "ais", amount=Fraction(1, 20))],
                            mechanism="m", parameters={})
            got.append(bool(r.admitted))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(got) == 20 and len(got) == 24
    assert led.verify().ok


HOLDER = textwrap.dedent("""
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    print("HELD", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
""")


def _hold(path, seconds):
    p = subprocess.Popen([PYTHON, "-c", HOLDER, str(path), str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "HELD"
    return p


def test_a_waiting_writer_finishes_after_the_lock_is_released(led, ledger_path):
    r = Ledger(ledger_path, lock_timeout=30.0)
    holder = _hold(ledger_path, 1.0)
    t0 = time.monotonic()
    res = r.reserve("waited", [Request("u", "ais", amount=0.5)], mechanism="m", parameters={})
    waited = time.monotonic() - t0
    holder.wait(timeout=10)
    assert res.admitted and waited >= 0.5


def test_the_wait_is_bounded(led, ledger_path):
    r = Ledger(ledger_path, lock_timeout=0.4)
    holder = _hold(ledger_path, 3.0)
    t0 = time.monotonic()
    with pytest.raises(LedgerBusyError, match="another process"):
        r.reserve("x", [Request("u", "ais", amount=0.5)], mechanism="m", parameters={})
    assert time.monotonic() - t0 < 2.0
    holder.wait(timeout=10)
    assert led.verify().entries_checked == POLICY_ENTRIES  # nothing but the policy


CRASHER = textwrap.dedent("""
    import sys, time
    from ledger import Ledger, Request
    import ledger.storage as mod

    path, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    led = Ledger(path, actor="crasher")
    if mode == "pause":
        orig = mod.save_accounts
        def paused(con, accounts):
            orig(con, accounts)             # entries and accounts written, not committed
            print("MID", flush=True)
            time.sleep(60)
        mod.save_accounts = paused
    print("START", flush=True)
    k = 0
    while True:
        reqs = [Request(f"user-{i}", "ais", amount=0.01) for i in range(n)]
        led.reserve(f"rel-{k}", reqs, mechanism="m", parameters={"k": k})
        print(f"DONE {k}", flush=True)
        k += 1
""")


def _crash_and_check(ledger_path, n, mode, delay=0.0):
    p = subprocess.Popen([PYTHON, "-c", CRASHER, str(ledger_path), str(n), mode], cwd=REPO,
                         env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "START"
    if mode == "pause":
        assert p.stdout.readline().strip() == "MID"
    else:
        time.sleep(delay)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    led = Ledger(ledger_path)  # opens after the crash (the WAL is replayed)
    rep = led.verify()
    assert rep.ok, rep.message
    con = duckdb.connect(str(ledger_path))
    per_release = con.execute(
        "SELECT release_id, count(*) FROM entries WHERE kind <> 'policy' GROUP BY release_id"
    ).fetchall()
    spent = con.execute("SELECT count(*) FROM accounts WHERE spent > 0").fetchall()[0][0]
    con.close()
    for _, count in per_release:
        assert count == n  # every reservation wholly there ...
    if per_release:
        assert spent == n
    return len(per_release)


def test_sigkill_in_the_middle_of_a_reserve_leaves_nothing_half_written(led, ledger_path):
    committed = _crash_and_check(ledger_path, 300, "pause")
    assert committed == 0  # ... or wholly absent
    assert Ledger(ledger_path).balances() == []


@pytest.mark.slow
def test_sigkill_at_random_moments(led, ledger_path):
    for delay in (0.9, 1.7):
        _crash_and_check(ledger_path, 2000, "loop", delay)
    assert Ledger(ledger_path).verify().ok


INITER = textwrap.dedent("""
    import json, sys
    from ledger import Ledger

    base, k = sys.argv[1], int(sys.argv[2])
    print("READY", flush=True)
    out = []
    for i in range(k):
        sys.stdin.readline()  # wait for the parent's go: both processes start together
        try:
            led = Ledger.init(f"{base}/ledger-{i}.duckdb", actor="init-race", lock_timeout=60)
            out.append(["ok", str(led.noise_seeds("r", ["u"], ["fp"], {})["u"])])
        except Exception as err:
            out.append(["error", type(err).__name__, str(err)])
        print("DONE", flush=True)
    print(json.dumps(out), flush=True)
""")


def test_concurrent_init_of_a_new_path_is_safe(tmp_path):
    rounds = 6
    procs = [subprocess.Popen([PYTHON, "-c", INITER, str(tmp_path), str(rounds)], cwd=REPO,
                              env=subprocess_env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for p in procs:
        assert p.stdout.readline().strip() == "READY"
    for _ in range(rounds):
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            assert p.stdout.readline().strip() == "DONE"
    results = []
    for p in procs:
        p.stdin.close()
        out = p.stdout.read()  # not communicate(): readline() may have buffered the last line
        assert p.wait(timeout=120) == 0, p.stderr.read()
        results.append(json.loads(out))
    for i in range(rounds):
        a, b = results[0][i], results[1][i]
        assert a[0] == "ok" and b[0] == "ok", (a, b)
        assert a[1] == b[1]  # the same noise key: one process created it, the other opened it
        path = tmp_path / f"ledger-{i}.duckdb"
        con = duckdb.connect(str(path))
        ids = con.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchall()
        con.close()
        assert len(ids) == 1
        assert Ledger(path).verify().ok
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"ledger-{i}.duckdb{ext}" for i in range(rounds) for ext in ("", ".key", ".sign",
                                                                      ".pub", ".pin",
                                                                      ".counter"))
