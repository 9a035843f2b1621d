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
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from prefect import task

from mechanisms import curves as mc
from mechanisms import streams as ms
from mechanisms.cost import Cost, StepRun, WEventCost, exact, float_at_most
from mechanisms.curves import PrivateFunction, noise_scale
from mechanisms.errors import MechanismParameterError
from mechanisms.safe_sampling import power_of_two_at_least, snap_to_grid
from tasks.stage import contiguous_ranges
from tasks.staging import read_curve_chunk, read_seeds, read_stream_chunk, write_parquet

CURVE_MECHANISMS = ("privfuncseg", "project_and_privatize", "privfuncselect", "baseline")
STREAM_MECHANISMS = ("square_wave",)


@dataclass(frozen=True)
class CurveSpec:
    """What to run on every curve of a release (all public parameters)."""

    mechanism: str
    epsilon: str | None
    rho: str | None
    options: dict[str, Any] = field(default_factory=dict)
    beta: float = 0.05
    evaluate_on: str = "grid"  # "grid": N evenly spaced points on [0, T]; "input": input times

    def __post_init__(self) -> None:
        if self.mechanism not in CURVE_MECHANISMS:
            raise MechanismParameterError(
                f"unknown curve mechanism {self.mechanism!r}; choose one of "
                f"{', '.join(CURVE_MECHANISMS)}")
        if (self.epsilon is None) == (self.rho is None):
            raise MechanismParameterError("give exactly one of epsilon (GP) or rho (CGP)")
        amount = exact(self.epsilon if self.epsilon is not None else self.rho)
        if amount <= 0:
            raise MechanismParameterError("epsilon / rho must be > 0")
        if self.evaluate_on not in ("grid", "input"):
            raise MechanismParameterError("evaluate_on must be 'grid' or 'input'")

    @property
    def notion(self) -> str:
        """``gp`` or ``cgp``."""
        return "gp" if self.epsilon is not None else "cgp"

    @property
    def amount(self) -> Fraction:
        """The exact ε or ρ charged per curve."""
        return exact(self.epsilon if self.epsilon is not None else self.rho)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StreamSpec:
    """What to run on every stream of a release (all public parameters)."""

    epsilon: str
    w: int
    mechanism: str = "square_wave"
    reconstruct: str = "cpr"

    def __post_init__(self) -> None:
        if exact(self.epsilon) <= 0:
            raise MechanismParameterError("epsilon must be > 0")
        if self.w < 1:
            raise MechanismParameterError("w must be >= 1")
        if self.mechanism not in STREAM_MECHANISMS:
            raise MechanismParameterError(f"unknown stream mechanism {self.mechanism!r}")
        if self.reconstruct not in ("cpr", "none"):
            raise MechanismParameterError("reconstruct must be 'cpr' or 'none'")

    @property
    def epsilon_per_step(self) -> Fraction:
        """Exact per-step ε = ε / w."""
        return exact(self.epsilon) / self.w


@dataclass
class ChunkResult:
    """What a mechanism task hands back to the flow (no raw data)."""

    index: int
    output_paths: dict[str, str]
    costs: list[tuple[str, str, Cost | WEventCost, str]]  # (user_id, step, cost, stream_id)
    error_bounds: list[float]
    diagnostics: list[dict[str, Any]]
    rms_bounds: list[float] = field(default_factory=list)  # bound / sqrt(duration)


def _run_curve(t: np.ndarray, values: np.ndarray, spec: CurveSpec,
               rng: np.random.Generator) -> Any:
    # The exact Fraction goes in, so the mechanism's cost equals the reservation.
    kw: dict[str, Any] = {"epsilon": spec.amount} if spec.notion == "gp" else {
        "rho": spec.amount}
    opts = dict(spec.options)
    if spec.mechanism == "privfuncseg":
        return mc.privfuncseg(t, values, rng=rng, **kw, **opts)
    if spec.mechanism == "project_and_privatize":
        basis = opts.pop("basis", "legendre")
        return mc.project_and_privatize(t, values, basis, rng=rng, **kw, **opts)
    if spec.mechanism == "privfuncselect":
        return mc.privfuncselect(t, values, rng=rng, **kw, **opts)
    k = int(opts.pop("k", max(2, len(t) // 10)))
    return mc.baseline_points(t, values, min(k, len(t)), rng=rng, **kw, **opts)


# Released floats are rounded to a power-of-two grid far below the noise scale
# (post-processing, free): the low-order bits of a floating-point sampler's
# output, which precision attacks read (Mironov 2012), are not released.
# See SECURITY.md, "Sampling safety".
_GRID_BELOW_NOISE = 2.0**-20
_SW_GRID = 2.0**-24
_HUGE_BOUND = 2.0**900


def _snapped(res: Any, spec: CurveSpec) -> Any:
    """The private function with its noisy coefficients snapped to the release grid."""
    scale = noise_scale(spec.notion, float_at_most(spec.amount))
    grid = power_of_two_at_least(scale) * _GRID_BELOW_NOISE
    arrays = res.to_arrays()
    arrays["coefficients"] = snap_to_grid(np.asarray(arrays["coefficients"]), grid=grid,
                                          bound=_HUGE_BOUND)
    return PrivateFunction.from_arrays(arrays)


def _costs_equal_request(cost: Cost, spec: CurveSpec) -> None:
    if cost.requested != spec.amount or cost.total > spec.amount:
        raise AssertionError(
            f"this is a bug: mechanism cost {cost.total} (requested {cost.requested}) "
            f"does not match the reserved {spec.amount}")


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
    val_rows: dict[str, list] = {"user_id": [], "curve_id": [], "t": []}
    val_cols: list[np.ndarray] = []
    seg_rows: dict[str, list] = {"user_id": [], "curve_id": [], "segment": [], "t_start": [],
                                 "t_end": [], "basis": [], "coefficients": []}
    cur_rows: dict[str, list] = {k: [] for k in ("user_id", "curve_id", "basis", "basis_params",
                                                 "outside", "dim", "t_end", "error_bound",
                                                 "cost")}
    costs: list[tuple[str, str, Cost | WEventCost, str]] = []
    bounds: list[float] = []
    rms: list[float] = []
    diags: list[dict[str, Any]] = []
    for user in users:
        rng = np.random.default_rng(seeds[user.user_id])
        for curve in sorted(user.curves, key=lambda c: c.curve_id):
            res = _run_curve(curve.t, curve.values, spec, rng)
            _costs_equal_request(res.cost, spec)
            fn = _snapped(res, spec)
            costs.append((user.user_id, f"curve:{curve.curve_id}", res.cost, ""))
            bounds.append(float(res.error_bound(spec.beta)))
            duration = float(curve.t[-1] - curve.t[0])
            rms.append(bounds[-1] / duration ** 0.5)
            diags.append(dict(getattr(res, "diagnostics", {}) or {}))
            grid = (curve.t if spec.evaluate_on == "input"
                    else np.linspace(curve.t[0], curve.t[-1], len(curve.t)))
            out = np.asarray(fn.evaluate(grid), dtype=np.float64).reshape(len(grid), n_cols)
            val_rows["user_id"].extend([user.user_id] * len(grid))
            val_rows["curve_id"].extend([curve.curve_id] * len(grid))
            val_rows["t"].append(grid)
            val_cols.append(out)
            arrays = {**res.to_arrays(), "coefficients": fn.coefficients}
            cur_rows["user_id"].append(user.user_id)
            cur_rows["curve_id"].append(curve.curve_id)
            cur_rows["basis"].append(str(arrays["basis_name"]))
            cur_rows["basis_params"].append(json.dumps(arrays["basis_params"], sort_keys=True))
            cur_rows["outside"].append(str(arrays["outside"]))
            cur_rows["dim"].append(int(arrays["dim"]))
            cur_rows["t_end"].append(float(curve.t[-1] - curve.t[0]))
            cur_rows["error_bound"].append(bounds[-1])
            cur_rows["cost"].append(json.dumps(arrays["cost"], sort_keys=True))
            bps = fn.breakpoints
            coefs = fn.coefficients
            if bps is not None and coefs is not None:
                coefs = np.asarray(coefs, dtype=np.float64)
                for s in range(coefs.shape[0]):
                    seg_rows["user_id"].append(user.user_id)
                    seg_rows["curve_id"].append(curve.curve_id)
                    seg_rows["segment"].append(s)
                    seg_rows["t_start"].append(float(bps[s]))
                    seg_rows["t_end"].append(float(bps[s + 1]))
                    seg_rows["basis"].append(str(getattr(res, "basis_name", "")))
                    seg_rows["coefficients"].append(coefs[s].ravel().tolist())
    tcol = np.concatenate(val_rows["t"]) if val_rows["t"] else np.empty(0)
    vmat = np.concatenate(val_cols) if val_cols else np.empty((0, n_cols))
    values_table = pa.table({
        "user_id": pa.array(val_rows["user_id"], pa.string()),
        "curve_id": pa.array(val_rows["curve_id"], pa.string()),
        "t": pa.array(tcol),
        **{c: pa.array(vmat[:, j]) for j, c in enumerate(value_columns)},
    })
    seg_table = pa.table({
        "user_id": pa.array(seg_rows["user_id"], pa.string()),
        "curve_id": pa.array(seg_rows["curve_id"], pa.string()),
        "segment": pa.array(seg_rows["segment"], pa.int32()),
        "t_start": pa.array(seg_rows["t_start"], pa.float64()),
        "t_end": pa.array(seg_rows["t_end"], pa.float64()),
        "basis": pa.array(seg_rows["basis"], pa.string()),
        "coefficients": pa.array(seg_rows["coefficients"], pa.list_(pa.float64())),
    })
    curves_table = pa.table({
        "user_id": pa.array(cur_rows["user_id"], pa.string()),
        "curve_id": pa.array(cur_rows["curve_id"], pa.string()),
        "basis": pa.array(cur_rows["basis"], pa.string()),
        "basis_params": pa.array(cur_rows["basis_params"], pa.string()),
        "outside": pa.array(cur_rows["outside"], pa.string()),
        "dim": pa.array(cur_rows["dim"], pa.int64()),
        "duration": pa.array(cur_rows["t_end"], pa.float64()),
        "error_bound": pa.array(cur_rows["error_bound"], pa.float64()),
        "cost": pa.array(cur_rows["cost"], pa.string()),
    })
    out = Path(out_dir)
    paths = {"values": str(out / f"values-{index:05d}.parquet"),
             "segments": str(out / f"segments-{index:05d}.parquet"),
             "curves": str(out / f"curves-{index:05d}.parquet")}
    write_parquet(values_table, Path(paths["values"]))
    write_parquet(seg_table, Path(paths["segments"]))
    write_parquet(curves_table, Path(paths["curves"]))
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
    seeds = read_seeds(seeds_path)
    users = [u for u in read_stream_chunk(chunk_path) if u.user_id in seeds]
    eps_step = spec.epsilon_per_step
    uid, sid, steps_out, ys = [], [], [], []
    costs: list[tuple[str, str, Cost | WEventCost, str]] = []
    bounds: list[float] = []
    for user in users:
        rng = np.random.default_rng(seeds[user.user_id])
        for stream in sorted(user.streams, key=lambda s: s.stream_id):
            y = ms.square_wave(stream.values, epsilon_per_step=float_at_most(eps_step),
                               rng=rng)
            b = ms.square_wave_params(float_at_most(eps_step))[0]
            y = snap_to_grid(y - 0.5, grid=_SW_GRID, bound=0.5 + b + _SW_GRID) + 0.5
            cost = WEventCost(exact(spec.epsilon), spec.w, step_runs(stream.steps, eps_step))
            costs.append((user.user_id, f"stream:{stream.stream_id}", cost, stream.stream_id))
            uid.extend([user.user_id] * len(y))
            sid.extend([stream.stream_id] * len(y))
            steps_out.append(np.asarray(stream.steps, dtype=np.int64))
            ys.append(np.asarray(y, dtype=np.float64))
    bounds.append(float(np.sqrt(ms.square_wave_worst_variance(float(eps_step)))) if users else 0.0)
    table = pa.table({
        "user_id": pa.array(uid, pa.string()),
        "stream_id": pa.array(sid, pa.string()),
        "step": pa.array(np.concatenate(steps_out) if steps_out else np.empty(0, np.int64)),
        "y": pa.array(np.concatenate(ys) if ys else np.empty(0)),
    })
    path = str(Path(out_dir) / f"samples-{index:05d}.parquet")
    write_parquet(table, Path(path))
    return ChunkResult(index, {"samples": path}, costs, bounds, [])


privatize_curves = task(privatize_curve_chunk, name="privatize-curves", retries=2,
                        retry_delay_seconds=1, persist_result=False)
privatize_streams = task(privatize_stream_chunk, name="privatize-streams", retries=2,
                         retry_delay_seconds=1, persist_result=False)
