"""Raw-against-private evaluation of a domain's mechanism on public or synthetic data.

The only code that puts raw data next to private outputs. It never opens a
ledger and charges nothing: its noise comes from a seeded generator, not from
any release's key. Inputs go through the same validated ingestion as a
release (units, projection, declared range), and curves run through the same
mechanism dispatch as a release (`tasks.privatize`). Errors are in the
domain's units:

- curves: the L2 distance d(q̃, q) (value unit × time unit^½), the RMS
  deviation d/√T (value unit), and d over the L2 norm of the centred curve;
- streams: the RMS error in the declared value unit and the cosine distance
  (the CPR paper's metric) of the reconstruction and of a moving average of
  the Square Wave reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import ingest
from ingest import Rejection, UserCurves, UserStreams
from mechanisms import curves as mc
from mechanisms import registry
from mechanisms.cost import epsilon_per_step, exact, float_at_most
from mechanisms.metrics import cosine_distance, l2_distance
from schemas.errors import ParameterError
from schemas.policy import Domain
from tasks.privatize import CurveFraming, CurveSpec, run_one_curve


@dataclass
class Loaded:
    """The first curves or streams of an input, validated and in the domain's units."""

    items: list[tuple[str, str, np.ndarray, np.ndarray]]  # (user, item, t or steps, values)
    users_read: int = 0
    users_rejected: int = 0


@dataclass
class Outcome:
    """One evaluation of one ε: error rows and the arrays the plots show."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    shown: dict[str, np.ndarray] = field(default_factory=dict)


def load(source: str | Path | pd.DataFrame, dom: Domain, n: int, min_points: int = 20
         ) -> Loaded:
    """Read the first `n` curves (at least `min_points` points) or streams of `source`."""
    out = Loaded(items=[])
    for user in ingest.iter_users(source, dom):
        if isinstance(user, Rejection):
            out.users_rejected += 1
            continue
        out.users_read += 1
        if isinstance(user, UserCurves):
            out.items += [(user.user_id, c.curve_id, c.t, c.values) for c in user.curves
                          if len(c.t) >= min_points]
        elif isinstance(user, UserStreams):
            out.items += [(user.user_id, s.stream_id, s.steps, s.values) for s in user.streams
                          if len(s.steps) >= min_points and np.all(np.diff(s.steps) == 1)]
        if len(out.items) >= n:
            out.items = out.items[:n]
            break
    return out


def _centred_norm(t: np.ndarray, v: np.ndarray) -> float:
    mean = np.trapezoid(v, t, axis=0) / (t[-1] - t[0])
    return l2_distance(t, v, np.broadcast_to(mean, v.shape))


def framing(dom: Domain) -> CurveFraming:
    """What the domain declares public about each curve, as a release frames it."""
    if dom.public is None:
        raise ParameterError(f"domain {dom.name!r} declares no public metadata "
                             f"([domains.{dom.name}.public]); a release would refuse it")
    return CurveFraming(window=dom.window, points_public=dom.public.points,
                        grid_points=dom.grid_points,
                        sample_times_public=dom.public.sample_times)


def curve_errors(data: Loaded, dom: Domain, mechanism: str, options: dict[str, Any],
                 amount: float, rng: np.random.Generator) -> Outcome:
    """Run `mechanism` (as a release runs it) and the point baseline at ε (or ρ) = `amount`."""
    kw = {"epsilon": str(amount)} if dom.notion == "gp" else {"rho": str(amount)}
    spec = CurveSpec(mechanism, kw.get("epsilon"), kw.get("rho"), dict(options),
                     framing=framing(dom))
    exact_kw = {"epsilon" if dom.notion == "gp" else "rho": Fraction(str(amount))}
    errs: dict[str, list[tuple[float, float, float]]] = {mechanism: [], "baseline": []}
    out = Outcome()
    for i, (_, _, t, v) in enumerate(data.items):
        k = max(2, len(t) // 10)
        fitted = run_one_curve(t, v, spec, rng)
        priv = {mechanism: np.asarray(fitted.evaluate(t)).reshape(v.shape),
                "baseline": np.asarray(mc.baseline_points(
                    t, v, k, smooth=max(1, k // 20), rng=rng, **exact_kw).evaluate(t)
                ).reshape(v.shape)}
        scale = _centred_norm(t, v)
        for name, p in priv.items():
            d = l2_distance(t, v, p)
            errs[name].append((d, d / np.sqrt(t[-1] - t[0]), d / scale))
        if i == 0:
            out.shown = {"t": t, "raw": v, **priv}
    for name, e in errs.items():
        arr = np.asarray(e)
        out.rows.append({"mechanism": name if name != "baseline" else
                         "baseline (k=N/10, dist_∞)",
                         "L2 error": float(arr[:, 0].mean()), "RMS error": float(arr[:, 1].mean()),
                         "normalised error": float(arr[:, 2].mean())})
    return out


def stream_errors(data: Loaded, dom: Domain, epsilon: float, rng: np.random.Generator,
                  mechanism: str = "square_wave") -> Outcome:
    """The mechanism's randomizer (ε/w per sample) + CPR, and a moving average of the reports.

    CPR runs only for mechanisms whose registry entry lists it (Square Wave
    reports); every mechanism gets the moving average of its reports.
    """
    from mechanisms import streams as ms
    from mechanisms.reconstruct import cpr

    entry = registry.stream(mechanism)
    lo, hi = dom.value_range or (0.0, 1.0)
    e0_exact = epsilon_per_step(exact(epsilon), int(dom.w or 1))
    e0 = float_at_most(e0_exact)
    with_cpr = "cpr" in entry.reconstructions
    cpr_name, avg_name = f"{entry.label} + CPR", f"{entry.label} moving average"
    errs: dict[str, list[tuple[float, float]]] = {
        **({cpr_name: []} if with_cpr else {}), avg_name: []}
    out = Outcome()
    for i, (_, _, steps, x) in enumerate(data.items):
        y = entry.run(x, epsilon_per_step=e0_exact, rng=rng)
        res = cpr(y, epsilon_per_step=e0) if with_cpr else None
        est = {**({cpr_name: np.asarray(res.reconstruction, dtype=float)} if res else {}),
               avg_name: ms.moving_average(y, 5)}
        for name, v in est.items():
            errs[name].append((float(np.sqrt(np.mean((v - x) ** 2))) * (hi - lo),
                               cosine_distance(x, v)))
        if i == 0:
            path = (res.diagnostics or {}).get("path", "periodic") if res else "none"
            out.shown = {"steps": steps, "raw": x, "reports": y, **est,
                         "period": np.array([res.period if res and path == "periodic" else 0])}
    for name, e in errs.items():
        arr = np.asarray(e)
        out.rows.append({"mechanism": name, "RMS error": float(arr[:, 0].mean()),
                         "cosine distance": float(arr[:, 1].mean())})
    return out
