"""Issue #10 attacks on the release path: each was possible before, each is refused now.

- the LY23 baseline (a dist_∞ guarantee) charged as ε on an L2 domain;
- raw sample times released with evaluate_on="input" without being declared public;
- a curve's duration and number of points leaking outside the noise (the output grid,
  the SVT depth) when the domain declares them private;
- a mechanism that fails after its reservation, silently (no user named, release
  not marked);
- options the mechanism refuses, found only after every user was charged.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from flows.release import release_curves
from ledger import Ledger
from mechanisms import registry
from schemas.errors import ParameterError
from schemas.policy import load_policy


def _entries(ledger_path: Path) -> int:
    con = duckdb.connect(str(ledger_path), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM entries").fetchone()[0]
    finally:
        con.close()


@pytest.fixture()
def truth_policy(tmp_path) -> Path:
    path = tmp_path / "truth.toml"
    path.write_text(textwrap.dedent("""
        [domains.tracks]
        kind = "curves"
        notion = "gp"
        cap = "4"
        time_unit = "s"
        value_columns = ["x", "y"]
        value_unit = "m"
        public = { duration = true, points = true }

        [domains.sup_tracks]
        kind = "curves"
        notion = "gp"
        metric = "dist_inf"
        cap = "4"
        time_unit = "s"
        value_columns = ["x", "y"]
        value_unit = "m"
        public = { duration = true, points = true, sample_times = true }

        [domains.hidden]
        kind = "curves"
        notion = "gp"
        cap = "4"
        time_unit = "s"
        value_columns = ["x", "y"]
        value_unit = "m"
        window = 300.0
        grid_points = 50
        public = { duration = false, points = false, rejections = true }
    """))
    return path


@pytest.fixture()
def truth_ledger(tmp_path, truth_policy) -> Path:
    path = tmp_path / "truth.duckdb"
    Ledger.init(path).apply_policy(load_policy(truth_policy))
    return path


def _release(curves_csv, policy, ledger, out, domain, **kw):
    kw.setdefault("epsilon", "0.5")
    return release_curves(input_path=str(curves_csv), domain=domain, out_dir=str(out),
                          ledger_path=str(ledger), policy_path=str(policy), chunk_users=3,
                          **kw)


def test_the_dist_inf_baseline_is_refused_on_an_l2_domain(curves_csv, truth_policy,
                                                          truth_ledger, tmp_path):
    before = _entries(truth_ledger)
    with pytest.raises(ParameterError, match="dist_inf"):
        _release(curves_csv, truth_policy, truth_ledger, tmp_path / "o", "tracks",
                 mechanism="baseline")
    assert _entries(truth_ledger) == before, "nothing may be charged"
    # on a domain that states its guarantee in dist_∞ it is a legitimate release,
    # and no L2 mechanism may be charged there
    res = _release(curves_csv, truth_policy, truth_ledger, tmp_path / "o", "sup_tracks",
                   mechanism="baseline")
    assert res["manifest"]["counts"]["users_released"] == 6
    with pytest.raises(ParameterError, match="l2"):
        _release(curves_csv, truth_policy, truth_ledger, tmp_path / "o", "sup_tracks",
                 mechanism="privfuncseg")


def test_every_mechanism_metric_comes_from_the_registry():
    assert registry.metric_of("baseline") == "dist_inf"
    for name in ("privfuncseg", "project_and_privatize", "privfuncselect"):
        assert registry.metric_of(name) == "l2"
    assert registry.metric_of("square_wave") == "wevent"


def test_input_sample_times_need_a_public_declaration(curves_csv, truth_policy, truth_ledger,
                                                      tmp_path):
    before = _entries(truth_ledger)
    with pytest.raises(ValueError, match="sample_times"):
        _release(curves_csv, truth_policy, truth_ledger, tmp_path / "o", "tracks",
                 evaluate_on="input")
    assert _entries(truth_ledger) == before
    res = _release(curves_csv, truth_policy, truth_ledger, tmp_path / "o", "sup_tracks",
                   mechanism="baseline", evaluate_on="input", release_id="times-public")
    assert "sample_times" in res["manifest"]["public_metadata"]["fields"]


def test_unknown_or_invalid_options_are_refused_before_any_charge(curves_csv, truth_policy,
                                                                   truth_ledger, tmp_path):
    before = _entries(truth_ledger)
    with pytest.raises(ValueError, match="no option 'degre'"):
        _release(curves_csv, truth_policy, truth_ledger, tmp_path / "o", "tracks",
                 options={"degre": 3})
    with pytest.raises(ValueError):
        _release(curves_csv, truth_policy, truth_ledger, tmp_path / "o", "tracks",
                 options={"k1": -1})
    assert _entries(truth_ledger) == before


def _two_curves(path: Path, scale: float) -> Path:
    """Two users whose curves differ in duration and number of points (times `scale`)."""
    rows = []
    for u, (n, dur) in enumerate(((40, 100.0), (int(40 * scale), 100.0 * scale))):
        t = np.linspace(0.0, dur, n)
        rows.append(pd.DataFrame({"user_id": f"u{u}", "curve_id": "c", "t": t,
                                  "x": 20 * np.sin(t / 30), "y": t / 10}))
    pd.concat(rows).to_csv(path, index=False)
    return path


def test_private_durations_and_point_counts_do_not_shape_the_output(tmp_path, truth_policy,
                                                                    truth_ledger):
    # Attack (issue #10): the output grid had N points on [0, T] and PrivFuncSeg's SVT
    # depth was ⌈log₂ N⌉, so each curve's duration and N left outside the noise. On a
    # domain that keeps both private, every curve is released on the window with the
    # domain's grid and an SVT depth from public quantities only.
    res = _release(_two_curves(tmp_path / "in.csv", 2.5), truth_policy, truth_ledger,
                   tmp_path / "o", "hidden")
    rdir = Path(res["out"])
    values = pq.read_table(rdir / "values.parquet").to_pandas()
    for _uid, g in values.groupby("user_id"):
        assert len(g) == 50
        np.testing.assert_array_equal(g["t"].to_numpy(), np.linspace(0.0, 300.0, 50))
    curves = pq.read_table(rdir / "curves.parquet").to_pandas()
    assert set(curves["duration"]) == {300.0}
    segs = pq.read_table(rdir / "segments.parquet").to_pandas()
    assert segs["t_start"].min() == 0.0 and segs["t_end"].max() == 300.0
    assert {"duration", "points"}.isdisjoint(res["manifest"]["public_metadata"]["fields"])
    assert "window=300" in res["manifest"]["public_metadata"]["fields"]


def test_a_curve_longer_than_the_window_is_rejected_and_not_charged(tmp_path, truth_policy,
                                                                    truth_ledger):
    res = _release(_two_curves(tmp_path / "in.csv", 4.0), truth_policy, truth_ledger,
                   tmp_path / "o", "hidden")
    counts = res["manifest"]["counts"]
    assert (counts["users_released"], counts["users_rejected"]) == (1, 1)
    spent = {r["user_id"] for r in Ledger(truth_ledger).balances("hidden")
             if float(r["spent"]) > 0}
    assert spent == {"u0"}


def test_a_mechanism_failure_after_reservation_names_the_user_and_marks_the_release(
        curves_csv, truth_policy, truth_ledger, tmp_path, monkeypatch):
    from tasks import privatize

    entry = registry.get("privfuncseg")
    boom = "tests.flows.test_release_truth:_boom"
    broken = type(entry)(**{**entry.__dict__, "target": boom, "batch_target": boom})
    monkeypatch.setitem(registry.MECHANISMS, "privfuncseg", broken)
    monkeypatch.setattr(privatize.CurveSpec, "check_runs", lambda self, n: None)
    with pytest.raises(privatize.MechanismRunError) as exc:
        _release(curves_csv, truth_policy, truth_ledger, tmp_path / "o", "tracks",
                 release_id="fails")
    assert "ledger close" in str(exc.value)
    # the user is named to the operator (the CLI prints operator_detail), not in the
    # message, which Prefect records in its logs and in the run's state
    assert exc.value.user_id == "user-0" and "user 'user-0'" in exc.value.operator_detail
    assert "user-0" not in str(exc.value)
    _assert_no_user_id_in_prefect("fails", ["user-0", "user-1", "user-2", "user-3"])
    led = Ledger(truth_ledger)
    assert led.release("fails")["state"] == "failed"
    # the reservations stay charged (conservative) until an operator closes the release
    assert any(float(r["spent"]) > 0 for r in led.balances("tracks"))
    led.close("fails", "mechanism failed, no output left the system")
    assert all(float(r["spent"]) == 0 for r in led.balances("tracks"))
    assert led.verify().ok


def _assert_no_user_id_in_prefect(release_id: str, users: list[str]) -> None:
    """No log line or state message of the release's flow run names one of `users`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterTags,
        LogFilter,
        LogFilterFlowRunId,
    )

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(all_=[f"release:{release_id}"])))
        assert runs, "the release's flow run is not on the server"
        texts = [r.state.message or "" for r in runs]
        for run in runs:
            logs = client.read_logs(log_filter=LogFilter(
                flow_run_id=LogFilterFlowRunId(any_=[run.id])))
            texts += [log.message for log in logs]
            texts += [t.state.message or "" for t in client.read_task_runs()
                      if t.flow_run_id == run.id and t.state is not None]
    leaked = [t for t in texts for u in users if repr(u) in t or f"user {u}" in t]
    assert not leaked, leaked


def _boom(*args, **kwargs):
    raise FloatingPointError("overflow in a planted bug")


def test_the_release_takes_its_domain_from_the_ledger_not_from_the_policy_file(
        curves_csv, truth_policy, truth_ledger, tmp_path):
    # Attack (issue #10): a --policy whose domain says hours, while the ledger's domain
    # (already charged) says seconds, released in hours and charged the seconds domain:
    # a 60x weaker guarantee than recorded.
    _release(curves_csv, truth_policy, truth_ledger, tmp_path / "o", "tracks",
             release_id="charged-in-seconds")
    hours = tmp_path / "hours.toml"
    hours.write_text(truth_policy.read_text().replace('time_unit = "s"', 'time_unit = "h"', 1))
    before = _entries(truth_ledger)
    with pytest.raises(ParameterError, match=r"domains\.tracks\.time_unit: file 'h', ledger 's'"):
        _release(curves_csv, hours, truth_ledger, tmp_path / "o", "tracks", release_id="in-h")
    assert _entries(truth_ledger) == before, "nothing may be charged"
    # without --policy the ledger's definition is used as it is
    res = release_curves(input_path=str(curves_csv), domain="tracks", epsilon="0.5",
                         out_dir=str(tmp_path / "o"), ledger_path=str(truth_ledger),
                         chunk_users=3, release_id="no-policy-file")
    assert res["manifest"]["units"] == "L2 over m x s^(1/2)"
    # a domain the ledger does not know must be applied first
    with pytest.raises(ParameterError, match="policy apply"):
        release_curves(input_path=str(curves_csv), domain="elsewhere", epsilon="0.5",
                       out_dir=str(tmp_path / "o"), ledger_path=str(truth_ledger))
