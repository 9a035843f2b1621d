"""Load: four releases and two audit readers, all separate processes, on one ledger."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import harness
import pytest

from ledger import Ledger


@pytest.mark.slow
def test_four_releases_and_two_auditors_at_once(setup, fresh_ledger, tmp_path):
    ledger = fresh_ledger
    home = ledger.parent
    stop = tmp_path / "stop"
    readers = [subprocess.Popen([sys.executable, str(Path(harness.__file__).with_name(
        "audit_reader.py")), str(ledger), str(stop), str(tmp_path / f"reader{i}.json")],
        env=harness.cli_env(home), cwd=tmp_path) for i in range(2)]
    # three curve releases at ε = 1 per curve (two-curve users can afford only two of
    # them under cap 4) and one stream release, all started together
    jobs = []
    for i in range(3):
        args = harness.release_args("curves", setup.inputs["curves"], f"load-c{i}",
                                    tmp_path / "out", ledger, setup.policy)
        args[args.index("1/2")] = "1"
        jobs.append(args)
    jobs.append(harness.release_args("streams", setup.inputs["streams"], "load-s0",
                                     tmp_path / "out", ledger, setup.policy))
    procs = [subprocess.Popen([*harness.privpipe_cmd(), *a], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=harness.cli_env(home, api_url=setup.api_url)) for a in jobs]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    time.sleep(0.5)
    stop.write_text("stop")
    for r in readers:
        assert r.wait(timeout=300) == 0, [(tmp_path / f"reader{i}.json").read_text()
                                          for i in range(2)]
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out
    for i in range(2):
        rep = json.loads((tmp_path / f"reader{i}.json").read_text())
        assert rep["rounds"] >= 1 and rep["failures"] == []
    led = Ledger(ledger)
    assert led.verify().ok
    spent = {(r["user_id"], r["domain"]): Fraction(r["spent"]) for r in led.balances()}
    caps = {(r["user_id"], r["domain"]): Fraction(r["cap"]) for r in led.balances()}
    assert all(spent[k] <= caps[k] for k in spent)
    # Whatever the order, each user ends at: earlier spend + as many releases as fit.
    third = Fraction(1, 3)
    expected = {"user-0": third + 3, "user-1": Fraction(4), "user-2": third + 3,
                "user-3": third + 2, "user-4": Fraction(3), "user-5": Fraction(4)}
    assert {u: spent[(u, "tracks")] for u in expected} == expected
    assert all(spent[(f"meter-{u}", "meters")] == 2 for u in range(4))
    # denials: user-1 and user-5 (2 per release) are denied once; user-3 (1/3 + 2 after
    # one release) is denied by both later releases; nobody else is ever denied.
    denied = sorted(u for _, u in {(d["release_id"], d["user_id"]) for d in led.denials()})
    assert denied == ["user-1", "user-3", "user-3", "user-5"]
