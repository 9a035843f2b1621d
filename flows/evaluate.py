"""The evaluate flow: mechanisms on bundled public data, raw against private.

This is the only place raw data is plotted, and only public data (the
bundled data sets) is used. Nothing is charged: no ledger is involved.
Errors are the paper's metrics: normalised L2 error for curves (exact, on the
piecewise-linear interpolants), cosine distance for streams.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, task

from data import loaders
from mechanisms import curves as mc
from mechanisms import streams as ms
from mechanisms.metrics import cosine_distance, l2_distance
from mechanisms.reconstruct import cpr
from tasks import plots
from tasks.outputs import write_json
from tasks.report import md_table, publish_artifacts, render
from tasks.safe_files import make_dirs, set_output_modes


def _curves(df: Any, cols: list[str], n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for _, g in df.groupby(["user_id", "curve_id"], sort=True):
        if len(g) >= 50:
            out.append((g["t"].to_numpy(float), g[cols].to_numpy(float)))
        if len(out) >= n:
            break
    return out


def _norm_err(t: np.ndarray, raw: np.ndarray, priv: np.ndarray) -> float:
    """dist(q̃, q) / ‖q − q̄‖ with q̄ the time mean of q (as the curves benchmarks).

    Projected coordinates sit millions of metres from the origin, so dividing by
    ‖q‖ would make every error look ~1000x smaller; centring fixes the scale.
    """
    mean = np.trapezoid(raw, t, axis=0) / (t[-1] - t[0])
    return l2_distance(t, raw, priv) / l2_distance(t, raw, np.broadcast_to(mean, raw.shape))


# Default ε grids per data set, in each data set's own units (the L2 metric
# scales with value and time units, so one grid cannot serve all of them).
DEFAULT_EPSILONS = {
    "ais": [0.01, 0.1, 1.0],        # metres x seconds^(1/2)
    "ecg": [500.0, 2000.0, 10000.0],  # mV x seconds^(1/2)
    "taylor": [1.0, 3.0, 5.0],      # per window of w = 5 steps
}


def evaluate_fn(out_dir: str, epsilons: list[float] | None = None, seed: int = 0,
                n_curves: int = 5) -> dict[str, Any]:
    """Run each demo mechanism and its baseline at every ε; write the evaluation report.

    `epsilons`, when given, replaces every data set's default grid.
    """
    out = Path(out_dir) / "evaluate"
    make_dirs(out / "plots")
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    plot_lines: list[str] = []
    grids = {k: list(epsilons) if epsilons else v for k, v in DEFAULT_EPSILONS.items()}
    suites = [
        ("ais", "AIS trajectories (m, s)", _curves(loaders.ais_curves(time_unit="s"), ["x", "y"],
                                            n_curves),
         "PrivFuncSeg", lambda t, v, e: mc.privfuncseg(t, v, epsilon=e, rng=rng)),
        ("ecg", "ECG records (mV, s)", _curves(loaders.ecg_curves(), ["value"], n_curves),
         "P&P sinc (500 terms, 0.02 s)",
         lambda t, v, e: mc.project_and_privatize(t, v, "sinc", epsilon=e, rng=rng, n_terms=500,
                                                  spacing=0.02, first=0)),
    ]
    for key, name, curves, mech_name, mech in suites:
        mid = grids[key][len(grids[key]) // 2]
        for eps in grids[key]:
            errs, base = [], []
            for t, v in curves:
                errs.append(_norm_err(t, v, mech(t, v, eps).evaluate(t)))
                k = max(2, len(t) // 10)
                b = mc.baseline_points(t, v, k, epsilon=eps, smooth=max(1, k // 20), rng=rng)
                base.append(_norm_err(t, v, b.evaluate(t)))
            rows.append({"data": name, "ε": eps, "mechanism": mech_name,
                         "mechanism error": f"{np.mean(errs):.4g}",
                         "baseline (k=N/10, s=k/20) error": f"{np.mean(base):.4g}",
                         "ratio": f"{np.mean(base) / max(np.mean(errs), 1e-300):.3g}"})
        t, v = curves[0]
        priv = {f"{mech_name} ε={mid:g}": mech(t, v, mid).evaluate(t)}
        k = max(2, len(t) // 10)
        priv[f"baseline ε={mid:g}"] = mc.baseline_points(t, v, k, epsilon=mid,
                                                         smooth=max(1, k // 20),
                                                         rng=rng).evaluate(t)
        fname = plots.plot_raw_vs_private(t, v, priv, out / "plots" / f"{mech_name[:3]}.png",
                                          f"{name}: raw vs private", "t", "value")
        plot_lines += [f"### {name}", "", f"![{name}](plots/{fname})", ""]
    stream = loaders.taylor_stream()
    x = stream["value"].to_numpy(float)
    x = (x - x.min()) / (x.max() - x.min())
    w = 5
    mid = grids["taylor"][len(grids["taylor"]) // 2]
    for eps in grids["taylor"]:
        e0 = eps / w
        y = ms.square_wave(x, epsilon_per_step=e0, rng=rng)
        rec = cpr(y, epsilon_per_step=e0).reconstruction
        moving = ms.moving_average(y, 5)
        d_cpr, d_mov = cosine_distance(x, rec), cosine_distance(x, moving)
        rows.append({"data": "taylor stream (w=5)", "ε": eps, "mechanism": "SW + CPR",
                     "mechanism error": f"{d_cpr:.4g}",
                     "baseline (k=N/10, s=k/20) error": f"SW_moving {d_mov:.4g}",
                     "ratio": f"{d_mov / max(d_cpr, 1e-300):.3g}"})
        if eps == mid:
            t = np.arange(480, dtype=float)
            fname = plots.plot_raw_vs_private(
                t, x[:480], {f"SW + CPR ε={eps:g}": rec[:480],
                             f"SW_moving ε={eps:g}": moving[:480]},
                out / "plots" / "taylor.png", "Electricity demand: raw vs private", "step",
                "normalised demand")
            plot_lines += ["### Electricity demand (taylor)", "", f"![taylor](plots/{fname})",
                           ""]
    cols = ["data", "ε", "mechanism", "mechanism error", "baseline (k=N/10, s=k/20) error",
            "ratio"]
    text = "\n".join([
        "# privpipe evaluation on bundled public data", "",
        "Raw data appears here because these data sets are public; release reports never "
        "plot raw data. Curves: mean L2 error over the L2 norm of the centred curve; "
        "streams: cosine distance "
        "(baseline column: SW_moving). Nothing was charged.", "",
        md_table(rows, cols, 200), "## Raw against private", "", *plot_lines])
    html = render(text, out / "report.md", "privpipe evaluation")
    write_json({"rows": rows}, out / "evaluation.json")
    set_output_modes(out)  # born private; now the operator's modes (docs/files.md)
    publish_artifacts("evaluate", text, out, rows)
    return {"rows": rows, "report": str(html)}


evaluate_task = task(evaluate_fn, name="evaluate", persist_result=False)


@flow(name="evaluate", persist_result=False)
def evaluate(out_dir: str = "out", epsilons: list[float] | None = None, seed: int = 0,
             n_curves: int = 5) -> dict[str, Any]:
    """Evaluate the mechanisms on bundled public data (no ledger, no charge)."""
    return evaluate_task(out_dir, list(epsilons) if epsilons else None, seed, n_curves)
