"""A release id is bound to its input and parameters inside the reserve transaction.

Attack (issue #10): two releases with one release id on different inputs both ran
(the flow's guard and its record of the release were separate transactions, and a
reserve replay ignored the input fingerprint and parameters). Both got the same
noise, so subtracting their outputs revealed the difference of the inputs exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ledger import Ledger, ReplayConflictError, Request, Settlement
from mechanisms.cost import Cost, CostItem
from schemas.policy import parse_policy
from tests.ledger.ledger_helpers import POLICY

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def led(tmp_path) -> Ledger:
    ledger = Ledger.init(tmp_path / "bind.duckdb")
    ledger.apply_policy(parse_policy(POLICY))
    return ledger


def _reserve(led: Ledger, fingerprint: str, params: dict, users=("u1", "u2")):
    return led.reserve("rel", [Request(u, "ais", amount="0.1") for u in users],
                       mechanism="privfuncseg", parameters=params,
                       input_fingerprint=fingerprint)


def test_same_release_id_on_other_data_or_parameters_is_refused(led):
    first = _reserve(led, "fp-A", {"eps": "0.1"})
    assert len(first.admitted) == 2
    # the exact rerun replays (and charges nothing more)
    again = _reserve(led, "fp-A", {"eps": "0.1"})
    assert all(d.replayed for d in again.admitted)
    with pytest.raises(ReplayConflictError, match="another input"):
        _reserve(led, "fp-B", {"eps": "0.1"})
    with pytest.raises(ReplayConflictError, match="other parameters"):
        _reserve(led, "fp-A", {"eps": "0.2"})
    # even a replay of an identical request of one user: the binding is per release
    with pytest.raises(ReplayConflictError):
        _reserve(led, "fp-B", {"eps": "0.1"}, users=("u1",))
    with pytest.raises(ReplayConflictError):
        led.plan("rel", [Request("u1", "ais", amount="0.1")], mechanism="privfuncseg",
                 parameters={"eps": "0.1"}, input_fingerprint="fp-B")
    with pytest.raises(ReplayConflictError):
        led.check_binding("rel", "fp-B", {"eps": "0.1"})
    cost = Cost("gp", first.admitted[0].requested,
                (CostItem("project", "gp", first.admitted[0].requested),))
    with pytest.raises(ReplayConflictError):
        led.settle("rel", [Settlement("u1", "ais", "release", cost)],
                   input_fingerprint="fp-B", parameters={"eps": "0.1"})
    led.settle("rel", [Settlement("u1", "ais", "release", cost)],
               input_fingerprint="fp-A", parameters={"eps": "0.1"})
    assert led.verify().ok


def test_a_manual_charge_of_another_metric_is_still_allowed_but_a_mechanism_is_not(led):
    # the LY23 baseline guarantees dist_inf only: the ledger refuses it on an L2 domain
    from schemas.errors import ParameterError

    with pytest.raises(ParameterError, match="dist_inf"):
        led.reserve("b", [Request("u", "ais", amount="0.1")], mechanism="baseline",
                    parameters={})
    assert not led.history("u")
    ok = led.reserve("m", [Request("u", "ais", amount="0.1")], mechanism="manual-charge",
                     parameters={})
    assert ok.admitted


_RACER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from ledger import Ledger, ReplayConflictError, Request

    path, fingerprint, barrier = sys.argv[2], sys.argv[3], Path(sys.argv[4])
    led = Ledger(path, lock_timeout=60)
    # the old flow's guard: passes in both processes, since neither has reserved yet
    led.check_binding("race", fingerprint, {"eps": "0.1"})
    (barrier / fingerprint).touch()
    while len(list(barrier.iterdir())) < 2:  # forced interleaving: both passed the guard
        time.sleep(0.01)
    try:
        res = led.reserve("race", [Request("u1", "ais", amount="0.1")],
                          mechanism="privfuncseg", parameters={"eps": "0.1"},
                          input_fingerprint=fingerprint)
        print(json.dumps(["ok", len(res.admitted)]))
    except ReplayConflictError as err:
        print(json.dumps(["conflict", str(err)]))
""")


def test_two_processes_racing_one_release_id_on_different_inputs(led, tmp_path):
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, str(script), str(REPO), str(led.path), fp,
                               str(barrier)], stdout=subprocess.PIPE, text=True)
             for fp in ("fp-A", "fp-B")]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert sorted(o[0] for o in outs) == ["conflict", "ok"], outs
    # exactly one charge of 0.1, and the chain verifies
    assert [float(r["spent"]) for r in led.balances("ais")] == [0.1]
    assert led.verify().ok


def test_the_input_tag_is_keyed_and_an_auditor_cannot_compute_it(led, tmp_path):
    """The published input fingerprint is HMAC(noise key, content hash), not the hash."""
    content = "ab" * 32
    tag = led.input_tag(content)
    assert tag == led.input_tag(content) and len(tag) == 64
    assert tag != content and led.input_tag("cd" * 32) != tag
    other = Ledger.init(tmp_path / "other.duckdb")  # another key: another tag
    assert other.input_tag(content) != tag
    from ledger import LedgerIntegrityError

    with pytest.raises(LedgerIntegrityError, match="auditor"):
        Ledger.open_auditor(led.path).input_tag(content)
