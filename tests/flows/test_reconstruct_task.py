"""The reconstruction task reports a period only when CPR found a significant one."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mechanisms.streams import square_wave
from tasks.reconstruct import reconstruct_samples
from tasks.staging import read_arrow, write_arrow


def _samples(tmp_path, eps0):
    rng = np.random.default_rng(3)
    n = 1200
    steps = np.arange(n)
    periodic = 0.5 + 0.4 * np.sin(2 * np.pi * steps / 24)
    flat = np.full(n, 0.5)
    y = [square_wave(x, epsilon_per_step=eps0, rng=rng) for x in (periodic, flat)]
    table = pa.table({"user_id": ["u-periodic"] * n + ["u-flat"] * n,
                      "stream_id": ["s"] * (2 * n),
                      "step": np.concatenate([steps, steps]),
                      "y": np.concatenate(y)})
    path = tmp_path / "samples.arrow"
    write_arrow(table, path)
    return path


def test_period_only_when_significant(tmp_path):
    path = _samples(tmp_path, eps0=2.0)
    out = tmp_path / "recon.arrow"
    summaries = {s["user_id"]: s for s in reconstruct_samples(str(path), 2.0, str(out))}
    assert summaries["u-periodic"]["period"] == 24
    assert summaries["u-periodic"]["status"] == "ok"
    # a constant stream has no period: CPR must not report the (insignificant) one it tried
    assert summaries["u-flat"]["period"] is None
    assert summaries["u-flat"]["status"].startswith("no significant period"), summaries
    recon = read_arrow(out)
    assert recon.num_rows == 2400
    flat = np.asarray(recon.column("value_hat").to_numpy()[recon.column("user_id").to_numpy(
        zero_copy_only=False) == "u-flat"])
    assert abs(flat.mean() - 0.5) < 0.05
