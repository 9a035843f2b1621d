"""The reconstruction task reports a period only when CPR found a significant one."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from mechanisms.streams import square_wave
from tasks.reconstruct import reconstruct_samples


def _samples(eps0):
    rng = np.random.default_rng(3)
    n = 1200
    steps = np.arange(n)
    periodic = 0.5 + 0.4 * np.sin(2 * np.pi * steps / 24)
    flat = np.full(n, 0.5)
    y = [square_wave(x, epsilon_per_step=eps0, rng=rng) for x in (periodic, flat)]
    return pa.table({"user_id": ["u-periodic"] * n + ["u-flat"] * n,
                     "stream_id": ["s"] * (2 * n),
                     "step": np.concatenate([steps, steps]),
                     "y": np.concatenate(y)})


def test_period_only_when_significant():
    found, recon = reconstruct_samples(_samples(eps0=2.0), 2.0)
    summaries = {s["user_id"]: s for s in found}
    assert summaries["u-periodic"]["period"] == 24
    assert summaries["u-periodic"]["status"] == "ok"
    # a constant stream has no period: CPR must not report the (insignificant) one it tried
    assert summaries["u-flat"]["period"] is None
    assert summaries["u-flat"]["status"].startswith("no significant period"), summaries
    assert recon.num_rows == 2400
    flat = np.asarray(recon.column("value_hat").to_numpy()[recon.column("user_id").to_numpy(
        zero_copy_only=False) == "u-flat"])
    assert abs(flat.mean() - 0.5) < 0.05
