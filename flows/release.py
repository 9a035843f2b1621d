"""Release flows: `release_curves` and `release_streams`.

The chain (docs/design.md): ingest -> plan -> ledger reserve -> mechanism tasks
over chunks of users -> ledger settle -> outputs -> reconstruction -> report.
The flows only wire tasks. Budget is reserved (durably, in the ledger) before
any noise is drawn; every user's noise comes from the ledger's HMAC seed of
(release_id, user_id), so a rerun with the same release_id reproduces the
same bytes and charges nothing more.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from pathlib import Path
from typing import Any, Literal

import pyarrow.compute as pc
from prefect import flow
from prefect.context import get_run_context
from prefect.utilities.annotations import quote

from files.outputs import ParquetAppender
from files.release_dir import ReleaseBuild, published_release
from files.staging import read_arrow, write_arrow
from files.staging_dir import StagingDir
from flows.dry_run import dry_run_result
from flows.faults import fault_point
from flows.outcome import rejection_counts, release_state
from flows.preflight import (
    CURVE_MECHANISMS,
    EVALUATE_ON,
    RECONSTRUCT,
    STREAM_MECHANISMS,
    release_domain,
)
from flows.run_labels import label_run, release_tags, run_name
from ledger import Ledger
from mechanisms import registry
from mechanisms.cost import exact, float_at_most
from schemas.errors import ParameterError
from schemas.names import check_name
from schemas.policy import Domain
from schemas.units import domain_record
from tasks.ledger_ops import by_user, plan_requests, reserve_budget, settle_chunk
from tasks.privatize import (
    ChunkResult,
    CurveFraming,
    CurveSpec,
    MechanismRunError,
    StreamSpec,
    privatize_curves,
    privatize_streams,
)
from tasks.report import write_release_report
from tasks.stage import StagePlan, load_curve_chunk, load_stream_chunk, stage_input
from tasks.user_units import write_user_unit_outputs

SETTLE_BATCH = 2000
"""The settlements of a release's first ledger transaction (see `_release`)."""
MAX_SETTLE_BATCH = 50_000
"""The most settlements one ledger transaction of a release takes (see `_release`)."""
RESERVE_BATCH = 50_000
"""The most users one reserve transaction of a release takes (see `_reserve`)."""


def default_release_id(flow_name: str, domain: str, fingerprint: str, parameters: dict[str, Any],
                       scheduled_date: str | None = None) -> str:
    """Deterministic release id from (flow, domain, input fingerprint, parameters, date)."""
    key = json.dumps({"flow": flow_name, "domain": domain, "input": fingerprint,
                      "parameters": parameters, "scheduled_date": scheduled_date},
                     sort_keys=True, default=str)
    prefix = "rc" if flow_name == "release_curves" else "rs"
    return f"{prefix}-{domain}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _domain(ledger_path: str, policy_path: str | None, name: str, kind: str) -> Domain:
    """The ledger's definition of the domain (`flows.preflight.release_domain`)."""
    return release_domain(Ledger(ledger_path), policy_path, name, kind)


def _check_metric(dom: Domain, mechanism: str) -> None:
    """Refuse a mechanism whose guarantee is in another metric than the domain's."""
    entry = registry.get(mechanism, dom.kind)
    if entry.metric != dom.metric:
        raise ParameterError(
            f"mechanism {mechanism!r} is private w.r.t. {entry.metric}, but domain "
            f"{dom.name!r} states its guarantee in {dom.metric} ({dom.units_label()}): no "
            f"budget of this domain covers it; use a {entry.metric} domain or another "
            f"mechanism ({', '.join(_mechanisms_of(dom))})")


def _points_public(dom: Domain) -> bool:
    return dom.kind == "streams" or (dom.public is not None and dom.public.points)


def _mechanisms_of(dom: Domain) -> list[str]:
    return [n for n in registry.names(dom.kind) if registry.get(n).metric == dom.metric]


def _framing(dom: Domain) -> CurveFraming:
    pub = dom.public
    if pub is None:
        raise ParameterError(
            f"domain {dom.name!r} declares no public metadata; apply a policy whose "
            f"[domains.{dom.name}.public] table says what is released outside the noise")
    return CurveFraming(window=dom.window, points_public=pub.points,
                        grid_points=dom.grid_points, sample_times_public=pub.sample_times)


def _flow_run_id() -> str | None:
    try:
        ctx = get_run_context()
    except Exception:  # noqa: BLE001 - outside a run (direct call in tests)
        return None
    run = getattr(ctx, "flow_run", None)
    return str(run.id) if run is not None else None


def _scheduled_date() -> str | None:
    """The scheduled date of a deployment run (None for ad-hoc runs)."""
    try:
        from prefect.runtime import deployment, flow_run

        if deployment.id is None:
            return None
        return flow_run.scheduled_start_time.date().isoformat()
    except Exception:  # noqa: BLE001 - outside a deployment run
        return None


def _continuation(ledger_path: str, rid: str, domain: str, plan: StagePlan,
                  spec: StreamSpec) -> Any:
    """The whole continuation plan of a stream dry run; users it rejects join the plan's rejected.

    A release plans and reserves group by group instead (`_stream_batches`).
    """
    from tasks.continuation import plan_release

    cont = plan_release(ledger_path, rid, domain, quote(plan), spec.epsilon_per_step)
    plan.rejected.extend(cont.rejected)
    plan.users -= len(cont.rejected)
    return cont


def _reserve(ledger_path: str, rid: str, batches: Any, spec: CurveSpec | StreamSpec, *,
             parameters: dict[str, Any], fingerprint: str
             ) -> tuple[set[str], list[dict[str, Any]]]:
    """Reserve the release's requests, one ledger transaction per batch of `batches`.

    Each batch holds every request of its users (at most RESERVE_BATCH users),
    so a user is admitted or denied whole (`Ledger.reserve`); users are
    independent (each has its own accounts), so batches of users decide
    exactly what one transaction would. Batches bound the memory of a reserve
    (its requests, decisions and DuckDB work grow with the batch, not with the
    release), and are built one at a time by the iterator. Every batch runs
    before any chunk is submitted: no noise is drawn until the whole release is
    reserved. A crash between batches leaves the earlier batches reserved
    (recorded, not spent twice): the rerun answers them from their entries and
    reserves the rest. An iterator of no batch still makes one (empty) reserve
    call. Returns the admitted users and the denials, sorted by user.
    """
    admitted: set[str] = set()
    denied: list[dict[str, Any]] = []
    calls = 0

    def reserve(requests: list[Any]) -> None:
        nonlocal calls
        if calls:
            fault_point("between_reserves")
        ok, no = reserve_budget(ledger_path, rid, quote(requests), mechanism=spec.mechanism,
                                parameters=parameters, input_fingerprint=fingerprint,
                                flow_run_id=_flow_run_id())
        calls += 1
        admitted.update(ok)
        denied.extend(no)

    for requests in batches:
        reserve(requests)
    if not calls:
        reserve([])
    return admitted, sorted(denied, key=lambda r: r["user_id"])


def _curve_batches(plan: StagePlan, dom: Domain, spec: CurveSpec) -> Any:
    """The curve release's requests, RESERVE_BATCH users at a time (built batch by batch)."""
    users = sorted(plan.steps)
    return (plan_requests(plan, dom.name, spec.notion, amount=spec.amount,
                          users=users[i:i + RESERVE_BATCH])
            for i in range(0, max(len(users), 1), RESERVE_BATCH))


def _chunk_groups(chunks: list[Any], max_users: int) -> list[list[Any]]:
    """Consecutive chunks in groups of at most `max_users` users (one chunk at least)."""
    groups: list[list[Any]] = []
    users = 0
    for chunk in chunks:
        if groups and users + len(chunk.user_ids) <= max_users:
            groups[-1].append(chunk)
            users += len(chunk.user_ids)
        else:
            groups.append([chunk])
            users = len(chunk.user_ids)
    return groups


def _stream_batches(ledger_path: str, rid: str, plan: StagePlan, dom: Domain, spec: StreamSpec,
                    staging: Path, unchanged: set[str]) -> Any:
    """Plan the streams' continuations group by group, yielding each group's requests.

    A group is consecutive chunks of at most RESERVE_BATCH users. For each, the
    continuation plan (`tasks.continuation`: what each stream repeats and what
    it adds) is made, its rejected users join the plan's, its users with
    nothing new join `unchanged`, each chunk's stream plans are written to the
    private staging directory for its task (`chunk_plans_path`), and the
    group's requests are yielded, in batches of at most RESERVE_BATCH users
    (`by_user`), to be reserved before the next group is planned. So only one
    group's requests and plans are ever in memory. Each user's plan reads only
    that user's released ranges, so planning group by group plans what one pass
    would. A group with no request yields nothing.
    """
    from tasks.continuation import plan_release, write_chunk_plans

    for group in _chunk_groups(plan.chunks, RESERVE_BATCH):
        cont = plan_release(ledger_path, rid, dom.name, quote(plan), spec.epsilon_per_step,
                            chunks=quote(group))
        plan.rejected.extend(cont.rejected)
        plan.users -= len(cont.rejected)
        unchanged |= cont.unchanged
        for index, plans in cont.plans.items():
            write_chunk_plans(chunk_plans_path(staging, index), plans)
        if cont.requests:
            yield from by_user(cont.requests, RESERVE_BATCH)


def chunk_plans_path(staging: Path, index: int) -> Path:
    """Where a stream chunk's continuation plans wait for its task (private staging)."""
    return staging / f"plans-{index:05d}.json"


class _Spread:
    """Count, sum and max of the chunks' error bounds, added as chunks finish.

    The manifest's mean and max are those of the bounds listed in chunk order
    (the same float additions as ``sum(list)``), without keeping one float per
    curve for the release's life.
    """

    def __init__(self) -> None:
        self.n, self.total, self.top = 0, 0.0, None

    def add(self, values: list[float]) -> None:
        for v in values:
            self.total += v
            self.top = v if self.top is None else max(self.top, v)
        self.n += len(values)

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None


def _result(rid: str, rdir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    return {"release_id": rid, "out": str(rdir), "report": str(rdir / "report.html"),
            "manifest": manifest}


def _release(kind: str, *, input_path: str, dom: Domain, spec: CurveSpec | StreamSpec,
             parameters: dict[str, Any], release_id: str | None, out_dir: str,
             ledger_path: str, chunk_users: int | None, table: str | None,
             scheduled_date: str | None, in_flight: int = 4,
             population_period: int | None = None,
             dry_run: bool = False) -> dict[str, Any]:
    flow_name = "release_curves" if kind == "curves" else "release_streams"
    if release_id is not None:
        check_name(release_id, "--release-id")  # it names OUT/<release_id>/
    scheduled_date = scheduled_date or _scheduled_date()
    out_root = Path(out_dir)
    # Raw chunks and seeds live here, locked by this run and removed however it ends.
    staging_dir = StagingDir.create(out_root)
    staging = staging_dir.path
    appender: ParquetAppender | None = None
    try:
        plan: StagePlan = stage_input(input_path, dom, str(staging), chunk_users=chunk_users,
                                      table=table)
        fault_point("after_ingest")
        ledger = Ledger(ledger_path)
        # The content hash is a function of the raw data: only its keyed tag is
        # recorded, published and used to derive the release id (`Ledger.input_tag`).
        fingerprint = ledger.input_tag(plan.fingerprint)
        rid = release_id or default_release_id(flow_name, dom.name, fingerprint, parameters,
                                               scheduled_date)
        label_run(rid, release_tags(dom.name, spec.mechanism, parameters["notion"]), dry_run)
        # An early, clear refusal of a release id bound to other data or parameters;
        # the reserve below checks the binding again in its own transaction (races).
        ledger.check_binding(rid, fingerprint, parameters)
        if dry_run:  # the decisions reserve would make (flows/dry_run.py); nothing written
            return dry_run_result(ledger, rid, plan, dom.name, parameters["notion"],
                                  amount=getattr(spec, "amount", None),
                                  mechanism=spec.mechanism, parameters=parameters,
                                  input_fingerprint=fingerprint,
                                  requests=None if isinstance(spec, CurveSpec) else
                                  _continuation(ledger_path, rid, dom.name, plan, spec).requests)
        # A published release is checked against the ledger's manifest, never rewritten.
        published = published_release(out_root, rid, ledger.release(rid))
        if published is not None:
            return _result(rid, out_root / rid, published)
        base_manifest = {"release_id": rid, "flow": flow_name, "domain": dom.name,
                         "units": dom.units_label(), "value_unit": dom.value_unit,
                         "time_unit": dom.time_unit, "parameters": parameters,
                         "input_fingerprint": fingerprint, "input": str(input_path),
                         "policy": domain_record(dom)}
        # Streams continue: only the steps after each stream's watermark are
        # requested; the earlier ones are repeated (tasks/continuation.py).
        unchanged: set[str] = set()
        mechanism = spec.mechanism
        batches = (_curve_batches(plan, dom, spec) if isinstance(spec, CurveSpec) else
                   _stream_batches(ledger_path, rid, plan, dom, spec, staging, unchanged))
        admitted, denied = _reserve(ledger_path, rid, batches, spec, parameters=parameters,
                                    fingerprint=fingerprint)
        # requested and reserved: the per-user plan is not needed again (memory must
        # not grow with users; chunks keep their users and fingerprints)
        plan.steps.clear()
        admitted |= unchanged  # nothing new to charge: repeated only
        record = ledger.release(rid)
        if record is not None and record["state"] == "reserved" and not record["manifest"]:
            # after the reserve: only a run the binding admitted describes the release
            ledger.record_release(rid, base_manifest, "reserved")
        fault_point("after_reserve")
        # Submit chunks through a bounded window and settle them in chunk order:
        # at most `in_flight` chunks are queued or running at once, so memory does
        # not grow with the number of users whatever the task runner. Finished
        # chunks are settled together (and at the end) in batches that grow with
        # what is settled so far: SETTLE_BATCH at first, then as many as are
        # already settled, up to MAX_SETTLE_BATCH. Each transaction has a fixed cost
        # that grows with the ledger (open, read the reservations, commit and
        # checkpoint): 50 batches of 2000 took 20 s for 10^5 users where one took
        # 2.4 s. A settlement only records the actual cost of budget already
        # reserved, so a crash between batches loses nothing.
        pending: deque[Any] = deque()
        results: list[ChunkResult] = []
        unsettled: list[ChunkResult] = []
        bounds, rms = _Spread(), _Spread()
        settles = settled = 0

        def settle_unsettled() -> None:
            nonlocal settles, settled
            if not unsettled:
                return
            if settles == 0:
                fault_point("before_first_settle")
            settle_chunk(ledger_path, rid, dom.name, quote(list(unsettled)),
                         input_fingerprint=fingerprint, parameters=parameters)
            settles += 1
            settled += sum(len(r.costs) for r in unsettled)
            for r in unsettled:
                r.costs = []  # settled: free them (memory must not grow with users)
            unsettled.clear()
            if settles == 1:
                fault_point("after_first_chunk")

        # Chunk outputs come back from the tasks in memory and are appended to the
        # release's Parquet files as chunks finish (in chunk order), overlapping the
        # encoding with the mechanism tasks; stream samples are also kept in this
        # process's private staging dir for the reconstruction.
        appender = ParquetAppender(staging / "outputs")
        streamed = ("values", "segments", "curves") if kind == "curves" else ("samples",)
        keep_samples = isinstance(spec, StreamSpec) and spec.reconstruct == "cpr"

        def settle_oldest() -> None:
            res = pending.popleft().result()
            results.append(res)
            unsettled.append(res)
            for name in streamed:
                appender.add_table(name, res.tables[name])
            if keep_samples:
                write_arrow(res.tables["samples"], staging / f"samples-{res.index:05d}.arrow")
            bounds.add(res.error_bounds)
            rms.add(res.rms_bounds)
            # written and summed: memory must not grow with users
            res.tables, res.diagnostics, res.error_bounds, res.rms_bounds = {}, {}, [], []
            if sum(len(r.costs) for r in unsettled) >= max(SETTLE_BATCH,
                                                           min(settled, MAX_SETTLE_BATCH)):
                settle_unsettled()

        # Each chunk travels to its task as arrays (the admitted users' samples and
        # seeds), never as a path: workers need no access to this machine's files.
        for chunk in plan.chunks:
            users = [(u, fp) for u, fp in zip(chunk.user_ids, chunk.fingerprints, strict=True)
                     if u in admitted]
            if not users:
                continue
            if isinstance(spec, CurveSpec):
                seeds = ledger.noise_seeds(rid, [u for u, _ in users], [fp for _, fp in users],
                                           parameters)
                pending.append(privatize_curves.submit(
                    load_curve_chunk(chunk, dom.value_columns, seeds), dom.value_columns, spec))
            else:
                from tasks.continuation import read_chunk_plans, seeded_segments

                segments = seeded_segments(ledger, rid, parameters,
                                           read_chunk_plans(chunk_plans_path(staging, chunk.index)),
                                           [u for u, _ in users])
                pending.append(privatize_streams.submit(load_stream_chunk(chunk, segments),
                                                        spec))
            if len(pending) >= in_flight:
                settle_oldest()
        try:
            while pending:
                settle_oldest()
        except MechanismRunError as err:
            # Budget is reserved and some noise may have been drawn: the release is
            # recorded as failed (visible to `privpipe audit`, closable with
            # `privpipe ledger close`); what was settled stays settled.
            settle_unsettled()
            ledger.record_release(rid, {**base_manifest, "error": str(err)}, "failed")
            raise
        settle_unsettled()
        fault_point("after_settle")
        periods: list[dict[str, Any]] = []
        history: list[dict[str, Any]] = []
        history_skipped: list[dict[str, Any]] = []
        if keep_samples:
            # Imported here: CPR (scipy.signal) is not needed by curve releases.
            from tasks.reconstruct import reconstruct_streams
            from tasks.stream_history import earlier_releases, history_reports

            # Post-processing of the private samples and of what earlier releases of
            # these streams published, chunk by chunk (bounded window); each task gets
            # its chunk's reports as data, so it can run on any worker.
            history = earlier_releases(ledger_path, dom.name, parameters, str(out_root), rid,
                                       skipped=history_skipped)
            history_paths = [h["samples"] for h in history]

            def collect() -> None:
                found, table = pending.popleft().result()
                periods.extend(found)
                appender.add_table("reconstruction", table)

            for r in results:
                samples = read_arrow(staging / f"samples-{r.index:05d}.arrow")
                users = pc.unique(samples.column("user_id")).to_pylist()
                pending.append(reconstruct_streams.submit(
                    samples, float_at_most(spec.epsilon_per_step),
                    history=history_reports(history_paths, users) if history_paths else None))
                if len(pending) >= in_flight:
                    collect()
            while pending:
                collect()
        build = ReleaseBuild(staging, out_root, rid)  # private until published
        rdir = build.path
        files: dict[str, str] = {}
        counts: dict[str, int] = {}
        names = (("values", "segments", "curves") if kind == "curves" else
                 ("samples", "reconstruction") if periods else ("samples",))
        for name in names:
            if name not in appender:
                continue
            counts[f"{name}_rows"] = appender.finish(name, rdir / f"{name}.parquet")
            files[name] = f"{name}.parquet"
            fault_point("between_merges")

        files.update(write_user_unit_outputs(rdir, dom, files, parameters))
        fault_point("after_outputs")
        first_seq, last_seq = ledger.entry_range(rid) or (None, None)
        manifest = {
            **base_manifest,
            "mechanism": mechanism,
            "counts": {**rejection_counts(dom.rejections_public, plan.users, len(plan.rejected)),
                       "users_released": len(admitted), "users_denied": len(denied),
                       **({"users_unchanged": len(unchanged)} if kind == "streams"
                          else {}),
                       "items": plan.items,
                       # the total point count is an aggregate of private counts unless
                       # the domain declares point counts public
                       **({"points": plan.points} if _points_public(dom) else {}), **counts},
            "files": files,
            "ledger_entries": {"first_seq": first_seq, "last_seq": last_seq},
            "ledger_head": ledger.head().to_dict(),  # kept by auditors: `ledger verify`
            "error_bound": {"beta": getattr(spec, "beta", None),
                            "max": bounds.top, "mean": bounds.mean,
                            "rms_mean": rms.mean, "rms_max": rms.top},
            "periods": periods,
            "public_metadata": {
                "fields": list(dom.public_fields()),
                "note": "released as-is, outside the noise, as the domain's policy declares; "
                        "users rejected by validation or denied by the ledger are absent"},
        }
        if isinstance(spec, StreamSpec) and "samples" in files:
            from tasks.stream_post import stream_post

            manifest.update(stream_post(
                str(rdir), epsilon_per_step=float_at_most(spec.epsilon_per_step),
                history=history, history_skipped=history_skipped,
                value_range=dom.value_range, value_unit=dom.value_unit,
                population_period=population_period, users_released=len(admitted)))
        write_release_report(str(rdir), manifest, denied, plan.rejected, ledger_path,
                             publish_dir=str(build.target))
        fault_point("after_report")
        manifest = build.seal(manifest)  # manifest.json with the SHA-256 of every file
        fault_point("after_manifest")
        ledger.record_release(rid, manifest, "settled")
        fault_point("before_publish")
        return _result(rid, build.publish(manifest), manifest)
    finally:
        if appender is not None:
            appender.close()
        staging_dir.close()


CurveMechanism = Literal[CURVE_MECHANISMS]  # type: ignore[valid-type]
StreamMechanism = Literal[STREAM_MECHANISMS]  # type: ignore[valid-type]
EvaluateOn = Literal[EVALUATE_ON]  # type: ignore[valid-type]
Reconstruct = Literal[RECONSTRUCT]  # type: ignore[valid-type]


@flow(name="release-curves", flow_run_name=run_name, persist_result=False,
      validate_parameters=True)
def release_curves(
    input_path: str,
    domain: str,
    mechanism: CurveMechanism = "privfuncseg",
    epsilon: str | float | None = None,
    rho: str | float | None = None,
    options: dict[str, Any] | None = None,
    release_id: str | None = None,
    out_dir: str = "out",
    ledger_path: str = ".privpipe/ledger.duckdb",
    policy_path: str | None = None,
    chunk_users: int | None = None,
    table: str | None = None,
    scheduled_date: str | None = None,
    evaluate_on: EvaluateOn = "grid",
    dry_run: bool = False,
) -> dict[str, Any]:
    """Release every user's curves of `domain` under ε-GP (or ρ-CGP) w.r.t. L2.

    Each curve costs ε (or ρ) in the domain's units; a user is admitted only
    if all its curves fit under its cap. Parameters are public and validated
    before any data is read. When no user is released, the run ends Failed
    (``Denied`` or ``Rejected``, see `flows.outcome`).

    Args:
        input_path: CSV, Parquet or DuckDB file of curve samples (user_id, curve_id, t,
            value columns).
        domain: the ledger domain charged (kind curves).
        mechanism: privfuncseg, project_and_privatize, privfuncselect or baseline.
        epsilon: ε per curve (GP): a number or a ratio string such as "1/3".
        rho: ρ per curve (CGP domains only), instead of epsilon.
        options: mechanism options, e.g. {"basis": "sinc", "n_terms": 200}.
        release_id: rerun key; default derived from flow, domain, input fingerprint,
            parameters and scheduled date.
        out_dir: each release writes OUT_DIR/<release_id>/.
        ledger_path: the ledger file (its noise key sits beside it).
        policy_path: policy TOML naming the domain (default: the bundled one).
        chunk_users: users per mechanism task (default: 1,000 users,
            `tasks.stage.DEFAULT_CHUNK_USERS`; never sized by samples).
        table: table name of a DuckDB input.
        scheduled_date: the date of a scheduled run (set by deployments).
        evaluate_on: grid (evenly spaced times) or input (the input times, released as-is).
        dry_run: only report who would be admitted or denied and at what cost
            (flows/dry_run.py): nothing charged, no noise drawn, nothing written.
    """
    dom = _domain(ledger_path, policy_path, domain, "curves")
    _check_metric(dom, mechanism)
    spec = CurveSpec(mechanism, None if epsilon is None else str(epsilon),
                     None if rho is None else str(rho), dict(options or {}),
                     evaluate_on=evaluate_on, framing=_framing(dom))
    spec.check_runs(len(dom.value_columns))
    if spec.notion == "cgp" and dom.notion == "gp":
        raise ParameterError(f"domain {domain!r} is a GP (ε) domain: a ρ-CGP mechanism cannot be "
                             "charged to it; pass --epsilon instead")
    if chunk_users is not None and chunk_users < 1:
        raise ParameterError("chunk_users must be >= 1")
    parameters = {"mechanism": mechanism, "notion": spec.notion, "amount": str(spec.amount),
                  "options": dict(sorted((options or {}).items())), "evaluate_on": evaluate_on}
    return release_state(_release(
        "curves", input_path=input_path, dom=dom, spec=spec, parameters=parameters,
        release_id=release_id, out_dir=out_dir, ledger_path=ledger_path,
        chunk_users=chunk_users, table=table, scheduled_date=scheduled_date,
        dry_run=dry_run))


@flow(name="release-streams", flow_run_name=run_name, persist_result=False,
      validate_parameters=True)
def release_streams(
    input_path: str,
    domain: str,
    epsilon: str | float,
    mechanism: StreamMechanism = "square_wave",
    reconstruct: Reconstruct = "cpr",
    release_id: str | None = None,
    out_dir: str = "out",
    ledger_path: str = ".privpipe/ledger.duckdb",
    policy_path: str | None = None,
    chunk_users: int | None = None,
    table: str | None = None,
    scheduled_date: str | None = None,
    population_period: int | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Release every user's streams of `domain` with Square Wave under ε-w-event LDP.

    Each sample costs ε/w (w from the policy), so any w consecutive steps of a
    stream cost at most ε, across releases. CPR reconstruction (of every report
    released so far for each stream) and the population view are post-processing.
    When no user is released, the run ends Failed (``Denied`` or ``Rejected``).

    Args:
        input_path: CSV, Parquet or DuckDB file of stream samples (user_id, stream_id, t,
            value).
        domain: the ledger domain charged (kind streams).
        epsilon: ε per window of w steps: a number or a ratio string such as "1/3".
        mechanism: square_wave.
        reconstruct: cpr (period and phase recovery, post-processing) or none.
        release_id: rerun key; default derived from flow, domain, input fingerprint,
            parameters and scheduled date.
        out_dir: each release writes OUT_DIR/<release_id>/.
        ledger_path: the ledger file (its noise key sits beside it).
        policy_path: policy TOML naming the domain (default: the bundled one).
        chunk_users: users per mechanism task (default: 1,000 users,
            `tasks.stage.DEFAULT_CHUNK_USERS`; never sized by samples).
        table: table name of a DuckDB input.
        scheduled_date: the date of a scheduled run (set by deployments).
        population_period: public period in steps (e.g. 48 half-hours) of the population
            view's per-phase tables (post-processing; none: per-step tables only).
        dry_run: only report who would be admitted or denied and at what cost
            (flows/dry_run.py): nothing charged, no noise drawn, nothing written.
    """
    dom = _domain(ledger_path, policy_path, domain, "streams")
    if dom.w is None:
        raise ParameterError(f"domain {domain!r} has no w")
    _check_metric(dom, mechanism)
    spec = StreamSpec(str(epsilon), dom.w, mechanism, reconstruct)
    if exact(spec.epsilon) > dom.cap:
        raise ParameterError(f"epsilon {spec.epsilon} per window exceeds the domain's cap "
                             f"{dom.cap} ({dom.units_label()})")
    if chunk_users is not None and chunk_users < 1:
        raise ParameterError("chunk_users must be >= 1")
    parameters = {"mechanism": mechanism, "notion": "wevent", "epsilon": str(exact(epsilon)),
                  "w": dom.w, "reconstruct": reconstruct}
    if population_period is not None and population_period < 1:
        raise ParameterError("population_period must be >= 1")
    return release_state(_release(
        "streams", input_path=input_path, dom=dom, spec=spec, parameters=parameters,
        release_id=release_id, out_dir=out_dir, ledger_path=ledger_path,
        chunk_users=chunk_users, table=table, scheduled_date=scheduled_date,
        population_period=population_period, dry_run=dry_run))
