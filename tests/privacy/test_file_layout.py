"""Nothing private in the shape of the published files (issue #27).

Two inputs that differ only in what the domain keeps private (a user's number
of samples, curve durations, sample times, and users rejected by validation)
are released through the real release flow (`flows.release.release_curves`,
Prefect harness) on a domain with ``public.points = false``,
``public.duration = false`` and ``public.rejections = false``. Every published
file must then be the same apart from the noise values: the same Parquet row
groups, schema, key-value metadata, statistics (present where they were, equal
where the column is not noise), encodings and uncompressed sizes; the same
manifest apart from noise-derived figures, digests and keyed tags; the same
report structure. Before the fix, chunks were cut by summed sample counts and
each chunk was a row group, so a user's N moved the row-group boundaries, and
the manifest and report counted the rejected users.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import files.outputs as outputs
import tasks.stage as stage

POLICY = textwrap.dedent("""
    [domains.hidden]
    kind = "curves"
    notion = "gp"
    cap = "1000"
    time_unit = "s"
    projection = "equirectangular"
    ref_lat = 40.6
    value_columns = ["x", "y"]
    value_unit = "m"
    window = 10.0
    grid_points = 64
    public = { duration = false, points = false }
""")

USERS = 24
ROWS_PER_GROUP = 500  # small, so the 24 x 64 value rows span several row groups


@pytest.fixture(scope="module", autouse=True)
def prefect_harness(prefect_api):
    return prefect_api


def _track(user: str, times: np.ndarray, phase: float) -> pd.DataFrame:
    lon = -74.0 + 0.001 * np.sin(times / 3 + phase)
    lat = 40.6 + 0.001 * np.cos(times / 4 + phase)
    return pd.DataFrame({"user_id": user, "curve_id": "c0", "t": times, "lon": lon, "lat": lat})


def _input(path: Path, *, variant: int) -> Path:
    """24 users, one track each; `variant` changes only private quantities.

    Variant 1 gives user u03 50 samples instead of 10 (its N), shortens u07's
    duration from 9 s to 4 s, moves u11's sample times (same N and span), and
    adds two users that validation rejects (tracks longer than the 10 s window).
    """
    frames = []
    for u in range(USERS):
        n, span = 10 + (u % 5) * 3, 9.0
        times = np.linspace(0.0, span, n)
        if variant == 1 and u == 3:
            times = np.linspace(0.0, span, 50)
        if variant == 1 and u == 7:
            times = np.linspace(0.0, 4.0, n)
        if variant == 1 and u == 11:
            times = np.sort(np.concatenate([[0.0, span], np.linspace(0.5, 8.0, n - 2) ** 1.01]))
        frames.append(_track(f"u{u:02d}", times, phase=u / 3))
        if variant == 1 and u in (5, 17):
            frames.append(_track(f"u{u:02d}-late", np.linspace(0.0, 15.0, 12), phase=1.0))
    pd.concat(frames, ignore_index=True).to_csv(path, index=False, float_format="%.9f")
    return path


def _release(tmp_path: Path, variant: int, policy: Path) -> dict:
    from flows.release import release_curves
    from ledger import Ledger
    from schemas.policy import load_policy

    root = tmp_path / f"v{variant}"
    (root / "ledger").mkdir(parents=True)
    Ledger.init(root / "ledger" / "ledger.duckdb").apply_policy(load_policy(policy))
    return release_curves(
        input_path=str(_input(root / "in.csv", variant=variant)), domain="hidden",
        mechanism="project_and_privatize", epsilon="4", release_id="layout",
        out_dir=str(root / "out"), ledger_path=str(root / "ledger" / "ledger.duckdb"),
        policy_path=str(policy))


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    # small sizes, so these 24 users make several chunks and row groups (the default
    # chunking: no chunk_users). Before #27 neither ROW_GROUP_ROWS nor DEFAULT_CHUNK_USERS
    # existed and chunks closed at CHUNK_POINTS samples, one row group each: 60 samples
    # make that rule cut at a few users, where a user's N moves the boundaries.
    mp.setattr(outputs, "ROW_GROUP_ROWS", ROWS_PER_GROUP, raising=False)
    mp.setattr(stage, "DEFAULT_CHUNK_USERS", 5, raising=False)
    mp.setattr(stage, "CHUNK_POINTS", 60, raising=False)
    try:
        tmp = tmp_path_factory.mktemp("layout")
        policy = tmp / "policy.toml"
        policy.write_text(POLICY)
        return [_release(tmp, v, policy) for v in (0, 1)]
    finally:
        mp.undo()


def _is_noise(typ: pa.DataType) -> bool:
    """Columns that carry noise: floats, and binary (WKB lines of noisy coordinates)."""
    while pa.types.is_list(typ) or pa.types.is_large_list(typ):
        typ = typ.value_type
    return pa.types.is_floating(typ) or pa.types.is_binary(typ)


def _shape(path: Path) -> dict:
    """Everything about a Parquet file but its float (noise) values."""
    pf = pq.ParquetFile(path)
    meta = pf.metadata
    schema = pf.schema_arrow
    floats = {f.name for f in schema if _is_noise(f.type)}
    groups = []
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        cols = []
        for j in range(rg.num_columns):
            c = rg.column(j)
            top = c.path_in_schema.split(".")[0]
            stats = c.statistics
            entry = {"path": c.path_in_schema, "encodings": c.encodings,
                     "compression": c.compression, "has_stats": c.is_stats_set,
                     "uncompressed": c.total_uncompressed_size,
                     "dictionary_page": c.has_dictionary_page}
            if stats is not None:
                entry["stats"] = {"has_min_max": stats.has_min_max,
                                  "has_null_count": stats.has_null_count,
                                  "null_count": stats.null_count,
                                  "has_distinct_count": stats.has_distinct_count}
                if top not in floats and stats.has_min_max:
                    entry["stats"]["min_max"] = (stats.min, stats.max)
            if top not in floats:
                entry["compressed"] = c.total_compressed_size
            cols.append(entry)
        groups.append({"rows": rg.num_rows, "columns": cols})
    table = pq.read_table(path)
    return {"schema": schema, "kv": meta.metadata, "created_by": meta.created_by,
            "format": meta.format_version, "row_groups": groups,
            "not_noise": table.select([n for n in table.column_names if n not in floats])}


def test_row_groups_are_cut_by_a_public_rule(releases):
    a, b = (Path(r["out"]) for r in releases)
    values = pq.ParquetFile(a / "values.parquet").metadata
    sizes = [values.row_group(i).num_rows for i in range(values.num_row_groups)]
    total = USERS * 64
    assert sizes == [ROWS_PER_GROUP] * (total // ROWS_PER_GROUP) + [total % ROWS_PER_GROUP]
    assert pq.ParquetFile(b / "values.parquet").metadata.num_row_groups == len(sizes)


def test_every_parquet_file_has_the_same_shape_apart_from_noise(releases):
    a, b = (Path(r["out"]) for r in releases)
    names = sorted(p.name for p in a.glob("*.parquet"))
    assert names == sorted(p.name for p in b.glob("*.parquet"))
    assert {"values.parquet", "curves.parquet", "segments.parquet", "values_lonlat.parquet",
            "curves_lonlat.parquet"} <= set(names)
    for name in names:
        sa, sb = _shape(a / name), _shape(b / name)
        for key in ("schema", "kv", "created_by", "format", "row_groups"):
            assert sa[key] == sb[key], f"{name}: {key} differs"
        assert sa["not_noise"].equals(sb["not_noise"]), f"{name}: a non-noise column differs"


def test_the_sizes_differ_by_the_noise_bytes_only(releases):
    a, b = (Path(r["out"]) for r in releases)
    for p in sorted(a.glob("*.parquet")):
        size_a, size_b = p.stat().st_size, (b / p.name).stat().st_size
        assert abs(size_a - size_b) <= 0.05 * size_a, (p.name, size_a, size_b)


def _keys(obj) -> object:
    if isinstance(obj, dict):
        return {k: _keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_keys(v) for v in obj]
    return type(obj).__name__


def test_the_manifest_publishes_no_private_count(releases):
    ma, mb = (r["manifest"] for r in releases)
    assert _keys(ma) == _keys(mb)
    assert ma["counts"] == mb["counts"]
    for private in ("users_rejected", "users_in_input", "points"):
        assert private not in ma["counts"]
    on_disk = json.loads((Path(releases[1]["out"]) / "manifest.json").read_text())
    assert "users_rejected" not in on_disk["counts"]
    assert ma["files"] == mb["files"]


def _masked(text: str) -> str:
    """Report text with numbers, hashes and dates masked (noise and keyed tags differ)."""
    text = re.sub(r"[0-9a-f]{16,}", "H", text)
    return re.sub(r"\d+(?:[.,]\d+)*(?:e[-+]?\d+)?", "N", text)


def test_the_report_says_only_that_rejected_users_are_not_published(releases):
    a, b = (Path(r["out"]) / "report.md" for r in releases)
    ta, tb = a.read_text(), b.read_text()
    headings = [[line for line in t.splitlines() if line.startswith("#")] for t in (ta, tb)]
    assert headings[0] == headings[1]
    assert "## Rejected (invalid input: nothing charged)" in headings[1]
    for t in (ta, tb):
        section = t.split("## Rejected", 1)[1].split("\n## ", 1)[0]
        assert "not published" in section and "public.rejections = false" in section
        assert "users rejected" not in section and "|" not in section
        assert "u05-late" not in t and "u17-late" not in t
    users = [t.split("## Users", 1)[1].split("\n## ", 1)[0] for t in (ta, tb)]
    assert users[0] == users[1]
    assert _masked(ta).count("\n") == _masked(tb).count("\n")


def test_the_geojson_has_the_same_structure(releases):
    a, b = (Path(r["out"]) for r in releases)
    ga, gb = (json.loads((d / "curves_lonlat.geojson").read_text()) for d in (a, b))
    assert [f["properties"] for f in ga["features"]] == [f["properties"]
                                                         for f in gb["features"]]
    assert [len(f["geometry"]["coordinates"]) for f in ga["features"]] == [
        len(f["geometry"]["coordinates"]) for f in gb["features"]]


@pytest.mark.parametrize("hidden", ["points", "duration"])
def test_sample_times_cannot_be_public_without_points_and_durations(tmp_path, hidden):
    """``evaluate_on = "input"`` releases values at the input times: N and the true span."""
    from typer.testing import CliRunner

    from flows.cli import app
    from ledger import Ledger

    extra = "grid_points = 64" if hidden == "points" else "window = 10.0"
    public = {"points": "true", "duration": "true", hidden: "false"}
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY.replace("window = 10.0\ngrid_points = 64\n", extra + "\n").replace(
        "public = { duration = false, points = false }",
        f"public = {{ duration = {public['duration']}, points = {public['points']}, "
        "sample_times = true }"))
    ledger = tmp_path / "ledger.duckdb"
    Ledger.init(ledger)
    r = CliRunner().invoke(app, ["ledger", "policy", "apply", str(policy), "--ledger",
                                 str(ledger)])
    assert r.exit_code == 2, r.output
    assert "domains.hidden.public.sample_times" in r.output
    assert f"public.{hidden} = true" in r.output
    assert Ledger(ledger).domains() == []  # nothing recorded
