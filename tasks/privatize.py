"""Mechanism tasks: privatize one staged chunk of admitted users.

Each task reads its chunk and the users' noise seeds from disk, calls the pure
core (`mechanisms`) once per curve or stream with a generator seeded by the
ledger's HMAC seed for (release_id, user_id), and writes its private output
chunk. Because the seed is a function of (release, user) only, a retried or
rerun task draws exactly the same noise: no uncharged second draw can leave.
It returns only costs, error bounds and public diagnostics (no raw values).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from prefect import task

from mechanisms import registry
from mechanisms.cost import Cost, StepRun, WEventCost, exact, float_at_most
from mechanisms.curves import PrivateFunction, noise_scale
from mechanisms.curves.release import PublicFrame, dry_run, frame_for, on_frame
from mechanisms.errors import MechanismParameterError
from mechanisms.safe_sampling import power_of_two_at_least, snap_to_grid
from schemas.errors import PrivpipeError
from tasks.keyed_rng import release_generator
from tasks.stage import contiguous_ranges
from tasks.staging import (
    read_curve_chunk,
    read_seeds,
    read_stream_chunk,
    repeat_ids,
    write_arrow,
)

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

    def __post_init__(self) -> None:
        entry = registry.get(self.mechanism, "curves")
        if (self.epsilon is None) == (self.rho is None):
            raise MechanismParameterError("give exactly one of epsilon (GP) or rho (CGP)")
        entry.check_notion(self.notion)
        entry.check_options(self.options)
        amount = exact(self.epsilon if self.epsilon is not None else self.rho)
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
    def entry(self) -> registry.Mechanism:
        """The registry entry of this spec's mechanism."""
        return registry.get(self.mechanism, "curves")

    def check_runs(self, n_outputs: int) -> None:
        """Validate the options by a dry run on a public synthetic curve (costs nothing)."""
        dry_run(self.entry.run, notion=self.notion, amount=self.amount,
                frame=self.framing.typical_frame(), options=self.options,
                n_outputs=n_outputs)

    @property
    def notion(self) -> str:
        """``gp`` or ``cgp``."""
        return "gp" if self.epsilon is not None else "cgp"

    @cached_property
    def amount(self) -> Fraction:
        """The exact ε or ρ charged per curve (computed once: it is read per curve)."""
        return exact(self.epsilon if self.epsilon is not None else self.rho)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StreamSpec:
    """What to run on every stream of a release (all public parameters)."""

    epsilon: str
    w: int
    mechanism: str = "square_wave"
    reconstruct: str = "cpr"

    def __post_init__(self) -> None:
        if not AMOUNT_RANGE[0] <= exact(self.epsilon) <= AMOUNT_RANGE[1]:
            raise MechanismParameterError(f"epsilon must be in [1e-9, 1e9] (got {self.epsilon})")
        if self.w < 1:
            raise MechanismParameterError("w must be >= 1")
        registry.get(self.mechanism, "streams")
        if self.reconstruct not in ("cpr", "none"):
            raise MechanismParameterError("reconstruct must be 'cpr' or 'none'")

    @property
    def epsilon_per_step(self) -> Fraction:
        """Exact per-step ε = ε / w (the registry's reservation per step)."""
        return registry.get(self.mechanism, "streams").reservation(exact(self.epsilon), w=self.w)


class MechanismRunError(PrivpipeError):
    """A mechanism failed on one user's curve after the budget was reserved.

    Names the user and curve (never values). The release stops; the user's
    reservation stays charged and visible to `privpipe audit` until an operator
    closes the release (`privpipe ledger close`), as for any interrupted release.
    """

    def __init__(self, user_id: str, item_id: str, cause: BaseException):
        super().__init__(f"the mechanism failed on user {user_id!r}, item {item_id!r} after "
                         f"its budget was reserved ({type(cause).__name__}); the reservation "
                         "stays charged: fix the cause and rerun with the same release id, "
                         "or close the release with `privpipe ledger close`")
        self.user_id = user_id
        self.item_id = item_id


@dataclass
class ChunkResult:
    """What a mechanism task hands back to the flow (no raw data)."""

    index: int
    output_paths: dict[str, str]
    costs: list[tuple[str, str, Cost | WEventCost, str]]  # (user_id, step, cost, stream_id)
    error_bounds: list[float]
    diagnostics: list[dict[str, Any]]
    rms_bounds: list[float] = field(default_factory=list)  # bound / sqrt(duration)


def _run_curve(t: np.ndarray, values: np.ndarray, spec: CurveSpec, frame: PublicFrame,
               rng: np.random.Generator) -> Any:
    # The exact Fraction goes in, so the mechanism's cost equals the reservation;
    # the curve goes in on its public frame (its duration, or the domain's window).
    ft, fv = on_frame(t, values, frame)
    return spec.entry.run(ft, fv, notion=spec.notion, amount=spec.amount, rng=rng,
                          frame=frame, options=spec.options)


# Released floats are rounded to a power-of-two grid far below the noise scale
# (post-processing, free): the low-order bits of a floating-point sampler's
# output, which precision attacks read (Mironov 2012), are not released.
# See SECURITY.md, "Sampling safety".
_GRID_BELOW_NOISE = 2.0**-20
_SW_GRID = 2.0**-24
_HUGE_BOUND = 2.0**900


def _coefficient_grid(spec: CurveSpec) -> float:
    """The release grid of the noisy coefficients (public: a function of ε or ρ only)."""
    scale = noise_scale(spec.notion, float_at_most(spec.amount))
    return power_of_two_at_least(scale) * _GRID_BELOW_NOISE


def _snapped(arrays: dict[str, Any], grid: float) -> PrivateFunction:
    """The private function with its noisy coefficients snapped to the release grid."""
    arrays["coefficients"] = snap_to_grid(np.asarray(arrays["coefficients"]), grid=grid,
                                          bound=_HUGE_BOUND)
    return PrivateFunction.from_arrays(arrays)


def _costs_equal_request(cost: Cost, spec: CurveSpec) -> None:
    if cost.requested != spec.amount or cost.total > spec.amount:
        raise AssertionError(
            f"this is a bug: mechanism cost {cost.total} (requested {cost.requested}) "
            f"does not match the reserved {spec.amount}")


def _list_column(rows: list[np.ndarray]) -> pa.Array:
    """A list<double> column from 1-D float arrays, built without Python floats."""
    sizes = np.fromiter((len(r) for r in rows), dtype=np.int32, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    flat = np.concatenate(rows) if rows else np.empty(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.float64()))


def privatize_curve_chunk(index: int, chunk_path: str, seeds_path: str,
                          value_columns: tuple[str, ...], spec: CurveSpec,
                          out_dir: str) -> ChunkResult:
    """Privatize every curve of the admitted users of one staged chunk.

    Privacy: each curve costs `spec.amount` (ε-GP or ρ-CGP w.r.t. L2 in the
    domain's units) as reserved; the mechanism's own sub-step breakdown is
    returned for settlement. Noise comes only from the per-user seeds.
    """
    seeds = read_seeds(seeds_path)
    users = [u for u in read_curve_chunk(chunk_path, value_columns) if u.user_id in seeds]
    n_cols = len(value_columns)
    grid_step = _coefficient_grid(spec)
    # per released curve
    c_user: list[str] = []
    c_id: list[str] = []
    c_points: list[int] = []
    c_segments: list[int] = []
    cur_rows: dict[str, list] = {k: [] for k in ("basis", "basis_params", "outside", "dim",
                                                 "t_end", "error_bound", "cost")}
    # per released point / segment
    val_t: list[np.ndarray] = []
    val_v: list[np.ndarray] = []
    seg_no: list[np.ndarray] = []
    seg_start: list[np.ndarray] = []
    seg_end: list[np.ndarray] = []
    seg_basis: list[str] = []
    seg_coefs: list[np.ndarray] = []
    costs: list[tuple[str, str, Cost | WEventCost, str]] = []
    bounds: list[float] = []
    rms: list[float] = []
    diags: list[dict[str, Any]] = []
    for user in users:
        rng = release_generator(seeds[user.user_id])
        for curve in sorted(user.curves, key=lambda c: c.curve_id):
            frame = spec.framing.frame(curve.t)
            try:
                res = _run_curve(curve.t, curve.values, spec, frame, rng)
            except Exception as err:
                raise MechanismRunError(user.user_id, curve.curve_id, err) from err
            _costs_equal_request(res.cost, spec)
            arrays = res.to_arrays()
            fn = _snapped(dict(arrays), grid_step)
            costs.append((user.user_id, f"curve:{curve.curve_id}", res.cost, ""))
            bounds.append(float(res.error_bound(spec.beta)))
            duration = frame.end
            rms.append(bounds[-1] / duration ** 0.5)
            diags.append(dict(getattr(res, "diagnostics", {}) or {}))
            grid = curve.t if spec.evaluate_on == "input" else frame.grid()
            out = np.asarray(fn.evaluate(grid), dtype=np.float64).reshape(len(grid), n_cols)
            c_user.append(user.user_id)
            c_id.append(curve.curve_id)
            c_points.append(len(grid))
            val_t.append(grid)
            val_v.append(out)
            cur_rows["basis"].append(str(arrays["basis_name"]))
            cur_rows["basis_params"].append(json.dumps(arrays["basis_params"], sort_keys=True))
            cur_rows["outside"].append(str(arrays["outside"]))
            cur_rows["dim"].append(int(arrays["dim"]))
            cur_rows["t_end"].append(duration)
            cur_rows["error_bound"].append(bounds[-1])
            cur_rows["cost"].append(json.dumps(arrays["cost"], sort_keys=True))
            bps = fn.breakpoints
            coefs = fn.coefficients
            k = 0
            if bps is not None and coefs is not None:
                coefs = np.asarray(coefs, dtype=np.float64)
                k = coefs.shape[0]
                bps = np.asarray(bps, dtype=np.float64)
                seg_no.append(np.arange(k, dtype=np.int32))
                seg_start.append(bps[:k])
                seg_end.append(bps[1:k + 1])
                seg_basis.extend([str(getattr(res, "basis_name", ""))] * k)
                seg_coefs.extend(coefs.reshape(k, -1))
            c_segments.append(k)
    vmat = np.concatenate(val_v) if val_v else np.empty((0, n_cols))
    values_table = pa.table({
        "user_id": repeat_ids(c_user, c_points),
        "curve_id": repeat_ids(c_id, c_points),
        "t": pa.array(np.concatenate(val_t) if val_t else np.empty(0)),
        **{c: pa.array(vmat[:, j]) for j, c in enumerate(value_columns)},
    })

    def cat(parts: list[np.ndarray], dtype: Any) -> pa.Array:
        return pa.array(np.concatenate(parts) if parts else np.empty(0, dtype), dtype)

    seg_table = pa.table({
        "user_id": repeat_ids(c_user, c_segments),
        "curve_id": repeat_ids(c_id, c_segments),
        "segment": cat(seg_no, pa.int32()),
        "t_start": cat(seg_start, pa.float64()),
        "t_end": cat(seg_end, pa.float64()),
        "basis": pa.array(seg_basis, pa.string()),
        "coefficients": _list_column(seg_coefs),
    })
    curves_table = pa.table({
        "user_id": pa.array(c_user, pa.string()),
        "curve_id": pa.array(c_id, pa.string()),
        "basis": pa.array(cur_rows["basis"], pa.string()),
        "basis_params": pa.array(cur_rows["basis_params"], pa.string()),
        "outside": pa.array(cur_rows["outside"], pa.string()),
        "dim": pa.array(cur_rows["dim"], pa.int64()),
        "duration": pa.array(cur_rows["t_end"], pa.float64()),
        "error_bound": pa.array(cur_rows["error_bound"], pa.float64()),
        "cost": pa.array(cur_rows["cost"], pa.string()),
    })
    out = Path(out_dir)
    paths = {"values": str(out / f"values-{index:05d}.arrow"),
             "segments": str(out / f"segments-{index:05d}.arrow"),
             "curves": str(out / f"curves-{index:05d}.arrow")}
    write_arrow(values_table, Path(paths["values"]))
    write_arrow(seg_table, Path(paths["segments"]))
    write_arrow(curves_table, Path(paths["curves"]))
    return ChunkResult(index, paths, costs, bounds, diags, rms)


def step_runs(steps: np.ndarray, per_step: Fraction) -> tuple[StepRun, ...]:
    """Runs of consecutive absolute steps, each step costing `per_step`."""
    return tuple(StepRun(a, b, per_step) for a, b in contiguous_ranges(steps))


def privatize_stream_chunk(index: int, chunk_path: str, seeds_path: str, spec: StreamSpec,
                           out_dir: str) -> ChunkResult:
    """Randomize every sample of the admitted users' streams with Square Wave.

    Privacy: each sample costs ε/w, so every window of w consecutive steps of a
    (user, stream) costs at most ε (w-event LDP); the per-step runs are
    returned for settlement. Noise comes only from the per-user seeds.
    """
    # Imported here: the stream core pulls in scipy.signal, which a curves release
    # never needs (it is a measurable part of a curves flow's start-up).
    from mechanisms import streams as ms

    seeds = read_seeds(seeds_path)
    users = [u for u in read_stream_chunk(chunk_path) if u.user_id in seeds]
    eps_step = spec.epsilon_per_step
    run_stream = registry.get(spec.mechanism, "streams").run
    uid: list[str] = []
    sid: list[str] = []
    n_out: list[int] = []
    steps_out, ys = [], []
    costs: list[tuple[str, str, Cost | WEventCost, str]] = []
    bounds: list[float] = []
    for user in users:
        rng = release_generator(seeds[user.user_id])
        for stream in sorted(user.streams, key=lambda s: s.stream_id):
            try:
                y = run_stream(stream.values, epsilon_per_step=eps_step, rng=rng)
            except Exception as err:
                raise MechanismRunError(user.user_id, stream.stream_id, err) from err
            b = ms.square_wave_params(float_at_most(eps_step))[0]
            y = snap_to_grid(y - 0.5, grid=_SW_GRID, bound=0.5 + b + _SW_GRID) + 0.5
            cost = WEventCost(exact(spec.epsilon), spec.w, step_runs(stream.steps, eps_step))
            costs.append((user.user_id, f"stream:{stream.stream_id}", cost, stream.stream_id))
            uid.append(user.user_id)
            sid.append(stream.stream_id)
            n_out.append(len(y))
            steps_out.append(np.asarray(stream.steps, dtype=np.int64))
            ys.append(np.asarray(y, dtype=np.float64))
    bounds.append(float(np.sqrt(ms.square_wave_worst_variance(float(eps_step)))) if users else 0.0)
    table = pa.table({
        "user_id": repeat_ids(uid, n_out),
        "stream_id": repeat_ids(sid, n_out),
        "step": pa.array(np.concatenate(steps_out) if steps_out else np.empty(0, np.int64)),
        "y": pa.array(np.concatenate(ys) if ys else np.empty(0)),
    })
    path = str(Path(out_dir) / f"samples-{index:05d}.arrow")
    write_arrow(table, Path(path))
    return ChunkResult(index, {"samples": path}, costs, bounds, [])


privatize_curves = task(privatize_curve_chunk, name="privatize-curves", retries=2,
                        retry_delay_seconds=1, persist_result=False)
privatize_streams = task(privatize_stream_chunk, name="privatize-streams", retries=2,
                         retry_delay_seconds=1, persist_result=False)
