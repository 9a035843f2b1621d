"""Charges the ledger can recompute: a worker does not decide what is charged (issue #26, 2).

Attacks, each as the attacker would mount it:

- a chunk task (a hostile worker, here the release's task replaced in-process)
  returns costs of 1e-9: the old settle recorded ~1e-9 and refunded the rest;
  now the chunk fails, nothing is published and the reservation stays charged;
- the same lie for one user, with the flow's check switched off (an operator's
  patched flow): `ledger verify --manifests OUT` recomputes every user's charge
  from the published files with only the public key, and names that user;
- a column of a published values.parquet overwritten: `verify --manifests` used
  to exit 0, now exit 4 naming the file.

Expected charges are computed by hand from the inputs: every curve costs its ε
(0.5), every new stream step ε/w.
"""

from __future__ import annotations

import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prefect import task
from prefect.cache_policies import NO_CACHE
from typer.testing import CliRunner

import flows.release_kinds as release_kinds
import flows.release_stages as release_stages
from flows.cli_ledger import ledger_app
from flows.release import release_curves, release_streams
from ledger import Ledger
from mechanisms.cost import Cost, CostItem, StepRun, WEventCost
from schemas.policy import load_policy
from tasks.privatize import privatize_curve_chunk, privatize_stream_chunk

TINY = Fraction(1, 10**9)


@pytest.fixture(scope="module", autouse=True)
def prefect_harness(prefect_api):
    return prefect_api


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(textwrap.dedent("""
        [domains.tracks]
        kind = "curves"
        public = { duration = true, points = true, rejections = true }
        notion = "gp"
        cap = "4"
        time_unit = "s"
        value_columns = ["x", "y"]
        value_unit = "m"

        [domains.meters]
        kind = "streams"
        public = { rejections = true }
        notion = "wevent"
        cap = "2"
        w = 4
        time_unit = "step"
        value_range = [0.0, 10.0]
        value_unit = "kW"
    """))
    Ledger.init(tmp_path / "ledger.duckdb").apply_policy(load_policy(path))
    return path


@pytest.fixture
def curves_csv(tmp_path: Path) -> Path:
    """Four users; users 1 and 3 have two curves: 6 curves."""
    rng = np.random.default_rng(3)
    rows = []
    for u in range(4):
        for c in range(1 + u % 2):
            t = np.cumsum(rng.uniform(0.5, 1.5, 80))
            rows.append(pd.DataFrame({"user_id": f"user-{u}", "curve_id": f"c{c}",
                                      "t": t - t[0], "x": np.sin(t / 9) * 20 + t,
                                      "y": np.cos(t / 7) * 10}))
    path = tmp_path / "curves.csv"
    pd.concat(rows).to_csv(path, index=False)
    return path


def _streams_csv(tmp_path: Path, steps: range, name: str) -> Path:
    rows = [pd.DataFrame({"user_id": f"meter-{u}", "stream_id": "s0", "t": list(steps),
                          "value": [5 + 4 * np.sin(s / 2 + u) for s in steps]})
            for u in range(3)]
    path = tmp_path / name
    pd.concat(rows).to_csv(path, index=False)
    return path


def _curves(csv: Path, policy: Path, tmp: Path, **kw):
    return release_curves(input_path=str(csv), domain="tracks", epsilon="0.5",
                          out_dir=str(tmp / "out"), ledger_path=str(tmp / "ledger.duckdb"),
                          policy_path=str(policy), chunk_users=2, **kw)


def _verify(tmp: Path, *extra: str):
    pub = tmp / "auditor.pub"
    if not pub.exists():
        r = CliRunner().invoke(ledger_app, ["pubkey", "--ledger", str(tmp / "ledger.duckdb")])
        pub.write_text(r.stdout)
    return CliRunner().invoke(ledger_app, ["verify", "--ledger", str(tmp / "ledger.duckdb"),
                                           "--manifests", str(tmp / "out"), *extra])


def _lying_curves(users: set[str] | None):
    """The release's curve task, but claiming 1e-9 per curve for `users` (None: everyone)."""
    def hostile(chunk, value_columns, spec):
        res = privatize_curve_chunk(chunk, value_columns, spec)
        res.costs = [(u, s, Cost(c.notion, c.requested, (CostItem("project", c.notion, TINY),))
                      if users is None or u in users else c, sid) for u, s, c, sid in res.costs]
        return res
    return task(hostile, name="privatize-curves", persist_result=False, cache_policy=NO_CACHE)


def test_an_honest_release_verifies_with_its_recomputed_charges(curves_csv, policy_file,
                                                                tmp_path):
    _curves(curves_csv, policy_file, tmp_path)
    first = _streams_csv(tmp_path, range(0, 40), "day1.csv")
    second = _streams_csv(tmp_path, range(0, 60), "day2.csv")  # repeats 0-39, adds 40-59
    for path in (first, second):
        release_streams(input_path=str(path), domain="meters", epsilon="1",
                        out_dir=str(tmp_path / "out"), ledger_path=str(tmp_path / "ledger.duckdb"),
                        policy_path=str(policy_file), reconstruct="none")
    r = _verify(tmp_path)
    assert r.exit_code == 0, r.output
    assert "every charge equals the cost recomputed" in r.output
    # auditor mode: the public key and the output directory only
    key = tmp_path / "ledger.duckdb.key"
    assert key.exists()
    r = _verify(tmp_path, "--public-key", str(tmp_path / "auditor.pub"))
    assert r.exit_code == 0, r.output


def test_a_worker_claiming_tiny_costs_fails_its_chunk(curves_csv, policy_file, tmp_path,
                                                      monkeypatch):
    monkeypatch.setattr(release_kinds, "privatize_curves", _lying_curves(None))
    with pytest.raises(Exception, match="claimed costs differ"):
        _curves(curves_csv, policy_file, tmp_path)
    assert not [p for p in (tmp_path / "out").glob("*") if not p.name.startswith(".")], \
        "nothing may be published"
    led = Ledger(tmp_path / "ledger.duckdb")
    (rel,) = led.releases()
    assert rel["state"] == "failed"
    # every reservation stays charged in full: 0.5 per curve (users 1, 3 have two)
    bal = {r["user_id"]: Fraction(r["spent"]) for r in led.balances("tracks")}
    assert bal == {f"user-{u}": Fraction(1, 2) * (1 + u % 2) for u in range(4)}
    assert led.verify().ok


def test_the_auditor_finds_a_one_user_discrepancy(curves_csv, policy_file, tmp_path,
                                                  monkeypatch):
    # An operator's patched flow (check switched off) settles user-3's claimed 1e-9 per curve.
    monkeypatch.setattr(release_stages, "check_claims", lambda run, res: None, raising=False)
    monkeypatch.setattr(release_kinds, "privatize_curves", _lying_curves({"user-3"}))
    _curves(curves_csv, policy_file, tmp_path)
    bal = {r["user_id"]: Fraction(r["spent"]) for r in
           Ledger(tmp_path / "ledger.duckdb").balances("tracks")}
    assert bal["user-3"] == pytest.approx(2e-9, rel=1e-6) and bal["user-2"] == Fraction(1, 2)
    r = _verify(tmp_path, "--public-key", str(tmp_path / "auditor.pub"))
    assert r.exit_code == 4, r.output
    assert "user 'user-3'" in r.output and "its published outputs cost 1" in r.output
    assert "user-2" not in r.output


def test_verify_manifests_hashes_every_published_file(curves_csv, policy_file, tmp_path):
    res = _curves(curves_csv, policy_file, tmp_path)
    values = Path(res["out"]) / "values.parquet"
    tbl = pq.read_table(values)
    x = tbl.column_names.index("x")
    tbl = tbl.set_column(x, "x", pa.array(np.zeros(tbl.num_rows)))
    values.chmod(0o600)
    pq.write_table(tbl, values)
    for extra in ((), ("--public-key", str(tmp_path / "auditor.pub"))):
        r = _verify(tmp_path, *extra)
        assert r.exit_code == 4, r.output
        assert "values.parquet" in r.output


def _lying_streams():
    def hostile(chunk, spec):
        res = privatize_stream_chunk(chunk, spec)
        res.costs = [(u, s, WEventCost(c.epsilon, c.w, (StepRun(c.runs[0].start,
                                                                 c.runs[0].start + 1, TINY),)),
                      sid) for u, s, c, sid in res.costs]
        return res
    return task(hostile, name="privatize-streams", persist_result=False, cache_policy=NO_CACHE)


def test_a_stream_worker_claiming_tiny_costs_fails_its_chunk(policy_file, tmp_path,
                                                             monkeypatch):
    monkeypatch.setattr(release_kinds, "privatize_streams", _lying_streams())
    with pytest.raises(Exception, match="claimed costs differ"):
        release_streams(input_path=str(_streams_csv(tmp_path, range(0, 40), "d.csv")),
                        domain="meters", epsilon="1", out_dir=str(tmp_path / "out"),
                        ledger_path=str(tmp_path / "ledger.duckdb"),
                        policy_path=str(policy_file), reconstruct="none")
    led = Ledger(tmp_path / "ledger.duckdb")
    assert [r["state"] for r in led.releases()] == ["failed"]
    # 40 new steps at ε/w = 1/4 each stay charged
    assert {r["stream_id"]: r["net"] for r in led.release_charges(led.releases()[0]["release_id"])
            } == {"s0": Fraction(10)}
