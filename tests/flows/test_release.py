"""End-to-end release flows on one shared Prefect harness."""

from __future__ import annotations

import hashlib
import shutil
import threading
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from flows.faults import InjectedFault
from flows.release import release_curves, release_streams
from ledger import Ledger
from tests.flows.ledger_rows import reserve_rows


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.glob("*.parquet"))}


def _entries(ledger_path: Path) -> int:
    con = duckdb.connect(str(ledger_path), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM entries").fetchone()[0]
    finally:
        con.close()


def _curves(curves_csv, policy_file, ledger_path, out, **kw):
    return release_curves(input_path=str(curves_csv), domain="tracks", epsilon="0.5",
                          out_dir=str(out), ledger_path=str(ledger_path),
                          policy_path=str(policy_file), chunk_users=2, **kw)


def test_release_curves_end_to_end_and_rerun(curves_csv, policy_file, ledger_path, tmp_path):
    res = _curves(curves_csv, policy_file, ledger_path, tmp_path / "out")
    rdir = Path(res["out"])
    assert res["manifest"]["counts"]["users_released"] == 6
    values = pq.read_table(rdir / "values.parquet").to_pandas()
    assert set(values["user_id"]) == {f"user-{u}" for u in range(6)}
    assert {"x", "y", "t", "curve_id"} <= set(values.columns)
    assert (rdir / "report.html").exists() and (rdir / "plots" / "private_curves.png").exists()
    # the manifest's error-bound figures are those of the released curves (chunk order)
    curves = pq.read_table(rdir / "curves.parquet").to_pandas()
    eb = res["manifest"]["error_bound"]
    assert eb["max"] == curves["error_bound"].max()
    assert eb["mean"] == sum(curves["error_bound"].tolist()) / len(curves) == pytest.approx(
        curves["error_bound"].mean())
    rms = (curves["error_bound"] / curves["duration"] ** 0.5).tolist()
    assert eb["rms_max"] == pytest.approx(max(rms)) and eb["rms_mean"] == pytest.approx(
        sum(rms) / len(rms))
    assert not any((tmp_path / "out" / ".staging").glob("*/*")), "staging must be removed"
    # 9 curves (users 1, 3, 5 have two) at ε = 0.5: every account is charged exactly its curves.
    bal = {r["user_id"]: float(r["spent"]) for r in Ledger(ledger_path).balances("tracks")}
    assert bal == {f"user-{u}": 0.5 * (1 + u % 2) for u in range(6)}
    first = _digest(rdir)
    n_entries = _entries(ledger_path)
    again = _curves(curves_csv, policy_file, ledger_path, tmp_path / "out")
    assert again["release_id"] == res["release_id"]
    assert _digest(rdir) == first
    assert _entries(ledger_path) == n_entries, "a rerun must write no ledger entry"
    assert Ledger(ledger_path).verify().ok


def test_denied_users_get_no_output(curves_csv, policy_file, ledger_path, tmp_path):
    # cap 2: users with two curves can afford one release at ε = 1 but not a second one.
    _curves(curves_csv, policy_file, ledger_path, tmp_path / "a", release_id="first")
    res = release_curves(input_path=str(curves_csv), domain="tracks", epsilon="1",
                         out_dir=str(tmp_path / "b"), ledger_path=str(ledger_path),
                         policy_path=str(policy_file), release_id="second")
    counts = res["manifest"]["counts"]
    # after "first" (ε=0.5 per curve): one-curve users spent 0.5, two-curve users 1.0;
    # "second" asks 1 per curve: one-curve users -> 1.5 (ok), two-curve users -> 3.0 (denied).
    assert counts["users_released"] == 3 and counts["users_denied"] == 3
    values = pq.read_table(Path(res["out"]) / "values.parquet").to_pandas()
    assert set(values["user_id"]) == {"user-0", "user-2", "user-4"}
    for r in Ledger(ledger_path).balances("tracks"):
        assert float(r["spent"]) <= float(r["cap"])


def test_reserve_in_batches_decides_what_one_transaction_does(curves_csv, policy_file,
                                                              tmp_path, monkeypatch):
    """Four users per reserve transaction (4 + 2 for six users, one user's two curves
    always in the same one) admit, deny and charge exactly as one transaction."""
    import flows.release_kinds as kinds
    import flows.release_stages as stages
    from schemas.policy import load_policy

    calls: list[set[str]] = []
    real = stages.reserve_budget

    def counting(ledger, rid, requests, **kw):
        calls.append({r.user_id for r in requests.unquote()})
        return real(ledger, rid, requests, **kw)

    template = tmp_path / "template"
    template.mkdir()
    Ledger.init(template / "ledger.duckdb").apply_policy(load_policy(policy_file))
    runs = {}
    for name, batch in (("one", 50_000), ("batched", 4)):
        monkeypatch.setattr(kinds, "RESERVE_BATCH", batch)
        monkeypatch.setattr(stages, "reserve_budget", counting)
        calls.clear()
        shutil.copytree(template, tmp_path / name)  # the same noise key: the same noise
        ledger_path = tmp_path / name / "ledger.duckdb"
        _curves(curves_csv, policy_file, ledger_path, tmp_path / name / "a", release_id="first")
        res = release_curves(input_path=str(curves_csv), domain="tracks", epsilon="1",
                             out_dir=str(tmp_path / name / "b"), ledger_path=str(ledger_path),
                             policy_path=str(policy_file), release_id="second")
        runs[name] = (res, reserve_rows(ledger_path), _digest(Path(res["out"])),
                      [sorted(c) for c in calls])
    one, batched = runs["one"], runs["batched"]
    assert [len(c) for c in one[3]] == [6, 6]
    first, rest = [f"user-{u}" for u in range(4)], ["user-4", "user-5"]
    assert batched[3] == [first, rest, first, rest]
    assert batched[1] == one[1]  # the same decisions, amounts and balances, in the same order
    assert ("second", "user-1", "curve:c0", "deny") in {r[:4] for r in batched[1]}
    assert batched[2] == one[2]  # and the same released bytes
    assert batched[0]["manifest"]["counts"] == one[0]["manifest"]["counts"]
    assert Ledger(tmp_path / "batched" / "ledger.duckdb").verify().ok


@pytest.mark.parametrize("point", ["after_reserve", "after_first_chunk"])
def test_crash_then_rerun_reproduces(point, curves_csv, policy_file, ledger_path, tmp_path,
                                     monkeypatch):
    clean = _curves(curves_csv, policy_file, ledger_path, tmp_path / "clean",
                    release_id=f"clean-{point}")
    monkeypatch.setenv("PRIVPIPE_FAULT_AT", point)
    with pytest.raises(InjectedFault):
        _curves(curves_csv, policy_file, ledger_path, tmp_path / "crash",
                release_id=f"crash-{point}")
    monkeypatch.delenv("PRIVPIPE_FAULT_AT")
    spent_after_crash = {r["user_id"]: float(r["spent"])
                         for r in Ledger(ledger_path).balances("tracks")}
    res = _curves(curves_csv, policy_file, ledger_path, tmp_path / "crash",
                  release_id=f"crash-{point}")
    spent = {r["user_id"]: float(r["spent"]) for r in Ledger(ledger_path).balances("tracks")}
    assert spent == spent_after_crash, "the rerun must charge nothing more"
    assert sorted(pq.read_table(Path(res["out"]) / "values.parquet").column_names) == sorted(
        pq.read_table(Path(clean["out"]) / "values.parquet").column_names)
    assert Ledger(ledger_path).verify().ok
    # same release id, same seeds: a second rerun gives the same bytes as the resumed run
    first = _digest(Path(res["out"]))
    _curves(curves_csv, policy_file, ledger_path, tmp_path / "crash", release_id=f"crash-{point}")
    assert _digest(Path(res["out"])) == first


def test_release_id_reuse_with_other_parameters_is_refused(curves_csv, policy_file, ledger_path,
                                                           tmp_path):
    from schemas.errors import ParameterError

    _curves(curves_csv, policy_file, ledger_path, tmp_path / "o", release_id="fixed")
    with pytest.raises(ParameterError, match="reserved with other parameters"):
        release_curves(input_path=str(curves_csv), domain="tracks", epsilon="0.25",
                       out_dir=str(tmp_path / "o"), ledger_path=str(ledger_path),
                       policy_path=str(policy_file), release_id="fixed")


def test_two_releases_at_once(curves_csv, streams_csv, policy_file, ledger_path, tmp_path):
    results: dict[str, object] = {}

    def run(name, fn):
        try:
            results[name] = fn()
        except Exception as err:  # noqa: BLE001
            results[name] = err

    a = threading.Thread(target=run, args=("c", lambda: _curves(
        curves_csv, policy_file, ledger_path, tmp_path / "c")))
    b = threading.Thread(target=run, args=("s", lambda: release_streams(
        input_path=str(streams_csv), domain="meters", epsilon="1", out_dir=str(tmp_path / "s"),
        ledger_path=str(ledger_path), policy_path=str(policy_file))))
    a.start()
    b.start()
    a.join()
    b.join()
    assert isinstance(results["c"], dict), results["c"]
    assert isinstance(results["s"], dict), results["s"]
    assert Ledger(ledger_path).verify().ok


def test_release_streams_with_cpr(streams_csv, policy_file, ledger_path, tmp_path):
    res = release_streams(input_path=str(streams_csv), domain="meters", epsilon="2",
                          out_dir=str(tmp_path), ledger_path=str(ledger_path),
                          policy_path=str(policy_file))
    rdir = Path(res["out"])
    samples = pq.read_table(rdir / "samples.parquet").to_pandas()
    assert len(samples) == 3 * 240
    rec = pq.read_table(rdir / "reconstruction.parquet").to_pandas()
    assert len(rec) == 3 * 240
    assert res["manifest"]["counts"]["users_released"] == 3
    from flows.outcome import ReleaseNotMadeError

    # the same steps at another ε cannot continue the streams (tasks/continuation.py):
    # every user rejected with the reason, nothing charged
    with pytest.raises(ReleaseNotMadeError, match="3 rejected") as exc:
        release_streams(input_path=str(streams_csv), domain="meters", epsilon="1",
                        out_dir=str(tmp_path), ledger_path=str(ledger_path),
                        policy_path=str(policy_file), release_id="other-epsilon")
    assert exc.value.result["manifest"]["counts"]["users_rejected"] == 3
    # the next steps, when another charge already fills their windows: all denied, and
    # the run fails (state Denied, exit 3) with the counts
    from fractions import Fraction

    import pandas as pd

    from ledger import Request
    from mechanisms.cost import StepRun

    users = sorted(samples["user_id"].unique())
    Ledger(str(ledger_path)).reserve("filler", [
        Request(user_id=u, domain="meters", step="manual", notion="wevent", stream_id="s0",
                runs=(StepRun(240, 480, Fraction(1, 2)),)) for u in users],
        mechanism="manual", parameters={})
    later = tmp_path / "later.csv"
    pd.read_csv(streams_csv).assign(t=lambda d: d["t"] + 240).to_csv(later, index=False)
    with pytest.raises(ReleaseNotMadeError, match="0 of 3 users released; 3 denied") as exc:
        release_streams(input_path=str(later), domain="meters", epsilon="2",
                        out_dir=str(tmp_path), ledger_path=str(ledger_path),
                        policy_path=str(policy_file), release_id="second-pass")
    assert exc.value.exit_code == 3
    assert exc.value.result["manifest"]["counts"]["users_denied"] == 3


@pytest.mark.slow
def test_dask_runner_matches_threads(curves_csv, policy_file, ledger_path, tmp_path):
    from flows.runners import make_task_runner

    threads = release_curves.with_options(task_runner=make_task_runner("threads"))(
        input_path=str(curves_csv), domain="tracks", epsilon="0.5", out_dir=str(tmp_path / "t"),
        ledger_path=str(ledger_path), policy_path=str(policy_file), chunk_users=2,
        release_id="same")
    dask = release_curves.with_options(task_runner=make_task_runner("dask"))(
        input_path=str(curves_csv), domain="tracks", epsilon="0.5", out_dir=str(tmp_path / "d"),
        ledger_path=str(ledger_path), policy_path=str(policy_file), chunk_users=2,
        release_id="same")
    assert _digest(Path(threads["out"])) == _digest(Path(dask["out"]))


def test_stored_release_can_be_re_evaluated(curves_csv, policy_file, ledger_path, tmp_path):
    """The Parquet outputs hold everything needed to rebuild each private function."""
    import json

    import numpy as np

    from mechanisms.curves import PrivateFunction

    res = _curves(curves_csv, policy_file, ledger_path, tmp_path / "o", release_id="rebuild")
    rdir = Path(res["out"])
    curves = pq.read_table(rdir / "curves.parquet").to_pandas()
    segs = pq.read_table(rdir / "segments.parquet").to_pandas()
    values = pq.read_table(rdir / "values.parquet").to_pandas()
    row = curves.iloc[0]
    mine = segs[(segs.user_id == row.user_id) & (segs.curve_id == row.curve_id)]
    edges = np.append(mine.t_start.to_numpy(), mine.t_end.to_numpy()[-1])
    coefs = np.stack([np.asarray(c) for c in mine.coefficients]).reshape(len(mine), -1, 2)
    fn = PrivateFunction.from_arrays({
        "breakpoints": edges, "coefficients": coefs, "basis_name": row.basis,
        "basis_params": json.loads(row.basis_params), "outside": row.outside,
        "dim": int(row.dim), "cost": None, "diagnostics": {}})
    pts = values[(values.user_id == row.user_id) & (values.curve_id == row.curve_id)]
    np.testing.assert_allclose(fn.evaluate(pts.t.to_numpy()), pts[["x", "y"]].to_numpy(),
                               rtol=1e-9, atol=1e-6)


def test_released_floats_lie_on_the_snapping_grid(curves_csv, streams_csv, policy_file,
                                                 ledger_path, tmp_path):
    """Low-order bits of the samplers never leave: outputs are snapped (SECURITY.md)."""
    import numpy as np

    res = _curves(curves_csv, policy_file, ledger_path, tmp_path / "c", release_id="grid-c")
    segs = pq.read_table(Path(res["out"]) / "segments.parquet").to_pandas()
    coefs = np.concatenate([np.asarray(c) for c in segs.coefficients])
    grid = 2.0 * 2.0**-20  # power of two >= 1/ε (ε = 0.5) times 2^-20
    assert np.all(np.abs(coefs / grid - np.rint(coefs / grid)) == 0)
    res = release_streams(input_path=str(streams_csv), domain="meters", epsilon="1",
                          out_dir=str(tmp_path / "s"), ledger_path=str(ledger_path),
                          policy_path=str(policy_file), release_id="grid-s")
    y = pq.read_table(Path(res["out"]) / "samples.parquet").column("y").to_numpy()
    k = (y - 0.5) / 2.0**-24
    assert np.all(k == np.rint(k))


def test_settle_batches_grow_with_what_is_settled(curves_csv, policy_file, ledger_path,
                                                  tmp_path, monkeypatch):
    """A release settles in batches that grow (few ledger transactions) up to a cap.

    One user per chunk (1, 2, 1, 2, 1, 2 curves): with a first batch of 1 and a
    cap of 3 the settle transactions take 1, 2, 3 and 3 settlements, where a fixed
    batch would take six transactions; every settlement still lands.
    """
    import flows.chunk_window as window
    import flows.release_stages as stages

    batches: list[int] = []
    threads: list[str] = []
    real = stages.settle_chunk

    def counting(ledger, rid, domain, results, **kw):
        batches.append(sum(len(r.costs) for r in results.unquote()))  # prefect's quote
        threads.append(threading.current_thread().name)
        return real(ledger, rid, domain, results, **kw)

    monkeypatch.setattr(stages, "settle_chunk", counting)
    monkeypatch.setattr(window, "SETTLE_BATCH", 1)
    monkeypatch.setattr(window, "MAX_SETTLE_BATCH", 3)
    release_curves(input_path=str(curves_csv), domain="tracks", epsilon="0.5",
                   out_dir=str(tmp_path / "out"), ledger_path=str(ledger_path),
                   policy_path=str(policy_file), chunk_users=1)
    assert batches == [1, 2, 3, 3]
    # the first settle in the flow thread (between its fault points), every later batch as
    # a Prefect task on the settle thread while the flow thread takes the next chunks
    assert [t.startswith("privpipe-settle") for t in threads] == [False, True, True, True]
    bal = {r["user_id"]: float(r["spent"]) for r in Ledger(ledger_path).balances("tracks")}
    assert bal == {f"user-{u}": 0.5 * (1 + u % 2) for u in range(6)}
    assert Ledger(ledger_path).verify().ok
