"""Crash a release at every fault point, rerun it, and compare with an uninterrupted run.

Most trials run the flow in-process on the shared Prefect harness with
PRIVPIPE_FAULT_MODE=raise (the process survives, so the exception stands in
for the kill: nothing after the fault point runs, no `finally` below the flow
matters for the ledger). Two trials are real: the CLI in a subprocess,
SIGKILLed at a fault point and from outside after a delay.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import harness
import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.faults import POINTS, InjectedFault
from flows.release import release_curves, release_streams

STREAM_POINTS = ("before_first_settle", "between_reserves", "after_manifest")


@pytest.fixture(scope="module", autouse=True)
def reserve_in_batches():
    """Reserve 3 users per ledger transaction: the 6-user curve release (3 + 3) and the
    4-user stream release (3 + 1) take two each, so a crash between them is tried too."""
    import flows.release_kinds as kinds

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kinds, "RESERVE_BATCH", 3)
        yield


def _run(setup: harness.Setup, kind: str, release_id: str, out: Path, ledger: Path) -> dict:
    common = {"release_id": release_id, "out_dir": str(out), "ledger_path": str(ledger),
              "policy_path": str(setup.policy), "chunk_users": 2}
    if kind == "curves":
        return release_curves(input_path=str(setup.inputs["curves"]), domain="tracks",
                              epsilon="1/2", **common)
    return release_streams(input_path=str(setup.inputs["streams"]), domain="meters",
                           epsilon="2", **common)


def _verify(ledger: Path) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["ledger", "verify", "--ledger", str(ledger)])
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def references(setup, tmp_path_factory) -> dict[str, harness.Reference]:
    """Uninterrupted in-process runs of each release id on copies of the template."""
    refs = {}
    for kind in ("curves", "streams"):
        work = tmp_path_factory.mktemp(f"ref-{kind}")
        ledger = harness.clone_ledger(setup.template, work / "home")
        rid = f"inproc-{kind}"
        res = _run(setup, kind, rid, work / "out", ledger)
        rdir = Path(res["out"])
        refs[kind] = harness.Reference(kind, rid, harness.balances(ledger), harness.digest(rdir),
                                       harness.output_users(rdir), 0.0)
    return refs


def test_reference_charges_what_theory_says(references, setup):
    # The template spent 1/3 for user-0, user-2 and user-3 on tracks. The release
    # charges 1/2 per curve; users 1, 3, 5 have two curves (cap 4: all admitted).
    ref = references["curves"]
    expected = {f"user-{u}": (1 + u % 2) * Fraction(1, 2)
                + (Fraction(1, 3) if u in (0, 2, 3) else 0) for u in range(6)}
    assert {k[0]: v for k, v in ref.balances.items() if k[1] == "tracks"} == expected
    assert ref.users == {f"user-{u}" for u in range(6)}
    # streams: 2 per window of w = 4 steps, i.e. 1/2 per sample; any window's sum is 2.
    # The account is the user's, over all of its streams (wevent_budget per_user: '').
    streams = {k: v for k, v in references["streams"].balances.items() if k[1] == "meters"}
    assert streams == {(f"meter-{u}", "meters", ""): Fraction(2) for u in range(4)}


@pytest.mark.parametrize(("kind", "point"),
                         [("curves", p) for p in POINTS] + [("streams", p) for p in STREAM_POINTS])
def test_crash_at_point_then_rerun_matches_uninterrupted(kind, point, setup, references,
                                                         tmp_path, monkeypatch):
    ref = references[kind]
    ledger = harness.clone_ledger(setup.template, tmp_path / "home")
    out = tmp_path / "out"
    monkeypatch.setenv("PRIVPIPE_FAULT_AT", point)
    monkeypatch.setenv("PRIVPIPE_FAULT_MODE", "raise")
    with pytest.raises(InjectedFault):
        _run(setup, kind, ref.release_id, out, ledger)
    # between the crash and the rerun, whatever was charged is on the books and verifies
    assert _verify(ledger)[0] == 0
    monkeypatch.delenv("PRIVPIPE_FAULT_AT")
    try:
        _run(setup, kind, ref.release_id, out, ledger)
        rerun = (0, "")
    except Exception as err:  # noqa: BLE001 - recorded as a lost release below
        rerun = (1, repr(err))
    res = harness.TrialResult(kind, point, killed=False)
    harness.check_after_rerun(res, ref, ledger, out / ref.release_id, rerun, _verify(ledger))
    assert res.ok, res.notes


def test_every_fault_point_is_reached(setup, tmp_path, monkeypatch):
    # A fault point the release never reaches would make its crash test vacuous.
    reached = []
    import flows.faults as faults

    real = faults.fault_point
    monkeypatch.setattr(faults, "fault_point", lambda name: (reached.append(name),
                                                                  real(name)))
    ledger = harness.clone_ledger(setup.template, tmp_path / "home")
    _run(setup, "curves", "reach-all", tmp_path / "out", ledger)
    assert set(POINTS) <= set(reached), set(POINTS) - set(reached)


@pytest.fixture(scope="module")
def subprocess_reference(setup) -> harness.Reference:
    """An uninterrupted `privpipe release curves` subprocess on a copy of the template."""
    return harness.reference_run(setup, "curves", "sub-curves")


@pytest.mark.slow
@pytest.mark.parametrize(("name", "point", "delay"), [
    ("sigkill-at-point", "before_first_settle", None),
    ("sigkill-after-delay", None, 0.6),
])
def test_real_sigkill_then_rerun(name, point, delay, setup, subprocess_reference):
    ref = subprocess_reference
    # kill after a fraction of the uninterrupted run's time, somewhere inside the release
    kill_after = None if delay is None else max(1.0, delay * ref.seconds)
    res = harness.run_trial(setup, ref, f"trial-{name}", fault_at=point, kill_after=kill_after)
    if point is not None:
        assert res.killed, "the fault point did not SIGKILL the release"
    assert res.ok, res.notes


def test_rerun_removes_staging_left_by_a_killed_run(setup, tmp_path):
    out = tmp_path / "out"
    stale = out / ".staging" / "0123456789abcdef0123456789abcdef"   # what a SIGKILL leaves
    stale.mkdir(parents=True)
    (stale / "chunk-00000.parquet").write_bytes(b"raw chunk")
    (stale / "seeds-00000.json").write_text("{}")
    ledger = harness.clone_ledger(setup.template, tmp_path / "home")
    _run(setup, "curves", "stale-staging", out, ledger)
    assert not any(p.is_file() for p in (out / ".staging").rglob("*"))
