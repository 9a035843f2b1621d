"""Run a release through the task layer a real release uses, and read back the ledger.

The steps are those of `flows.release` without Prefect: validate and stage the
input (`stage_input_fn`), plan and reserve the ledger requests (`plan_requests`;
for streams the continuation plan `plan_release_fn`; `reserve_fn`), take the
admitted users' noise seeds from the ledger's key (`Ledger.noise_seeds`, over
each user's data fingerprint and the parameters; for streams per output
segment, `seeded_segments`),
load each chunk as the flow does (`load_curve_chunk` / `load_stream_chunk`),
privatize it with the release task's own function (`privatize_curve_chunk` /
`privatize_stream_chunk`, so the same specs, generator construction and output
snapping), and settle. The privacy
tests then check the released outputs against the amounts the LEDGER recorded
for the release (read back from its entries), never against the amounts the
test asked for.

`run_release` is that path for any domain and spec, also with denied or
rejected users (``strict=False``: only the admitted users are privatized, as
in the flow) and on a ledger shared by several releases (a stream continued
day after day). Its `LedgerView.entries` are every entry of the release
(reserve, settle, refund, deny), with exact amounts, balances after, step runs
and details.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from flows.preflight import check_mechanism
from flows.release import _framing
from ledger import Ledger
from ledger.amounts import from_units
from mechanisms import registry
from schemas.policy import Domain, Policy, Public
from tasks.continuation import plan_release_fn, seeded_segments
from tasks.ledger_ops import plan_requests, reserve_fn, settle_fn
from tasks.privatize import (
    ChunkResult,
    CurveSpec,
    StreamSpec,
    privatize_curve_chunk,
    privatize_stream_chunk,
)
from tasks.stage import load_curve_chunk, load_stream_chunk, stage_input_fn

VALUE_COLUMNS = ("x", "y")
RELEASE_ID = "privacy-test-release"


@dataclass
class LedgerView:
    """What the ledger recorded for one release, per (user, step)."""

    reserved: dict[tuple[str, str], Fraction] = field(default_factory=dict)
    breakdown: dict[tuple[str, str], dict[str, Fraction]] = field(default_factory=dict)
    step_runs: dict[tuple[str, str], list[tuple[int, int, Fraction]]] = field(
        default_factory=dict)
    notion: dict[tuple[str, str], str] = field(default_factory=dict)
    settle_detail: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)  # every entry of the release, in seq order

    def of_kind(self, kind: str) -> list[Entry]:
        """The release's entries of one kind (reserve, settle, refund, deny, close)."""
        return [e for e in self.entries if e.kind == kind]


@dataclass(frozen=True)
class Entry:
    """One ledger entry as the ledger's export gives it, amounts exact."""

    seq: int
    kind: str
    user_id: str
    step: str
    stream_id: str
    notion: str
    amount: Fraction
    balance_after: Fraction | None
    runs: tuple[tuple[int, int, Fraction], ...]  # (start, stop, per-step ε), w-event only
    detail: dict[str, Any]


@dataclass
class CurveRelease:
    """Released tables of a curve release plus the ledger's record of it."""

    spec: CurveSpec
    segments: pd.DataFrame
    curves: pd.DataFrame
    values: pd.DataFrame
    diagnostics: list[dict[str, Any]]
    ledger: LedgerView
    runs: list[list[ChunkResult]] = field(default_factory=list)  # every run, retries included

    def curve_keys(self) -> list[tuple[str, str]]:
        """(user_id, curve_id) of every released curve, in output order."""
        return list(zip(self.curves["user_id"], self.curves["curve_id"], strict=True))

    def recorded(self, user_id: str, curve_id: str, step: str | None = None) -> Fraction:
        """The exact amount the ledger settled for a curve (one sub-step, or the total)."""
        parts = self.ledger.breakdown[(user_id, f"curve:{curve_id}")]
        return sum(parts.values(), Fraction(0)) if step is None else parts[step]

    def segments_of(self, user_id: str, curve_id: str) -> pd.DataFrame:
        """The released segments of one curve, in segment order."""
        s = self.segments
        sel = s[(s["user_id"] == user_id) & (s["curve_id"] == curve_id)]
        return sel.sort_values("segment")


@dataclass
class StreamRelease:
    """Released samples of a stream release plus the ledger's record of it."""

    samples: pd.DataFrame
    ledger: LedgerView


def _domain(kind: str, notion: str, *, w: int | None = None, metric: str = "l2") -> Domain:
    """The release's domain: durations and point counts declared public."""
    if kind == "curves":
        return Domain(name="tracks", kind="curves", notion=notion, cap=Fraction(10**6),
                      time_unit="s", value_columns=VALUE_COLUMNS, value_unit="m",
                      metric=metric, public=Public(duration=True, points=True))
    return Domain(name="meters", kind="streams", notion="wevent", cap=Fraction(10**6), w=w,
                  time_unit="step", value_columns=("value",), value_unit="kW",
                  value_range=(0.0, 1.0), metric=metric)


def curves_domain(notion: str, *, metric: str = "l2", window: float | None = None,
                  grid_points: int | None = None, cap: Fraction = Fraction(10**6)) -> Domain:
    """A curves domain: public durations and point counts, or (``window``) a fixed window
    of ``grid_points`` output times with neither durations nor point counts public."""
    public = (Public(duration=True, points=True) if window is None else
              Public(duration=False, points=False))
    return Domain(name="tracks", kind="curves", notion=notion, cap=cap, time_unit="s",
                  value_columns=VALUE_COLUMNS, value_unit="m", metric=metric, public=public,
                  window=window, grid_points=grid_points)


def streams_domain(w: int, *, cap: Fraction = Fraction(10**6),
                   wevent_budget: str = "per_user") -> Domain:
    """A [0, 1] streams domain with windows of `w` steps."""
    return Domain(name="meters", kind="streams", notion="wevent", cap=cap, w=w,
                  time_unit="step", value_columns=("value",), value_unit="kW",
                  value_range=(0.0, 1.0), metric="wevent", wevent_budget=wevent_budget)


def new_ledger(tmp: Path, dom: Domain) -> Path:
    """A fresh ledger under `tmp` holding the one domain `dom`."""
    return _ledger(tmp, dom)


def stream_frame(streams: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """An input table from {(user_id, stream_id): (steps, values in [0, 1])}."""
    return pd.concat([pd.DataFrame({"user_id": u, "stream_id": s, "t": t, "value": v})
                      for (u, s), (t, v) in streams.items()], ignore_index=True)


def _ledger(tmp: Path, dom: Domain) -> Path:
    path = tmp / "ledger" / "ledger.duckdb"
    led = Ledger.init(path, actor="privacy-tests")
    led.apply_policy(Policy(domains={dom.name: dom}))
    return path


def _read_entries(ledger_path: Path, release_id: str) -> LedgerView:
    out = ledger_path.parent / "entries.json"
    Ledger(ledger_path).export(out, fmt="json", what="entries")
    view = LedgerView()
    for e in json.loads(out.read_text()):
        if e["release_id"] != release_id:
            continue
        key = (e["user_id"], e["step"])
        amount = from_units(int(e["amount_quanta"]))
        runs = tuple((int(a), int(b), from_units(int(q))) for a, b, q in
                     (r.split(":") for r in (e["step_runs"] or "").split(";") if r))
        after = e["balance_after_quanta"]
        view.entries.append(Entry(
            int(e["seq"]), e["kind"], e["user_id"], e["step"], e["stream_id"], e["notion"],
            amount, None if after is None else from_units(int(after)), runs,
            json.loads(e["detail"]) if e["detail"] else {}))
        if e["kind"] == "reserve":
            view.reserved[key] = amount
            view.notion[key] = e["notion"]
            if e["step_runs"]:
                view.step_runs[key] = [
                    (int(a), int(b), from_units(int(q)))
                    for a, b, q in (r.split(":") for r in e["step_runs"].split(";"))]
        elif e["kind"] == "settle":
            detail = json.loads(e["detail"]) if e["detail"] else {}
            parts = detail.get("breakdown", [])
            if parts and isinstance(parts[0], dict) and "step" in parts[0]:
                view.breakdown[key] = {i["step"]: Fraction(i["amount"]) for i in parts}
            view.settle_detail[key] = detail
    view.entries.sort(key=lambda e: e.seq)
    return view


def _table(tables: list[pa.Table]) -> pd.DataFrame:
    return pa.concat_tables(tables).to_pandas() if tables else pd.DataFrame()


@dataclass
class ReleaseRun:
    """One release through the task layer: every run's chunk results and what the ledger holds."""

    runs: list[list[ChunkResult]]
    ledger: LedgerView
    admitted: set[str]
    denied: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    ledger_path: Path

    def table(self, name: str) -> pd.DataFrame:
        """The last run's output table `name` (``samples``, ``values``, ...), all chunks."""
        return _table([r.tables[name] for r in self.runs[-1]])


def run_release(tmp: Path, dom: Domain, frame: pd.DataFrame, spec: CurveSpec | StreamSpec, *,
                ledger_path: Path | None = None, release_id: str = RELEASE_ID,
                parameters: dict[str, Any] | None = None, runs: int = 1,
                strict: bool = True) -> ReleaseRun:
    """Stage, plan, reserve, privatize the admitted users and settle, as `flows.release` does.

    ``strict``: fail on any rejected or denied user (else they are returned,
    and only the admitted users are privatized, as the flow does).
    ``parameters``: what the release is bound to and its seeds cover (default
    ``{"test": notion}``).
    """
    ledger_path = ledger_path or _ledger(tmp, dom)
    staging = tmp / f"staging-{release_id}"
    plan = stage_input_fn(frame, dom, str(staging), chunk_users=100)
    assert not (strict and plan.rejected), plan.rejected
    rejected = list(plan.rejected)
    cont = None
    notion = spec.notion if isinstance(spec, CurveSpec) else "wevent"
    if isinstance(spec, CurveSpec):
        requests = plan_requests(plan, dom.name, spec.notion, amount=spec.amount)
    else:  # streams plan against their watermarks, as the flow does (tasks/continuation.py)
        cont = plan_release_fn(str(ledger_path), release_id, dom.name, plan,
                               spec.epsilon_per_step)
        assert not (strict and cont.rejected), cont.rejected
        rejected += cont.rejected
        requests = cont.requests
    parameters = parameters if parameters is not None else {"test": notion}
    ledger = Ledger(ledger_path)
    fingerprint = ledger.input_tag(plan.fingerprint)  # as the flow records it
    admitted, denied = reserve_fn(str(ledger_path), release_id, requests,
                                  mechanism=spec.mechanism, parameters=parameters,
                                  input_fingerprint=fingerprint, flow_run_id=None)
    assert not (strict and denied), denied
    if cont is not None:
        admitted |= cont.unchanged
    every: list[list[ChunkResult]] = []
    for _run_no in range(runs):  # runs > 1: the task retried on the same chunk and seeds
        results: list[ChunkResult] = []
        every.append(results)
        for chunk in plan.chunks:
            users = [(u, fp) for u, fp in zip(chunk.user_ids, chunk.fingerprints, strict=True)
                     if u in admitted]
            if not users:
                continue
            if isinstance(spec, CurveSpec):
                seeds = ledger.noise_seeds(release_id, [u for u, _ in users],
                                           [fp for _, fp in users], parameters)
                results.append(privatize_curve_chunk(
                    load_curve_chunk(chunk, dom.value_columns, seeds), dom.value_columns, spec))
            else:
                segments = seeded_segments(ledger, release_id, parameters,
                                           cont.plans[chunk.index], [u for u, _ in users])
                results.append(privatize_stream_chunk(load_stream_chunk(chunk, segments), spec))
    settle_fn(str(ledger_path), release_id, dom.name, every[-1],
              input_fingerprint=fingerprint, parameters=parameters)
    shutil.rmtree(staging, ignore_errors=True)
    return ReleaseRun(every, _read_entries(ledger_path, release_id), admitted, denied, rejected,
                      ledger_path)


def _run(tmp: Path, dom: Domain, frame: pd.DataFrame, spec: CurveSpec | StreamSpec,
         *, notion: str, ledger_path: Path | None = None, release_id: str = RELEASE_ID,
         runs: int = 1) -> tuple[list[list[ChunkResult]], LedgerView]:
    out = run_release(tmp, dom, frame, spec, ledger_path=ledger_path, release_id=release_id,
                      parameters={"test": notion}, runs=runs)
    return out.runs, out.ledger


def curve_frame(curves: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """An input table from {(user_id, curve_id): (t, values (N, 2))}."""
    parts = [pd.DataFrame({"user_id": u, "curve_id": c, "t": t, "x": v[:, 0], "y": v[:, 1]})
             for (u, c), (t, v) in curves.items()]
    return pd.concat(parts, ignore_index=True)


def release_curves(tmp: Path, mechanism: str, notion: str, amount: str,
                   options: dict[str, Any],
                   curves: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]],
                   *, ledger_path: Path | None = None, release_id: str = RELEASE_ID,
                   runs: int = 1, domain: Domain | None = None) -> CurveRelease:
    """Release `curves` through the task layer as `flows.release.release_curves` does.

    The domain has the mechanism's metric (from the registry) and public
    durations and point counts; the spec is built, metric-checked and dry-run
    like the flow's. ``runs > 1`` runs the privatize task again on the same
    chunks and seeds (a retry); every run's results are in ``runs``. Returns
    the outputs of the last run and the ledger's record. ``domain`` replaces
    that domain (e.g. a CGP domain charged by a GP mechanism, or a fixed window).
    """
    dom = domain or _domain("curves", notion, metric=registry.get(mechanism).metric)
    check_mechanism(dom, mechanism)
    spec = CurveSpec(mechanism, amount if notion == "gp" else None,
                     amount if notion == "cgp" else None, dict(options), framing=_framing(dom))
    spec.check_runs(len(dom.value_columns))
    every, view = _run(tmp, dom, curve_frame(curves), spec, notion=spec.notion,
                       ledger_path=ledger_path, release_id=release_id, runs=runs)
    results = every[-1]
    return CurveRelease(
        spec=spec,
        segments=_table([r.tables["segments"] for r in results]),
        curves=_table([r.tables["curves"] for r in results]),
        values=_table([r.tables["values"] for r in results]),
        diagnostics=[dict(zip(r.diagnostics, row, strict=True)) for r in results
                     for row in zip(*r.diagnostics.values(), strict=True)],
        ledger=view,
        runs=every,
    )


def release_streams(tmp: Path, spec: StreamSpec,
                    streams: dict[tuple[str, str], np.ndarray]) -> StreamRelease:
    """Release [0, 1] streams {(user_id, stream_id): values} with `spec` (steps 0..n-1)."""
    dom = _domain("streams", "wevent", w=spec.w, metric="wevent")
    check_mechanism(dom, spec.mechanism)
    frame = pd.concat([pd.DataFrame({"user_id": u, "stream_id": s, "t": np.arange(len(v)),
                                     "value": v}) for (u, s), v in streams.items()],
                      ignore_index=True)
    every, view = _run(tmp, dom, frame, spec, notion="wevent")
    results = every[-1]
    return StreamRelease(samples=_table([r.tables["samples"] for r in results]),
                         ledger=view)
