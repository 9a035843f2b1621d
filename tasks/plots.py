"""Matplotlib plots for reports (Agg backend, PNG files, deterministic)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from tasks.safe_files import NewFile, make_dirs  # noqa: E402

plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 9,
                     "svg.hashsalt": "privpipe", "path.simplify": True})


def _head(path: Path) -> pa.Table:
    """The first row group of a release file: plots never load a whole release."""
    pf = pq.ParquetFile(path)
    if pf.metadata.num_row_groups == 0:
        return pf.schema_arrow.empty_table()
    return pf.read_row_group(0)


def _save(fig: plt.Figure, path: Path) -> str:
    make_dirs(path.parent)
    try:
        fig.tight_layout()
        with NewFile(path) as fh:
            fig.savefig(fh, format=path.suffix.lstrip(".") or "png", metadata={"Software": None})
    finally:
        plt.close(fig)
    return path.name


def plot_private_curves(values_path: Path, value_columns: Sequence[str], out: Path,
                        units: str, value_unit: str = "", time_unit: str = "",
                        max_curves: int = 6) -> str:
    """Plot the first `max_curves` released (private) curves: never raw data."""
    table = _head(values_path)
    users = table.column("user_id").to_pylist()
    curves = table.column("curve_id").to_pylist()
    t = table.column("t").to_numpy()
    keys: list[tuple[str, str]] = []
    idx: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(zip(users, curves, strict=True)):
        if key not in idx:
            if len(keys) >= max_curves:
                break
            keys.append(key)
            idx[key] = []
        idx[key].append(i)
    if len(value_columns) == 2:
        fig, ax = plt.subplots(1, 1, figsize=(7, 4.5))
        xs = table.column(value_columns[0]).to_numpy()
        ys = table.column(value_columns[1]).to_numpy()
        for key in keys:
            rows = np.array(idx[key])
            ax.plot(xs[rows], ys[rows], lw=0.9, label=f"{key[0][:16]} / {key[1][:12]}")
        ax.set_xlabel(f"{value_columns[0]} ({value_unit})")
        ax.set_ylabel(f"{value_columns[1]} ({value_unit})")
        ax.set_aspect("equal", adjustable="datalim")
        ax.legend(fontsize=7, loc="best")
        ax.set_title(f"Private outputs (sample of {len(keys)}); metric: {units}")
        return _save(fig, out)
    shown = keys[:4]
    fig, axs = plt.subplots(len(shown), 1, figsize=(8, 1.7 * len(shown) + 0.6), sharex=True,
                            squeeze=False)
    for ax, key in zip(axs[:, 0], shown, strict=True):
        rows = np.array(idx[key])
        for j, col in enumerate(value_columns):
            ax.plot(t[rows], table.column(col).to_numpy()[rows], lw=0.7, color=f"C{j}",
                    label=col if len(value_columns) > 1 else None)
        ax.set_ylabel(f"{value_unit}", fontsize=8)
        ax.set_title(f"{key[0][:24]} / {key[1][:16]}", fontsize=8, loc="left")
    axs[-1, 0].set_xlabel(f"t ({time_unit} from curve start)")
    fig.suptitle(f"Private outputs (sample of {len(shown)}); metric: {units}", fontsize=9)
    return _save(fig, out)


def plot_private_streams(samples_path: Path, recon_path: Path | None, out: Path,
                         max_steps: int = 480) -> str:
    """Plot the first stream's privatized samples and its CPR reconstruction."""
    table = _head(samples_path)
    users = table.column("user_id").to_pylist()
    streams = table.column("stream_id").to_pylist()
    n = 0
    while n < len(users) and users[n] == users[0] and streams[n] == streams[0]:
        n += 1
    n = min(n, max_steps)
    steps = table.column("step").to_numpy()[:n]
    y = table.column("y").to_numpy()[:n]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.plot(steps, y, ".", ms=2.5, alpha=0.5, color="tab:gray", label="Square Wave reports y")
    if recon_path is not None and recon_path.exists():
        rec = _head(recon_path)
        ru = rec.column("user_id").to_pylist()
        rs = rec.column("stream_id").to_pylist()
        sel = [i for i in range(min(len(ru), max_steps * 2))
               if ru[i] == users[0] and rs[i] == streams[0]][:n]
        if sel:
            ax.plot(rec.column("step").to_numpy()[sel], rec.column("value_hat").to_numpy()[sel],
                    color="tab:red", lw=1.4, label="CPR reconstruction")
    ax.set_xlabel("step")
    ax.set_ylabel("normalised value")
    ax.set_title(f"Stream {streams[0][:20]!s} of user {users[0][:20]!s} (private outputs only)")
    ax.legend(fontsize=7, loc="upper right")
    return _save(fig, out)


def plot_histogram(values: Sequence[float], out: Path, title: str, xlabel: str,
                   cap: float | None = None) -> str:
    """Histogram (e.g. budget spent per user), with the cap as a vertical line."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    vals = np.asarray(values, dtype=float)
    if vals.size:
        top = max(cap or 0.0, float(vals.max())) or 1.0
        ax.hist(vals, bins=40, range=(0.0, top), color="tab:blue", alpha=0.8)
    if cap is not None:
        ax.axvline(cap, color="tab:red", ls="--", label=f"cap {cap:g}")
        ax.legend(fontsize=7)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("users")
    return _save(fig, out)


def plot_timeline(times: Sequence[str], counts: Sequence[int], out: Path, title: str) -> str:
    """Bar chart of counts per day (e.g. denials over time)."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    if times:
        ax.bar(range(len(times)), counts, color="tab:orange")
        ax.set_xticks(range(len(times)), list(times), rotation=45, ha="right", fontsize=7)
    else:
        ax.text(0.5, 0.5, "no denials", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.set_ylabel("denied requests")
    return _save(fig, out)


def plot_raw_vs_private(t: np.ndarray, raw: np.ndarray, private: dict[str, np.ndarray],
                        out: Path, title: str, xlabel: str, ylabel: str) -> str:
    """Evaluation only (public or synthetic data): raw next to private outputs."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    if raw.ndim == 2 and raw.shape[1] == 2:
        ax.plot(raw[:, 0], raw[:, 1], color="black", lw=1.6, label="raw (public data)")
        for name, v in private.items():
            ax.plot(v[:, 0], v[:, 1], lw=0.9, label=name)
        ax.set_aspect("equal", adjustable="datalim")
    else:
        ax.plot(t, raw.reshape(len(t), -1)[:, 0], color="black", lw=1.4, label="raw (public data)")
        for name, v in private.items():
            ax.plot(t, np.asarray(v).reshape(len(t), -1)[:, 0], lw=0.9, label=name, alpha=0.85)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    return _save(fig, out)
