"""A chunk's claimed costs never settle the ledger: its published outputs decide.

A chunk task is the one place a remote worker speaks for the ledger: it
returns the released tables and, for each released item, the cost it claims.
Here the release's curve task is replaced in-process, as a hostile worker
would answer, by the real task whose claimed cost for one user's curves is
ε·10⁻⁹ instead of ε. Through the real flow (Prefect), the release must then
publish nothing and leave every reservation charged in full; settling the
claim would refund that user almost all of ε per curve, and their next
releases would run on budget already spent.

Expected charges are computed by hand from the input and the spec: every
curve released by a GP curve mechanism costs its ε (here 1/2); user u has
1 + (u mod 2) curves. Nothing is read from the code under test but the
ledger's balances and the output directory.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prefect import task
from prefect.cache_policies import NO_CACHE
from release_path import VALUE_COLUMNS, curves_domain, new_ledger

import flows.release_kinds as release_kinds
from ledger import Ledger
from mechanisms.cost import Cost, CostItem
from tasks.privatize import privatize_curve_chunk

EPSILON = Fraction(1, 2)
LIAR = "user-3"


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


def _input(path: Path) -> str:
    rng = np.random.default_rng(3)
    rows = []
    for u in range(4):
        for c in range(1 + u % 2):
            t = np.cumsum(rng.uniform(0.5, 1.5, 60))
            rows.append(pd.DataFrame({"user_id": f"user-{u}", "curve_id": f"c{c}",
                                      "t": t - t[0], VALUE_COLUMNS[0]: np.sin(t / 9) * 20 + t,
                                      VALUE_COLUMNS[1]: np.cos(t / 7) * 10}))
    pd.concat(rows).to_csv(path, index=False)
    return str(path)


def _under_claiming_task():
    """The release's curve task, claiming ε·10⁻⁹ for each curve of `LIAR`."""
    def hostile(chunk, value_columns, spec):
        res = privatize_curve_chunk(chunk, value_columns, spec)
        res.costs = [(u, s, Cost(c.notion, c.requested,
                                 (CostItem("project", c.notion, c.requested / 10**9),))
                      if u == LIAR else c, sid) for u, s, c, sid in res.costs]
        return res
    return task(hostile, name="privatize-curves", persist_result=False, cache_policy=NO_CACHE)


def test_a_chunk_claiming_less_than_its_outputs_cost_settles_nothing(harness, tmp_path,
                                                                      monkeypatch):
    from flows.release import release_curves

    ledger = new_ledger(tmp_path, curves_domain("gp", cap=Fraction(4)))
    monkeypatch.setattr(release_kinds, "privatize_curves", _under_claiming_task())
    stopped = None
    try:
        release_curves(input_path=_input(tmp_path / "curves.csv"), domain="tracks",
                       mechanism="project_and_privatize", epsilon=str(EPSILON),
                       release_id="r1", ledger_path=str(ledger),
                       out_dir=str(tmp_path / "out"), chunk_users=2)
    except Exception as err:  # noqa: BLE001 - the release must stop, whatever it says
        stopped = err
    published = [p for p in (tmp_path / "out").rglob("*")
                 if p.is_file() and not any(part.startswith(".") for part in
                                            p.relative_to(tmp_path / "out").parts)]
    assert published == [], "a release whose chunk under-claims publishes nothing"
    led = Ledger(ledger)
    (rel,) = led.releases()
    assert rel["state"] == "failed"
    spent = {r["user_id"]: Fraction(r["spent"]) for r in led.balances("tracks")}
    assert spent == {f"user-{u}": EPSILON * (1 + u % 2) for u in range(4)}, \
        "every reservation stays charged in full: no refund from a claim"
    assert led.verify().ok
    assert stopped is not None, "the release must fail"
