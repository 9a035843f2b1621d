"""What differs between a curve release and a stream release: one object per kind.

`flows.release` chooses the kind once, from the flow (`release_curves` makes a
`CurveRelease`, `release_streams` a `StreamRelease`), and the release stages
(`flows.release_stages`) ask it, never the spec's type, for:

- the reserve batches (curves: every curve's request, RESERVE_BATCH users at a
  time; streams: the continuation plan made group by group, only the steps
  after each stream's watermark requested, `tasks.continuation`);
- how a chunk's task is submitted (curves: the users' ledger noise seeds and
  `privatize_curves`; streams: the seeded continuation segments and
  `privatize_streams`);
- which chunk tables are streamed to the Parquet appender and which output
  files the release has;
- the post-processing (streams: CPR reconstruction of every report released
  so far; curves: none) and the manifest's kind-specific entries
  (`users_unchanged`, the population view and history of `tasks.stream_post`).

Privacy: the kinds only choose which task draws the noise and which requests
are reserved; the guarantee and its cost are those of the mechanism tasks and
of the ledger's reservation (`tasks.privatize`, `ledger`). Post-processing
reads only released outputs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow.compute as pc
from prefect.utilities.annotations import quote

from files.outputs import ParquetAppender
from files.staging import read_arrow, write_arrow
from mechanisms.cost import float_at_most
from schemas.policy import Domain
from tasks.ledger_ops import by_user, plan_requests
from tasks.privatize import (
    ChunkResult,
    CurveSpec,
    StreamSpec,
    privatize_curve_chunk,
    privatize_curves,
    privatize_stream_chunk,
    privatize_streams,
)
from tasks.recheck import CheckedFuture, curve_subchunk, sample_users, stream_subchunk
from tasks.stage import load_curve_chunk, load_stream_chunk

if TYPE_CHECKING:
    from flows.release_stages import ReleaseRun
    from tasks.population_scan import ScanSums

RESERVE_BATCH = 50_000
"""The most users one reserve transaction of a release takes (`flows.release_stages`)."""


@dataclass
class PostProcessed:
    """What a release's post-processing found (streams; empty for curves)."""

    periods: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    history_skipped: list[dict[str, Any]] = field(default_factory=list)


class ReleaseKind(Protocol):
    """The kind-specific steps of a release (see the module docstring)."""

    flow_name: str
    spec: Any
    streamed: tuple[str, ...]
    amount: Fraction | None
    """The amount a dry run reports per item (None: none per item)."""
    beta: float | None
    """The β of the manifest's (1-β) error bounds (None: no such bound)."""

    def dry_run_requests(self, run: ReleaseRun) -> Any:
        """The requests a dry run decides (None: the plan's own)."""

    def reserve_batches(self, run: ReleaseRun, unchanged: set[str]) -> Any:
        """The release's requests in reserve batches; users with nothing new join `unchanged`."""

    def submit(self, run: ReleaseRun, chunk: Any, users: list[tuple[str, str]]) -> Any:
        """Submit the mechanism task of `chunk`'s admitted (user, fingerprint) pairs."""

    def stash(self, res: ChunkResult, run: ReleaseRun) -> None:
        """Check and keep what the post-processing needs of a finished chunk (private staging)."""

    def post_process(self, run: ReleaseRun, results: list[ChunkResult],
                     appender: ParquetAppender) -> PostProcessed:
        """Post-process the settled chunks' outputs."""

    def output_names(self, post: PostProcessed) -> tuple[str, ...]:
        """The appender's tables written as the release's Parquet files, in order."""

    def unchanged_count(self, unchanged: set[str]) -> dict[str, int]:
        """The manifest's count of users repeated only (streams), else nothing."""

    def points_public(self, dom: Domain) -> bool:
        """Whether the total point count may be published."""

    def manifest_extras(self, run: ReleaseRun, rdir: Path, files: dict[str, str],
                        post: PostProcessed, users_released: int) -> dict[str, Any]:
        """Kind-specific manifest entries, added after the common ones."""


class CurveRelease:
    """A curve release (`release_curves`): each user's curves under ε-GP or ρ-CGP."""

    flow_name = "release_curves"
    streamed = ("values", "segments", "curves")

    def __init__(self, spec: CurveSpec) -> None:
        self.spec = spec
        self.amount: Fraction | None = spec.amount  # ε or ρ per curve
        self.beta: float | None = spec.beta

    def dry_run_requests(self, run: ReleaseRun) -> None:
        """None: a curve dry run decides the plan's own requests."""
        return None

    def reserve_batches(self, run: ReleaseRun, unchanged: set[str]) -> Any:
        """The curve requests, RESERVE_BATCH users at a time (built batch by batch)."""
        plan, spec = run.plan, self.spec
        users = sorted(plan.steps)
        return (plan_requests(plan, run.dom.name, spec.notion, amount=spec.amount,
                              users=users[i:i + RESERVE_BATCH])
                for i in range(0, max(len(users), 1), RESERVE_BATCH))

    def submit(self, run: ReleaseRun, chunk: Any, users: list[tuple[str, str]]) -> Any:
        """Submit `privatize_curves` with the users' samples and ledger noise seeds."""
        seeds = run.ledger.noise_seeds(run.rid, [u for u, _ in users], [fp for _, fp in users],
                                       run.parameters)
        cols, spec = run.dom.value_columns, self.spec
        payload = load_curve_chunk(chunk, cols, seeds)
        return _checked(self, run, privatize_curves.submit(payload, cols, spec), payload,
                        curve_subchunk, lambda sub: privatize_curve_chunk(sub, cols, spec),
                        per_item=True)

    def stash(self, res: ChunkResult, run: ReleaseRun) -> None:
        """Nothing: curves repeat nothing and are not post-processed."""

    def post_process(self, run: ReleaseRun, results: list[ChunkResult],
                     appender: ParquetAppender) -> PostProcessed:
        """Nothing to post-process: the curve outputs are final."""
        return PostProcessed()

    def output_names(self, post: PostProcessed) -> tuple[str, ...]:
        """values, segments and curves."""
        return self.streamed

    def unchanged_count(self, unchanged: set[str]) -> dict[str, int]:
        """Nothing: every admitted curve user is charged."""
        return {}

    def points_public(self, dom: Domain) -> bool:
        """Only when the domain declares point counts public."""
        return dom.public is not None and dom.public.points

    def manifest_extras(self, run: ReleaseRun, rdir: Path, files: dict[str, str],
                        post: PostProcessed, users_released: int) -> dict[str, Any]:
        """Nothing beyond the common entries."""
        return {}


class StreamRelease:
    """A stream release (`release_streams`): Square Wave under ε-w-event LDP, continued."""

    flow_name = "release_streams"
    streamed = ("samples",)

    def __init__(self, spec: StreamSpec, population_period: int | None) -> None:
        self.spec, self.population_period = spec, population_period
        self._published_samples: dict[str, str] | None = None
        self._repeats: dict[int, list[tuple[str, str, str, int, int]]] = {}
        self._summed: ScanSums | None = None  # the population view's sums, chunk by chunk
        self.amount: Fraction | None = None  # charged per step, by window (w-event)
        self.beta: float | None = None  # Square Wave outputs carry no (1-β) bound

    @property
    def _keep_samples(self) -> bool:
        return self.spec.reconstruct == "cpr"

    def dry_run_requests(self, run: ReleaseRun) -> Any:
        """The whole continuation plan's requests; users it rejects join the plan's rejected.

        A release plans and reserves group by group instead (`reserve_batches`).
        """
        from tasks.continuation import plan_release

        plan = run.plan
        cont = plan_release(run.ledger_path, run.rid, run.dom.name, quote(plan),
                            self.spec.epsilon_per_step)
        plan.rejected.extend(cont.rejected)
        plan.users -= len(cont.rejected)
        return cont.requests

    def reserve_batches(self, run: ReleaseRun, unchanged: set[str]) -> Any:
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
        would. A group with no request yields nothing. Through a ledger service, a
        group repeating ranges of another client's release stops the release before
        its reserve (`tasks.redraw_owners`: the service would refuse their seeds).
        """
        from tasks.continuation import plan_release, write_chunk_plans
        from tasks.redraw_owners import check_redraw_owners

        plan = run.plan
        for group in _chunk_groups(plan.chunks, RESERVE_BATCH):
            cont = plan_release(run.ledger_path, run.rid, run.dom.name, quote(plan),
                                self.spec.epsilon_per_step, chunks=quote(group))
            check_redraw_owners(run.ledger, run.rid, cont.plans)
            plan.rejected.extend(cont.rejected)
            plan.users -= len(cont.rejected)
            unchanged |= cont.unchanged
            for index, plans in cont.plans.items():
                write_chunk_plans(chunk_plans_path(run.staging, index), plans)
            if cont.requests:
                yield from by_user(cont.requests, RESERVE_BATCH)

    def submit(self, run: ReleaseRun, chunk: Any, users: list[tuple[str, str]]) -> Any:
        """Submit `privatize_streams` with the chunk's seeded continuation segments."""
        from tasks.continuation import read_chunk_plans, seeded_segments
        from tasks.stream_redraw import earlier_ranges

        plans = read_chunk_plans(chunk_plans_path(run.staging, chunk.index))
        self._repeats[chunk.index] = earlier_ranges(plans)
        segments = seeded_segments(run.ledger, run.rid, run.parameters, plans,
                                   [u for u, _ in users])
        payload, spec = load_stream_chunk(chunk, segments), self.spec
        return _checked(self, run, privatize_streams.submit(payload, spec), payload,
                        stream_subchunk, lambda sub: privatize_stream_chunk(sub, spec),
                        per_item=False)

    def stash(self, res: ChunkResult, run: ReleaseRun) -> None:
        """Check the chunk's repeated ranges against what was published; keep its samples.

        Every range the chunk repeats must equal the samples its release
        published (`tasks.stream_redraw`: otherwise the release stops before
        publishing anything); the samples are kept in private staging for the
        reconstruction (CPR only), and summed for the population view
        (`tasks.population_scan.ScanSums`, reports of the Square Wave law only).
        """
        # stream modules (scipy.signal and .stats through mechanisms.reconstruct, 0.5 s of
        # import): loaded by stream releases only, never by a curve release's process
        from tasks.population_scan import ScanSums
        from tasks.stream_redraw import check_redraws

        ranges = self.repeated(run, res.index)
        self._repeats.pop(res.index, None)  # stashed: the chunk's ranges are not needed again
        if ranges:
            check_redraws(res.tables["samples"], ranges, self._published(run))
        if self._keep_samples:
            write_arrow(res.tables["samples"], _samples_path(run.staging, res.index))
        if self._summed is None and "cpr" in self.spec.entry.reconstructions:
            self._summed = ScanSums(float_at_most(self.spec.epsilon_per_step))
        if self._summed is not None:
            self._summed.add(res.tables["samples"])

    def repeated(self, run: ReleaseRun, index: int) -> list[tuple[str, str, str, int, int]]:
        """(user, stream, release, first, last) of each range chunk `index` repeats.

        Read from the chunk's plans when it was submitted (kept until it is
        stashed, so at most the window's chunks are held), else from its plans file.
        """
        if index not in self._repeats:
            from tasks.continuation import read_chunk_plans
            from tasks.stream_redraw import earlier_ranges

            path = chunk_plans_path(run.staging, index)
            self._repeats[index] = earlier_ranges(read_chunk_plans(path)) if path.exists() else []
        return self._repeats[index]

    def _published(self, run: ReleaseRun) -> dict[str, str]:
        """Release id -> verified samples file of the earlier releases (read once per run)."""
        if self._published_samples is None:
            from tasks.stream_history import earlier_releases

            self._published_samples = {
                r["release_id"]: r["samples"] for r in earlier_releases(
                    run.ledger_path, run.dom.name, run.parameters, str(run.out_root), run.rid,
                    staging=str(run.staging))}
        return self._published_samples

    def post_process(self, run: ReleaseRun, results: list[ChunkResult],
                     appender: ParquetAppender) -> PostProcessed:
        """CPR reconstruction of the private samples and of earlier releases' reports.

        Chunk by chunk through a bounded window of `run.in_flight` tasks; each task
        gets its chunk's reports as data, so it can run on any worker.
        """
        post = PostProcessed()
        if not self._keep_samples:
            return post
        # Imported here: CPR (scipy.signal) is not needed by curve releases.
        from tasks.reconstruct import reconstruct_streams
        from tasks.stream_history import earlier_releases, history_reports

        post.history = earlier_releases(run.ledger_path, run.dom.name, run.parameters,
                                        str(run.out_root), run.rid, skipped=post.history_skipped,
                                        staging=str(run.staging))
        history_paths = [h["samples"] for h in post.history]
        pending: deque[Any] = deque()

        def collect() -> None:
            found, table = pending.popleft().result()
            post.periods.extend(found)
            appender.add_table("reconstruction", table)

        for r in results:
            samples = read_arrow(_samples_path(run.staging, r.index))
            users = pc.unique(samples.column("user_id")).to_pylist()
            pending.append(reconstruct_streams.submit(
                samples, float_at_most(self.spec.epsilon_per_step),
                history=history_reports(history_paths, users) if history_paths else None,
                mechanism=self.spec.mechanism))
            if len(pending) >= run.in_flight:
                collect()
        while pending:
            collect()
        return post

    def output_names(self, post: PostProcessed) -> tuple[str, ...]:
        """samples, and reconstruction when it found periods."""
        return ("samples", "reconstruction") if post.periods else ("samples",)

    def unchanged_count(self, unchanged: set[str]) -> dict[str, int]:
        """The users whose streams had nothing new (repeated only, charged nothing)."""
        return {"users_unchanged": len(unchanged)}

    def points_public(self, dom: Domain) -> bool:
        """Always: a stream's steps are public."""
        return True

    def manifest_extras(self, run: ReleaseRun, rdir: Path, files: dict[str, str],
                        post: PostProcessed, users_released: int) -> dict[str, Any]:
        """The population view and stream history (`tasks.stream_post`), when samples exist."""
        if "samples" not in files:
            return {}
        from tasks.stream_post import stream_post

        return stream_post(
            str(rdir), epsilon_per_step=float_at_most(self.spec.epsilon_per_step),
            history=post.history, history_skipped=post.history_skipped,
            value_range=run.dom.value_range, value_unit=run.dom.value_unit,
            population_period=self.population_period, users_released=users_released,
            mechanism=self.spec.mechanism, summed=self._summed)


def _recheck_keys(run: ReleaseRun, indices: list[int]) -> dict[int, bytes]:
    """Chunk index -> the key of its recheck sample (from the ledger: no key file needed)."""
    got = run.ledger.recheck_keys(run.rid, indices)
    return {i: bytes.fromhex(k) for i, k in zip(indices, got, strict=True)}


def _checked(kind: Any, run: ReleaseRun, future: Any, payload: Any, subchunk: Any, local: Any,
             *, per_item: bool) -> Any:
    """`future`, or on a remote runner a `CheckedFuture` re-executing a secret sample locally.

    The sample (`tasks.recheck.sample_users`, at the rate of `flows.runners.recheck_rate`)
    is keyed by the ledger's noise key, release id and chunk index, so a worker
    cannot predict it and a rerun checks the same users.
    """
    from flows.runners import is_remote, recheck_rate, worker_of

    if "_recheck" not in vars(kind):
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        remote = ctx is not None and is_remote(ctx.task_runner)
        kind._recheck = (recheck_rate(), _recheck_keys(run, [c.index for c in run.plan.chunks])
                         ) if remote else None
    if kind._recheck is None:
        return future
    rate, keys = kind._recheck
    if payload.index not in keys:
        keys.update(_recheck_keys(run, [payload.index]))
    sample = sample_users(keys[payload.index], payload.user_ids, rate)
    return CheckedFuture(future, index=payload.index, chunk_users=payload.user_ids,
                         sample=sample, subchunk=subchunk(payload, sample), local=local,
                         per_item=per_item, worker_of=worker_of)


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


def chunk_plans_path(staging: Path, index: int) -> Path:
    """Where a stream chunk's continuation plans wait for its task (private staging)."""
    return staging / f"plans-{index:05d}.json"


def _samples_path(staging: Path, index: int) -> Path:
    return staging / f"samples-{index:05d}.arrow"

