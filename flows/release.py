"""Release flows: `release_curves` and `release_streams`.

The chain (docs/design.md): ingest -> plan -> ledger reserve -> mechanism tasks
over chunks of users -> ledger settle -> outputs -> reconstruction -> report.
The flows only wire: each flow checks its public parameters, chooses its kind
once (`flows.release_kinds`: `CurveRelease` or `StreamRelease`), and `_release`
runs the stages of `flows.release_stages` and `flows.release_publish` in order.
Budget is reserved (durably, in the ledger) before any noise is drawn; every
user's noise comes from the ledger's HMAC seed of (release_id, user_id), so a
rerun with the same release_id reproduces the same bytes and charges nothing
more.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Literal

from prefect import flow

from files.outputs import ParquetAppender
from files.release_lock import release_lock
from files.staging_dir import StagingDir
from flows import preflight, signals
from flows.collector import fewer_collections
from flows.outcome import release_state
from flows.preflight import (
    CURVE_MECHANISMS,
    EVALUATE_ON,
    RECONSTRUCT,
    STREAM_MECHANISMS,
    release_domain,
)
from flows.release_kinds import CurveRelease, ReleaseKind, StreamRelease
from flows.release_publish import keep_published, publish
from flows.release_stages import (
    ChunkOutputs,
    ReleaseRun,
    answer_early,
    bind,
    default_release_id,
    reserve,
    run_chunks,
    settle,
    stage,
)
from flows.run_labels import run_name
from ledger.remote import open_ledger
from schemas.errors import ParameterError
from schemas.names import check_name
from schemas.policy import Domain
from tasks.privatize import CurveFraming, CurveSpec, StreamSpec

_log = logging.getLogger(__name__)

__all__ = ["default_release_id", "release_curves", "release_streams"]


def _domain(ledger_path: str, policy_path: str | None, name: str, kind: str) -> Domain:
    """The ledger's definition of the domain (`flows.preflight.release_domain`)."""
    return release_domain(open_ledger(ledger_path), policy_path, name, kind)


def _framing(dom: Domain) -> CurveFraming:
    pub = dom.public
    if pub is None:
        raise ParameterError(
            f"domain {dom.name!r} declares no public metadata; apply a policy whose "
            f"[domains.{dom.name}.public] table says what is released outside the noise")
    return CurveFraming(window=dom.window, points_public=pub.points,
                        grid_points=dom.grid_points, sample_times_public=pub.sample_times)


def _scheduled_date() -> str | None:
    """The scheduled date of a deployment run (None for ad-hoc runs)."""
    try:
        from prefect.runtime import deployment, flow_run

        if deployment.id is None:
            return None
        return flow_run.scheduled_start_time.date().isoformat()
    except Exception:  # noqa: BLE001 - outside a deployment run
        return None


@fewer_collections()  # the collector's settings for the whole run (flows/collector.py)
def _release(kind: ReleaseKind, *, input_path: str, dom: Domain, parameters: dict[str, Any],
             release_id: str | None, out_dir: str, ledger_path: str, chunk_users: int | None,
             table: str | None, scheduled_date: str | None, in_flight: int = 4,
             dry_run: bool = False) -> dict[str, Any]:
    """Run a release's stages in order (`flows.release_stages`); `kind` does what differs.

    At most `in_flight` mechanism (and reconstruction) tasks are pending at once.
    """
    if release_id is not None:
        check_name(release_id, "--release-id")  # it names OUT/<release_id>/
    scheduled_date = scheduled_date or _scheduled_date()
    out_root = Path(out_dir)
    # Raw chunks and seeds live here, locked by this run and removed however it ends.
    staging_dir = StagingDir.create(out_root)
    staging = staging_dir.path
    appender: ParquetAppender | None = None
    try:
        plan = stage(input_path, dom, staging, chunk_users=chunk_users, table=table)
        signals.log_staged(dom, plan)
        run = bind(kind, plan, dom=dom, parameters=parameters, release_id=release_id,
                   scheduled_date=scheduled_date, input_path=input_path,
                   ledger_path=ledger_path, out_root=out_root, staging=staging,
                   in_flight=in_flight, dry_run=dry_run)
        with _one_run_at_a_time(run):
            early = answer_early(run)  # a dry run, or a release already published
            if early is not None:
                if not dry_run:
                    signals.say(f"release {run.rid}: already published; replayed")
                    keep_published(run, run.out_root / run.rid, early["manifest"])
                    signals.published(early)
                return early
            admission = reserve(run)
            signals.log_admission(run.rid, len(admission.admitted), len(admission.denied))
            appender = ParquetAppender(staging / "outputs")
            outputs = ChunkOutputs(run, appender)
            window = run_chunks(run, admission.admitted, outputs)
            settle(run, window)
            post = kind.post_process(run, window.results, appender)
            res = publish(run, appender, admission, post, outputs)
            signals.published(res, lambda: run.ledger.near_cap_users(run.rid, dom.name))
            return res
    finally:
        if appender is not None:
            appender.close()
        staging_dir.close()


def _one_run_at_a_time(run: ReleaseRun) -> AbstractContextManager[None]:
    """The release id's lock (`files.release_lock`); a dry run writes nothing and takes none.

    A second run of the same release waits here, then replays what the first published.
    """
    if run.dry_run:
        return nullcontext()
    return release_lock(run.out_root, run.rid, on_wait=lambda: _log.warning(
        "release %s: another run of it is in progress; waiting for it to end, then this "
        "run replays what it published", run.rid))


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
    with signals.reported_release(domain, release_id):
        dom = _domain(ledger_path, policy_path, domain, "curves")
        preflight.check_mechanism(dom, mechanism)
        spec = CurveSpec(mechanism, None if epsilon is None else str(epsilon),
                         None if rho is None else str(rho), dict(options or {}),
                         evaluate_on=evaluate_on, framing=_framing(dom))
        spec.check_runs(len(dom.value_columns))
        preflight.check_notion(dom, spec.notion, "--epsilon")
        if chunk_users is not None and chunk_users < 1:
            raise ParameterError("chunk_users must be >= 1")
        parameters = {"mechanism": mechanism, "notion": spec.notion, "amount": str(spec.amount),
                      "options": dict(sorted((options or {}).items())),
                      "evaluate_on": evaluate_on}
        return release_state(_release(
            CurveRelease(spec), input_path=input_path, dom=dom, parameters=parameters,
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
        mechanism: a registered stream mechanism (`square_wave`, `piecewise`;
            mechanisms/registry.py).
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
    with signals.reported_release(domain, release_id):
        dom = _domain(ledger_path, policy_path, domain, "streams")
        if dom.w is None:
            raise ParameterError(f"domain {domain!r} has no w")
        preflight.check_mechanism(dom, mechanism)
        spec = StreamSpec(str(epsilon), dom.w, mechanism, reconstruct)
        preflight.check_cap(dom, spec.epsilon, spec.amount)
        if chunk_users is not None and chunk_users < 1:
            raise ParameterError("chunk_users must be >= 1")
        parameters = {"mechanism": mechanism, "notion": "wevent", "epsilon": str(spec.amount),
                      "w": dom.w, "reconstruct": reconstruct}
        if population_period is not None and population_period < 1:
            raise ParameterError("population_period must be >= 1")
        return release_state(_release(
            StreamRelease(spec, population_period), input_path=input_path, dom=dom,
            parameters=parameters, release_id=release_id, out_dir=out_dir,
            ledger_path=ledger_path, chunk_users=chunk_users, table=table,
            scheduled_date=scheduled_date, dry_run=dry_run))
