"""The stages of a release, in the order `flows.release._release` wires them.

stage (ingest the input into private staging) -> bind (the input's keyed tag,
the release id, the ledger's binding check; a dry run or an already published
release answers here) -> reserve (every request, batch by batch, before any
noise) -> run chunks (mechanism tasks through a bounded `ChunkWindow`, settled
in chunk order) -> settle (the last settlements; a failed chunk records the
release as failed) -> post-process (the kind's, `flows.release_kinds`) ->
publish (`flows.release_publish`: outputs, manifest, report, ledger record).

Budget is reserved (durably, in the ledger) before any noise is drawn; every
user's noise comes from the ledger's HMAC seed of (release_id, user_id), so a
rerun with the same release_id reproduces the same bytes and charges nothing
more. Each stage calls its fault point (`flows.faults`) where the release
crosses a step boundary.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from prefect.context import get_run_context
from prefect.utilities.annotations import quote

from files.outputs import ParquetAppender
from files.release_dir import published_release
from flows import faults, signals
from flows.chunk_window import ChunkWindow
from flows.dry_run import dry_run_result
from flows.release_kinds import ReleaseKind
from flows.run_labels import label_run, release_tags
from ledger import Ledger
from ledger.recompute import chunk_claim_problem, curve_expected, stream_expected
from ledger.remote import open_ledger
from schemas.policy import Domain
from schemas.units import domain_record
from tasks.ledger_ops import reserve_budget, settle_chunk
from tasks.privatize import ChunkResult, MechanismRunError
from tasks.stage import StagePlan, stage_input
from tasks.user_units import samples_units


def default_release_id(flow_name: str, domain: str, fingerprint: str, parameters: dict[str, Any],
                       scheduled_date: str | None = None) -> str:
    """Deterministic release id from (flow, domain, input fingerprint, parameters, date)."""
    key = json.dumps({"flow": flow_name, "domain": domain, "input": fingerprint,
                      "parameters": parameters, "scheduled_date": scheduled_date},
                     sort_keys=True, default=str)
    prefix = "rc" if flow_name == "release_curves" else "rs"
    return f"{prefix}-{domain}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


@dataclass
class ReleaseRun:
    """One release's bound state, shared by its stages and its kind."""

    kind: ReleaseKind
    dom: Domain
    parameters: dict[str, Any]
    input_path: str
    ledger_path: str
    ledger: Ledger
    out_root: Path
    staging: Path
    plan: StagePlan
    fingerprint: str
    """The ledger's keyed tag of the input's content hash (`Ledger.input_tag`)."""
    rid: str
    in_flight: int
    dry_run: bool

    @cached_property
    def base_manifest(self) -> dict[str, Any]:
        """The manifest entries known before any budget is reserved."""
        dom = self.dom
        return {"release_id": self.rid, "flow": self.kind.flow_name, "domain": dom.name,
                "units": dom.units_label(), "value_unit": dom.value_unit,
                "time_unit": dom.time_unit, "parameters": self.parameters,
                "input_fingerprint": self.fingerprint, "input": str(self.input_path),
                "policy": domain_record(dom)}


@dataclass
class Admission:
    """The reserve's decisions: admitted users (unchanged ones included), denials."""

    admitted: set[str]
    denied: list[dict[str, Any]]
    unchanged: set[str]


def result(rid: str, rdir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """A release flow's return value."""
    return {"release_id": rid, "out": str(rdir), "report": str(rdir / "report.html"),
            "manifest": manifest}


def stage(input_path: str, dom: Domain, staging: Path, *, chunk_users: int | None,
          table: str | None) -> StagePlan:
    """Ingest, validate and stage the input in chunks (private staging, no noise)."""
    plan: StagePlan = stage_input(input_path, dom, str(staging), chunk_users=chunk_users,
                                  table=table)
    faults.fault_point("after_ingest")
    return plan


def bind(kind: ReleaseKind, plan: StagePlan, *, dom: Domain, parameters: dict[str, Any],
         release_id: str | None, scheduled_date: str | None, input_path: str,
         ledger_path: str, out_root: Path, staging: Path, in_flight: int,
         dry_run: bool) -> ReleaseRun:
    """Tag the input, name the release and refuse an id bound to other data or parameters."""
    ledger = open_ledger(ledger_path)
    # The content hash is a function of the raw data: only its keyed tag is
    # recorded, published and used to derive the release id (`Ledger.input_tag`).
    fingerprint = ledger.input_tag(plan.fingerprint)
    rid = release_id or default_release_id(kind.flow_name, dom.name, fingerprint, parameters,
                                           scheduled_date)
    label_run(rid, release_tags(dom.name, kind.spec.mechanism, parameters["notion"]), dry_run)
    # An early, clear refusal of a release id bound to other data or parameters;
    # the reserve checks the binding again in its own transaction (races).
    ledger.check_binding(rid, fingerprint, parameters)
    return ReleaseRun(kind, dom, parameters, input_path, ledger_path, ledger, out_root, staging,
                      plan, fingerprint, rid, in_flight, dry_run)


def answer_early(run: ReleaseRun) -> dict[str, Any] | None:
    """A dry run's decisions, or an already published release; None: release it."""
    kind = run.kind
    if run.dry_run:  # the decisions reserve would make (flows/dry_run.py); nothing written
        return dry_run_result(run.ledger, run.rid, run.plan, run.dom.name,
                              run.parameters["notion"], amount=kind.amount,
                              mechanism=kind.spec.mechanism, parameters=run.parameters,
                              input_fingerprint=run.fingerprint,
                              requests=kind.dry_run_requests(run))
    # A published release is checked against the ledger's manifest, never rewritten.
    published = published_release(run.out_root, run.rid, run.ledger.release(run.rid))
    if published is not None:
        return result(run.rid, run.out_root / run.rid, published)
    return None


def reserve(run: ReleaseRun) -> Admission:
    """Reserve every request of the release (the kind's batches) before any noise is drawn."""
    # Streams continue: only the steps after each stream's watermark are
    # requested; the earlier ones are repeated (tasks/continuation.py).
    unchanged: set[str] = set()
    admitted, denied = _reserve(run, run.kind.reserve_batches(run, unchanged))
    # requested and reserved: the per-user plan is not needed again (memory must
    # not grow with users; chunks keep their users and fingerprints)
    run.plan.steps.clear()
    admitted |= unchanged  # nothing new to charge: repeated only
    record = run.ledger.release(run.rid)
    if record is not None and record["state"] == "reserved" and not record["manifest"]:
        # after the reserve: only a run the binding admitted describes the release
        run.ledger.record_release(run.rid, run.base_manifest, "reserved")
    faults.fault_point("after_reserve")
    return Admission(admitted, denied, unchanged)


def _reserve(run: ReleaseRun, batches: Any) -> tuple[set[str], list[dict[str, Any]]]:
    """Reserve the release's requests, one ledger transaction per batch of `batches`.

    Each batch holds every request of its users (at most RESERVE_BATCH users,
    `flows.release_kinds`), so a user is admitted or denied whole
    (`Ledger.reserve`); users are independent (each has its own accounts), so
    batches of users decide exactly what one transaction would. Batches bound
    the memory of a reserve (its requests, decisions and DuckDB work grow with
    the batch, not with the release), and are built one at a time by the
    iterator. Every batch runs before any chunk is submitted: no noise is drawn
    until the whole release is reserved. A crash between batches leaves the
    earlier batches reserved (recorded, not spent twice): the rerun answers them
    from their entries and reserves the rest. An iterator of no batch still
    makes one (empty) reserve call. Returns the admitted users and the denials,
    sorted by user.
    """
    admitted: set[str] = set()
    denied: list[dict[str, Any]] = []
    calls = 0

    def reserve_one(requests: list[Any]) -> None:
        nonlocal calls
        if calls:
            faults.fault_point("between_reserves")
        ok, no = reserve_budget(run.ledger_path, run.rid, quote(requests),
                                mechanism=run.kind.spec.mechanism, parameters=run.parameters,
                                input_fingerprint=run.fingerprint, flow_run_id=_flow_run_id())
        calls += 1
        admitted.update(ok)
        denied.extend(no)

    for requests in batches:
        reserve_one(requests)
    if not calls:
        reserve_one([])
    return admitted, sorted(denied, key=lambda r: r["user_id"])


def _flow_run_id() -> str | None:
    try:
        ctx = get_run_context()
    except Exception:  # noqa: BLE001 - outside a run (direct call in tests)
        return None
    run = getattr(ctx, "flow_run", None)
    return str(run.id) if run is not None else None


class Spread:
    """Count, sum and max of the chunks' error bounds, added as chunks finish.

    The manifest's mean and max are those of the bounds listed in chunk order
    (the same float additions as ``sum(list)``), without keeping one float per
    curve for the release's life.
    """

    def __init__(self) -> None:
        self.n, self.total, self.top = 0, 0.0, None

    def add(self, values: list[float]) -> None:
        """Add a chunk's bounds."""
        for v in values:
            self.total += v
            self.top = v if self.top is None else max(self.top, v)
        self.n += len(values)

    @property
    def mean(self) -> float | None:
        """The mean of the bounds added (None: none)."""
        return self.total / self.n if self.n else None


class ChunkOutputs:
    """Where finished chunks' outputs go: the appender, the kind's stash, the error spreads.

    Chunk outputs come back from the tasks in memory and are appended to the
    release's Parquet files as chunks finish (in chunk order), overlapping the
    encoding with the mechanism tasks (a stream release's ``samples_units``
    too, `tasks.user_units.samples_units`; a chunk's files are encoded in
    parallel on the appender's threads, `ParquetAppender.start`); what the kind
    post-processes is kept in this process's private staging dir
    (`ReleaseKind.stash`), while the chunk's files are being encoded. A chunk
    is collected once all of its files are written.
    """

    def __init__(self, run: ReleaseRun, appender: ParquetAppender) -> None:
        self._run, self._appender = run, appender
        self.bounds, self.rms = Spread(), Spread()

    def add(self, res: ChunkResult) -> None:
        """Check a finished chunk's claimed costs, then write, stash and sum its outputs.

        The files are encoded while the units table is computed and the kind
        stashes the chunk (a stream release's population sums); the call
        returns once every file is written, and raises the first error once
        no write is running.

        Raises:
            ChargeMismatchError: the costs the task claims are not those its
                outputs cost (`check_claims`): nothing of the chunk is written
                or settled.
        """
        check_claims(self._run, res)
        app = self._appender
        writes = [app.start(name, res.tables[name]) for name in self._run.kind.streamed]
        try:
            if "samples" in res.tables:  # computed while the samples are encoded
                units = samples_units(res.tables["samples"], self._run.dom, self._run.parameters)
                if units is not None:
                    writes.append(app.start("samples_units", units))
            self._run.kind.stash(res, self._run)  # summed while the files are encoded
        except BaseException:
            futures_wait(writes)  # no thread writes once the collect has failed
            raise
        app.wait(writes)
        self.bounds.add(res.error_bounds)
        self.rms.add(res.rms_bounds)
        # written and summed: memory must not grow with users
        res.tables, res.diagnostics, res.error_bounds, res.rms_bounds = {}, {}, [], []


class ChargeMismatchError(MechanismRunError):
    """A chunk task claimed costs other than those its published outputs cost."""

    def __init__(self, index: int, problem: str) -> None:
        Exception.__init__(self, (
            f"chunk {index}: the mechanism task's claimed costs differ from the costs of its "
            f"outputs ({problem}); nothing of the chunk is published or settled and its "
            "reservation stays charged (a worker that is not the code it should run?)"))
        self.user_id, self.item_id = f"chunk {index}", f"chunk {index}"


def check_claims(run: ReleaseRun, res: ChunkResult) -> None:
    """Recompute a chunk's costs from its output tables and the public parameters; compare.

    The registry entry's cost-from-output function (`mechanisms.charges`) gives
    the cost of every released item; a task that claims any other cost (less, or
    for items it did not publish) fails its chunk, whose costs are then dropped
    so the reservation is never settled from the claim.

    Raises:
        ChargeMismatchError: naming the chunk and the first item that differs.
    """
    spec = run.kind.spec
    try:
        if "curves" in res.tables:
            expected = curve_expected(res.tables["curves"], spec.mechanism, spec.notion,
                                      spec.amount)
        else:
            expected = stream_expected(res.tables["samples"], spec.mechanism, spec.amount,
                                       spec.w, _repeated_ranges(run, res.index))
        problem = chunk_claim_problem(res.costs, expected)
    except (KeyError, ValueError, TypeError, AttributeError) as err:
        problem = f"its outputs cannot be read ({type(err).__name__}: {err})"
    if problem is not None:
        res.costs = []
        raise ChargeMismatchError(res.index, problem)


def _repeated_ranges(run: ReleaseRun, index: int) -> dict[tuple[str, str], list[tuple[int, int]]]:
    """The step ranges a stream chunk repeats from earlier releases, per (user, stream)."""
    out: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for user, sid, _, a, b in run.kind.repeated(run, index):
        out.setdefault((user, sid), []).append((a, b))
    return out


def run_chunks(run: ReleaseRun, admitted: set[str], outputs: ChunkOutputs) -> ChunkWindow:
    """Submit each chunk's admitted users to the kind's task through a bounded window.

    Each chunk travels to its task as arrays (the admitted users' samples and
    seeds), never as a path: workers need no access to this machine's files.
    Returns the window, with the chunks not yet taken still pending.
    """
    def settle(results: list[ChunkResult]) -> None:
        settle_chunk(run.ledger_path, run.rid, run.dom.name, quote(results),
                     input_fingerprint=run.fingerprint, parameters=run.parameters)
        signals.say(f"release {run.rid}: settled {len(results)} chunk(s) in the ledger")

    window = ChunkWindow(settle, outputs.add, in_flight=run.in_flight)
    submitted = 0
    try:
        for chunk in run.plan.chunks:
            users = [(u, fp) for u, fp in zip(chunk.user_ids, chunk.fingerprints, strict=True)
                     if u in admitted]
            if not users:
                continue
            if window.failed is not None:  # a failed chunk: send no more work (settle records it)
                break
            window.submit(run.kind.submit(run, chunk, users))
            submitted += 1
    except MechanismRunError as err:
        try:
            _fail(run, window, err)
        finally:
            window.close()
        raise
    except BaseException:
        window.close()
        raise
    signals.say(f"release {run.rid}: submitted {submitted} chunk(s) to the mechanism tasks "
                f"(at most {run.in_flight} in flight)")
    return window


def _fail(run: ReleaseRun, window: ChunkWindow, err: MechanismRunError) -> None:
    """Record the release as failed after a chunk failed; settle the chunks taken before it.

    Budget is reserved and some noise may have been drawn: the release is
    recorded as failed (visible to `privpipe audit`, closable with `privpipe
    ledger close`); what was settled stays settled, and a failed chunk's
    reservation stays charged (its costs are never settled).
    """
    window.settle_unsettled()
    run.ledger.record_release(run.rid, {**run.base_manifest, "error": str(err)}, "failed")


def settle(run: ReleaseRun, window: ChunkWindow) -> None:
    """Take the pending chunks and settle what is left; a failed chunk fails the release.

    The window's collector thread is stopped however this ends.
    """
    try:
        try:
            window.drain()
        except MechanismRunError as err:
            _fail(run, window, err)
            raise
        window.settle_unsettled()
    finally:
        window.close()
    faults.fault_point("after_settle")
