"""What a published curve release says about each curve outside the noise (the real flow).

docs/guarantees.md and docs/policy.md: with ``public.points = false`` nothing
released is sized by, or counts, the curves' numbers of samples, and with
``public.duration = false`` every curve lies on the domain's window; the
manifest lists the public fields under ``public_metadata``. So the manifest's
counts carry no ``points`` total and the report no "points / samples" row on
such a domain, while a domain that declares point counts public publishes
their total (the number of input rows). One flow run per domain, through
Prefect (a module-scoped test harness).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from release_path import curves_domain

from ledger import Ledger
from schemas.policy import Policy

T = 40.0
GRID = 16
SHAPES = {("u1", "a"): (97, 25.0), ("u2", "a"): (31, 33.0), ("u2", "b"): (200, T)}
ROWS = sum(n for n, _ in SHAPES.values())

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = ("privfuncseg",)


@pytest.fixture(scope="module")
def harness(prefect_api):
    return prefect_api


def _release(tmp: Path, window: float | None) -> tuple[dict, Path]:
    from flows.release import release_curves

    dom = curves_domain("gp", window=window, grid_points=GRID if window else None,
                        cap=Fraction(10))
    ledger_path = tmp / "ledger.duckdb"
    Ledger.init(ledger_path, actor="privacy-tests").apply_policy(
        Policy(domains={dom.name: dom}))
    parts = []
    for (u, c), (n, end) in SHAPES.items():
        t = np.linspace(0.0, end, n)
        parts.append(pd.DataFrame({"user_id": u, "curve_id": c, "t": t,
                                   "x": 5 * np.sin(t), "y": t / 2}))
    src = tmp / "curves.csv"
    pd.concat(parts).to_csv(src, index=False)
    out = release_curves(input_path=str(src), domain=dom.name, mechanism="privfuncseg",
                         epsilon="1", ledger_path=str(ledger_path), out_dir=str(tmp / "out"))
    rdir = Path(out["out"])
    return json.loads((rdir / "manifest.json").read_text()), rdir


def test_private_point_counts_and_durations_are_not_published(harness, tmp_path):
    manifest, rdir = _release(tmp_path, window=T)
    counts = manifest["counts"]
    assert "points" not in counts
    assert counts["items"] == len(SHAPES) and counts["users_released"] == 2
    assert counts["values_rows"] == GRID * len(SHAPES)  # a function of public parameters
    fields = manifest["public_metadata"]["fields"]
    assert f"window={T:g}" in fields
    assert not [f for f in fields if f.startswith(("points", "duration", "sample_times"))]
    report = (rdir / "report.md").read_text()
    assert "points / samples" not in report
    curves = pq.read_table(rdir / "curves.parquet").to_pandas()
    assert set(curves["duration"]) == {T}
    values = pq.read_table(rdir / "values.parquet").to_pandas()
    for _, v in values.groupby(["user_id", "curve_id"]):
        assert v["t"].to_numpy().tobytes() == np.linspace(0.0, T, GRID).tobytes()


def test_public_point_counts_are_published(harness, tmp_path):
    manifest, rdir = _release(tmp_path, window=None)
    assert manifest["counts"]["points"] == ROWS
    assert {"duration", "points"} <= set(manifest["public_metadata"]["fields"])
    assert "points / samples" in (rdir / "report.md").read_text()
