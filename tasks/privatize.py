"""Mechanism tasks: privatize one chunk of admitted users.

Each task receives its chunk (`CurveChunk` / `StreamChunk`: the admitted
users' samples and their noise seeds, as arrays) through the task engine, runs
the pure core (`mechanisms`) on the whole chunk at once with one generator per
user seeded by the ledger's HMAC seed for (release_id, user_id), and returns
its private output tables and the costs (a stream draws each output segment
from that segment's seed, `tasks.continuation`). Because a seed is a function
of (release, user, data fingerprint, parameters) only, a retried or rerun
task draws exactly the same noise: no uncharged second draw can leave. The
task touches no file, no ledger and no key, so it runs the same in a thread,
a process or on a remote Dask/Ray worker.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
from prefect import task
from prefect.cache_policies import NO_CACHE

from files.staging import repeat_ids_encoded
from mechanisms import registry
from mechanisms.cost import Cost, WEventCost, exact, float_at_most
from mechanisms.curves import CurveBatch, PrivateFunction, PrivateFunctionBatch, noise_scale
from mechanisms.curves.release import (
    PublicFrame,
    PublicFrames,
    dry_run,
    frame_for,
    frames_for,
    on_frame,
)
from mechanisms.errors import MechanismParameterError
from mechanisms.safe_sampling import power_of_two_at_least, snap_to_grid
from schemas.errors import PrivpipeError
from tasks.keyed_rng import lent_generators, release_generator
from tasks.stage import CurveChunk, StreamChunk, TaskPayload
from tasks.stream_draw import StreamDrawError, draw_stream_chunk

CURVE_MECHANISMS = registry.names("curves")
STREAM_MECHANISMS = registry.names("streams")
# ε or ρ outside this range gives noise scales near the ends of the float range
# (a curve's noisy coefficients could overflow or vanish): refused up front.
AMOUNT_RANGE = (Fraction(1, 10**9), Fraction(10**9))


@dataclass(frozen=True)
class CurveFraming:
    """What the domain declares public about each curve (from its policy row).

    ``window``: the fixed time window (None: each curve's duration is public);
    ``points_public``: whether each curve's number of points is public;
    ``grid_points``: the output grid size when it is not; ``sample_times_public``:
    whether the input sample times may be released (``evaluate_on="input"``).
    """

    window: float | None = None
    points_public: bool = True
    grid_points: int | None = None
    sample_times_public: bool = False

    def frame(self, t: np.ndarray) -> PublicFrame:
        """The public frame of one curve (see `mechanisms.curves.release`)."""
        return frame_for(t, window=self.window, points_public=self.points_public,
                         grid_points=self.grid_points)

    def frames(self, batch: CurveBatch) -> PublicFrames:
        """The public frames of every curve of a batch."""
        return frames_for(batch, window=self.window, points_public=self.points_public,
                          grid_points=self.grid_points)

    def typical_frame(self) -> PublicFrame:
        """A public frame for option checks before any data is read."""
        return PublicFrame(end=self.window or 1.0, n_points=None,
                           grid_points=self.grid_points or 64)


@dataclass(frozen=True)
class CurveSpec:
    """What to run on every curve of a release (all public parameters)."""

    mechanism: str
    epsilon: str | None
    rho: str | None
    options: dict[str, Any] = field(default_factory=dict)
    beta: float = 0.05
    evaluate_on: str = "grid"  # "grid": evenly spaced times on [0, T]; "input": input times
    framing: CurveFraming = field(default_factory=CurveFraming)
    #: the exact ε or ρ charged per curve (`mechanisms.cost.exact` of the text, parsed once)
    amount: Fraction = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        entry = registry.get(self.mechanism, "curves")
        if (self.epsilon is None) == (self.rho is None):
            raise MechanismParameterError("give exactly one of epsilon (GP) or rho (CGP)")
        entry.check_notion(self.notion)
        entry.check_options(self.options)
        amount = exact(self.epsilon if self.epsilon is not None else self.rho)  # type: ignore[arg-type]
        object.__setattr__(self, "amount", amount)  # parsed once, read per curve
        if not AMOUNT_RANGE[0] <= amount <= AMOUNT_RANGE[1]:
            raise MechanismParameterError(
                f"epsilon / rho must be in [1e-9, 1e9] (got {self.epsilon or self.rho})")
        if self.evaluate_on not in ("grid", "input"):
            raise MechanismParameterError("evaluate_on must be 'grid' or 'input'")
        if "breakpoints" in self.options and self.framing.window is None:
            raise MechanismParameterError(
                "the breakpoints option places segment edges at fixed times: it needs a "
                "domain with a fixed window (public.duration = false, window = T); with "
                "public durations every curve has its own interval")
        if self.evaluate_on == "input" and not self.framing.sample_times_public:
            raise MechanismParameterError(
                "evaluate_on='input' releases the input sample times as-is; the domain does "
                "not declare them public (policy key public.sample_times)")

    @property
    def entry(self) -> registry.CurveMechanism:
        """The registry entry of this spec's mechanism."""
        entry = registry.get(self.mechanism, "curves")
        assert isinstance(entry, registry.CurveMechanism), "a curves entry is a CurveMechanism"
        return entry

    def check_runs(self, n_outputs: int) -> None:
        """Validate the options by a dry run on a public synthetic curve (costs nothing)."""
        dry_run(self.entry.run, notion=self.notion, amount=self.amount,
                frame=self.framing.typical_frame(), options=self.options,
                n_outputs=n_outputs)

    @property
    def notion(self) -> str:
        """``gp`` or ``cgp``."""
        return "gp" if self.epsilon is not None else "cgp"


@dataclass(frozen=True)
class StreamSpec:
    """What to run on every stream of a release (all public parameters)."""

    epsilon: str
    w: int
    mechanism: str = "square_wave"
    reconstruct: str = "cpr"
    #: the exact ε per window (`mechanisms.cost.exact` of `epsilon`, parsed once)
    amount: Fraction = field(init=False, repr=False, compare=False)
    #: the exact per-step ε/w (the registry's reservation per step, computed once)
    epsilon_per_step: Fraction = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        amount = exact(self.epsilon)
        if not AMOUNT_RANGE[0] <= amount <= AMOUNT_RANGE[1]:
            raise MechanismParameterError(f"epsilon must be in [1e-9, 1e9] (got {self.epsilon})")
        if self.w < 1:
            raise MechanismParameterError("w must be >= 1")
        entry = registry.stream(self.mechanism)
        if self.reconstruct not in ("cpr", "none"):
            raise MechanismParameterError("reconstruct must be 'cpr' or 'none'")
        entry.check_reconstruct(self.reconstruct)
        object.__setattr__(self, "amount", amount)
        object.__setattr__(self, "epsilon_per_step", entry.reservation(amount, w=self.w))

    @property
    def entry(self) -> registry.StreamMechanism:
        """The registry entry of this spec's mechanism."""
        return registry.stream(self.mechanism)


class MechanismRunError(PrivpipeError):
    """A mechanism failed on one user's curve after the budget was reserved.

    The message names neither the user nor the item: that a mechanism failed on
    one user's data is data-dependent, and the message reaches Prefect's logs and
    the run's state. The user and item are on the error (`user_id`, `item_id`,
    `operator_detail`), which the CLI prints on the operator's terminal only.
    The release stops; the user's reservation stays charged and visible to
    `privpipe audit` until an operator closes the release (`privpipe ledger
    close`), as for any interrupted release.
    """

    def __init__(self, user_id: str, item_id: str, cause: BaseException):
        super().__init__(f"the mechanism failed on one user's curve or stream after its "
                         f"budget was reserved ({type(cause).__name__}); the reservation "
                         "stays charged: fix the cause and rerun with the same release id, "
                         "or close the release with `privpipe ledger close`")
        self.user_id = user_id
        self.item_id = item_id
        self.operator_detail = f"user {user_id!r}, item {item_id!r}"


class ChunkResult(TaskPayload):
    """What a mechanism task hands back to the flow: private outputs and costs, no raw data.

    `tables` holds the chunk's output tables (curves: ``values``, ``segments``,
    ``curves``; streams: ``samples``), which the flow appends to the release's
    files; `costs` one (user_id, step, cost, stream_id) per charged item;
    `diagnostics` per-output public diagnostics (lists by name); `rms_bounds`
    each error bound / sqrt(duration). A plain object (`tasks.stage.TaskPayload`).
    """

    __slots__ = ("index", "tables", "costs", "error_bounds", "diagnostics", "rms_bounds")
    index: int
    tables: dict[str, pa.Table]
    costs: list[tuple[str, str, Cost | WEventCost, str]]
    error_bounds: list[float]
    diagnostics: dict[str, list[Any]]
    rms_bounds: list[float]


def _run_curves(batch: CurveBatch, rngs: list[np.random.Generator], spec: CurveSpec,
                frames: PublicFrames, chunk: CurveChunk) -> PrivateFunctionBatch:
    """The registered mechanism on every curve of the chunk, each on its public frame.

    The exact Fraction goes in, so each curve's cost equals its reservation. A
    mechanism with a batched core runs the chunk in one call; others curve by
    curve, in curve order, with the user's generator.
    """
    entry = spec.entry
    if entry.run_batch is not None:
        try:
            return entry.run_batch(batch, notion=spec.notion, amount=spec.amount, rngs=rngs,
                                   frames=frames, options=spec.options)
        except Exception as err:
            _name_the_curve(batch, spec, frames, chunk)
            raise MechanismRunError(*_culprit(chunk, err), err) from err
    fns = []
    for c in range(len(batch)):
        frame = frames.frame(c)
        ft, fv = on_frame(*batch.curve(c), frame)
        try:
            fns.append(entry.run(ft, fv, notion=spec.notion, amount=spec.amount, rng=rngs[c],
                                 frame=frame, options=spec.options))
        except Exception as err:
            raise MechanismRunError(chunk.user_ids[c], chunk.curve_ids[c], err) from err
    return PrivateFunctionBatch.from_functions(fns)


def run_one_curve(t: np.ndarray, values: np.ndarray, spec: CurveSpec,
                  rng: np.random.Generator) -> PrivateFunction:
    """The spec's mechanism on one curve, on its public frame (evaluation; no ledger).

    The same entry, frame and options a release uses for the curve; the cost is
    `spec.amount`. Used by `privpipe evaluate` on public or synthetic data.
    """
    frame = spec.framing.frame(t)
    ft, fv = on_frame(t, values, frame)
    return spec.entry.run(ft, fv, notion=spec.notion, amount=spec.amount, rng=rng, frame=frame,
                          options=spec.options)


def _name_the_curve(batch: CurveBatch, spec: CurveSpec, frames: PublicFrames,
                    chunk: CurveChunk) -> None:
    """After a batch failed, find the failing curve: the batch again, curve by curve.

    Fresh generators from the same seeds, so each curve's draws are the ones the
    batch made; nothing of these runs leaves this function.
    """
    rngs = _user_generators(chunk.user_ids, chunk.seeds)
    for c in range(len(batch)):
        one = batch.take(np.array([c]))
        frame = PublicFrames(frames.ends[c:c + 1],
                             None if frames.n_points is None else frames.n_points[c:c + 1],
                             frames.grid_points[c:c + 1])
        try:
            spec.entry.run_batch(one, notion=spec.notion, amount=spec.amount, rngs=[rngs[c]],
                                 frames=frame, options=spec.options)
        except Exception as err:
            raise MechanismRunError(chunk.user_ids[c], chunk.curve_ids[c], err) from err


def _culprit(chunk: CurveChunk, err: BaseException) -> tuple[str, str]:
    """(user, curve) a batched mechanism's error names (``curve i: ...``), else the chunk."""
    found = re.match(r"curve (\d+):", str(err))
    if found and int(found.group(1)) < len(chunk.curve_ids):
        i = int(found.group(1))
        return chunk.user_ids[i], chunk.curve_ids[i]
    return f"chunk {chunk.index} ({len(set(chunk.user_ids))} users)", f"chunk {chunk.index}"


# Released floats are rounded to a power-of-two grid far below the noise scale
# (post-processing, free): the low-order bits of a floating-point sampler's
# output, which precision attacks read (Mironov 2012), are not released.
# See SECURITY.md, "Sampling safety".
_GRID_BELOW_NOISE = 2.0**-20
_HUGE_BOUND = 2.0**900


def _coefficient_grid(spec: CurveSpec) -> float:
    """The release grid of the noisy coefficients (public: a function of ε or ρ only)."""
    scale = noise_scale(spec.notion, float_at_most(spec.amount))
    return power_of_two_at_least(scale) * _GRID_BELOW_NOISE


def _snapped(res: PrivateFunctionBatch, grid: float) -> PrivateFunctionBatch:
    """The private functions with their noisy coefficients snapped to the release grid."""
    return replace(res, coefficients=snap_to_grid(res.coefficients, grid=grid,
                                                  bound=_HUGE_BOUND))


def _costs_equal_request(costs: tuple[Cost | None, ...], spec: CurveSpec) -> None:
    for cost in {id(c): c for c in costs}.values():  # curves with equal spends share one
        if cost is None or cost.requested != spec.amount or cost.total > spec.amount:
            raise AssertionError(
                f"this is a bug: mechanism cost {cost and cost.total} (requested "
                f"{cost and cost.requested}) does not match the reserved {spec.amount}")


def _user_generators(user_ids: tuple[str, ...], seeds: dict[str, int]
                     ) -> list[np.random.Generator]:
    """One generator per user, keyed by the user's ledger seed; listed once per item."""
    made = {u: release_generator(seeds[u]) for u in dict.fromkeys(user_ids)}
    return [made[u] for u in user_ids]


def _json_once(items: tuple[Any, ...], encode: Any) -> list[str]:
    """JSON text of each item, encoded once per distinct object (costs are shared)."""
    done: dict[int, str] = {}
    out = []
    for x in items:
        text = done.get(id(x))
        if text is None:
            text = done[id(x)] = encode(x)
        out.append(text)
    return out


def privatize_curve_chunk(chunk: CurveChunk, value_columns: tuple[str, ...],
                          spec: CurveSpec) -> ChunkResult:
    """Privatize every curve of the admitted users of one chunk.

    Privacy: each curve costs `spec.amount` (ε-GP or ρ-CGP w.r.t. L2 in the
    domain's units) as reserved; the mechanism's own sub-step breakdown is
    returned for settlement. Noise comes only from the per-user seeds (one
    generator per user, its curves drawn in curve-id order). Cost: one batched
    mechanism call for the chunk (`mechanisms.curves.privfuncseg_batch`).
    """
    if not chunk.curve_ids:
        raise MechanismParameterError(f"chunk {chunk.index} has no admitted curve")
    try:
        batch = CurveBatch.from_arrays(chunk.t, chunk.values, chunk.offsets)
    except MechanismParameterError as err:
        raise MechanismRunError(*_culprit(chunk, err), err) from err
    frames = spec.framing.frames(batch)
    users = list(dict.fromkeys(chunk.user_ids))
    with lent_generators([chunk.seeds[u] for u in users]) as made:
        by_user = dict(zip(users, made, strict=True))
        res = _run_curves(batch, [by_user[u] for u in chunk.user_ids], spec, frames, chunk)
    _costs_equal_request(res.costs, spec)
    bounds = res.error_bounds(spec.beta)
    fn = _snapped(res, _coefficient_grid(spec))
    grid, grid_offsets = ((batch.t, batch.offsets) if spec.evaluate_on == "input"
                          else frames.grid())
    out = fn.evaluate(grid, grid_offsets)
    costs: list[tuple[str, str, Cost | WEventCost, str]] = [
        (u, f"curve:{c}", cost, "") for u, c, cost in
        zip(chunk.user_ids, chunk.curve_ids, res.costs, strict=True)]
    tables = _curve_tables(list(chunk.user_ids), list(chunk.curve_ids), fn, bounds, grid, out,
                           value_columns, frames.ends.tolist(), np.diff(grid_offsets).tolist())
    return ChunkResult(chunk.index, tables, costs, bounds.tolist(), dict(res.diagnostics),
                       (bounds / np.sqrt(frames.ends)).tolist())


def _curve_tables(users: list[str], curves: list[str], fn: PrivateFunctionBatch,
                  bounds: np.ndarray, grid: np.ndarray, out: np.ndarray,
                  value_columns: tuple[str, ...], durations: list[float],
                  points: list[int]) -> dict[str, pa.Table]:
    """The chunk's ``values``, ``segments`` and ``curves`` tables."""
    values = pa.table({
        "user_id": repeat_ids_encoded(users, points),
        "curve_id": repeat_ids_encoded(curves, points),
        "t": pa.array(grid),
        **{c: pa.array(out[:, j]) for j, c in enumerate(value_columns)},
    })
    segs = fn.segments
    total = int(segs.sum())
    left = np.arange(total) + np.repeat(np.arange(segs.size), segs)  # edge index of each start
    coefs = fn.coefficients.reshape(total, -1)
    width = coefs.shape[1]
    segments = pa.table({
        "user_id": repeat_ids_encoded(users, segs),
        "curve_id": repeat_ids_encoded(curves, segs),
        "segment": pa.array((np.arange(total) - np.repeat(fn.seg_offsets[:-1], segs)
                             ).astype(np.int32), pa.int32()),
        "t_start": pa.array(fn.breakpoints[left], pa.float64()),
        "t_end": pa.array(fn.breakpoints[left + 1], pa.float64()),
        "basis": pa.array([fn.basis_name] * total, pa.string()),
        "coefficients": pa.ListArray.from_arrays(
            pa.array(np.arange(total + 1, dtype=np.int32) * width),
            pa.array(coefs.ravel(), pa.float64())),
    })
    table = pa.table({
        "user_id": pa.array(users, pa.string()),
        "curve_id": pa.array(curves, pa.string()),
        "basis": pa.array([fn.basis_name] * len(users), pa.string()),
        "basis_params": pa.array(_json_once(fn.basis_params,
                                            lambda p: json.dumps(p, sort_keys=True)),
                                 pa.string()),
        "outside": pa.array([fn.outside] * len(users), pa.string()),
        "dim": pa.array(fn.dims, pa.int64()),
        "duration": pa.array(durations, pa.float64()),
        "error_bound": pa.array(bounds, pa.float64()),
        "cost": pa.array(_json_once(fn.costs, lambda c: json.dumps(c.breakdown(),
                                                                    sort_keys=True)),
                         pa.string()),
    })
    return {"values": values, "segments": segments, "curves": table}


def privatize_stream_chunk(chunk: StreamChunk, spec: StreamSpec) -> ChunkResult:
    """Randomize the admitted users' new stream steps with the spec's randomizer; repeat the rest.

    Privacy: each new sample costs ε/w, so every window of w consecutive steps
    of a (user, stream) costs at most ε (w-event LDP, across releases: earlier
    steps were charged by the releases that drew them, and the ledger checks
    the windows across all of them); the new segments' runs are returned for
    settlement. Earlier segments are redrawn with their own release's seed
    (`tasks.continuation.seeded_segments`), so they are the bytes already
    released, not a second draw. Noise comes only from the segments' seeds.
    Cost: one pass over the chunk (`tasks.stream_draw.draw_stream_chunk`:
    each segment's keystream filled in bulk, one randomizer call).
    """
    entry = spec.entry
    try:
        y, new = draw_stream_chunk(chunk, entry, epsilon_per_step=spec.epsilon_per_step,
                                   amount=spec.amount, w=spec.w)
    except StreamDrawError as err:
        s = err.stream
        raise MechanismRunError(chunk.user_ids[s], chunk.stream_ids[s], err.cause) from err.cause
    costs: list[tuple[str, str, Cost | WEventCost, str]] = [
        (chunk.user_ids[s], f"stream:{chunk.stream_ids[s]}", cost, chunk.stream_ids[s])
        for s, cost in new]
    n_streams = len(chunk.user_ids)
    bounds = ([float(np.sqrt(entry.variance(float(spec.epsilon_per_step))))] if n_streams
              else [0.0])
    counts = np.diff(chunk.offsets)
    table = pa.table({
        "user_id": repeat_ids_encoded(chunk.user_ids, counts),
        "stream_id": repeat_ids_encoded(chunk.stream_ids, counts),
        "step": pa.array(np.asarray(chunk.steps, dtype=np.int64)),
        "y": pa.array(y),
    })
    return ChunkResult(chunk.index, {"samples": table}, costs, bounds, {}, [])


# No cache policy: a chunk's inputs are raw data and seeds; Prefect must not hash or
# store them (a rerun reproduces its noise from the seeds anyway).
privatize_curves = task(privatize_curve_chunk, name="privatize-curves", retries=2,
                        retry_delay_seconds=1, persist_result=False, cache_policy=NO_CACHE)
privatize_streams = task(privatize_stream_chunk, name="privatize-streams", retries=2,
                         retry_delay_seconds=1, persist_result=False, cache_policy=NO_CACHE)
