"""Release reports and outputs in the user's units, read as their readers would.

The HTML is parsed (headings, tables, images, text); numbers are checked
against what the inputs and the theory say, not against the report code.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import struct
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from flows.outcome import ReleaseNotMadeError
from flows.release import release_curves, release_streams
from ingest.projection import project
from ledger import Ledger
from ledger.signing import head_signature_ok
from mechanisms.streams import square_wave_worst_variance
from schemas.policy import load_policy
from tests.flows import report_inputs as inputs
from tests.flows.html_report import embedded_pngs, parse

EPS = "1/2"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    policy = inputs.write_policy(root / "policy.toml")
    ledger = root / "ledger.duckdb"
    Ledger.init(ledger).apply_policy(load_policy(policy))
    return {"root": root, "policy": policy, "ledger": ledger}


@pytest.fixture(scope="module")
def geo(setup):
    csv = inputs.write_geo_csv(setup["root"] / "geo.csv")
    res = release_curves(input_path=str(csv), domain="geo", epsilon=EPS,
                         options={"basis": "linear"}, release_id="geo-1",
                         out_dir=str(setup["root"] / "out"), ledger_path=str(setup["ledger"]),
                         policy_path=str(setup["policy"]))
    return {**res, "csv": csv, "page": parse(res["report"])}


def test_curve_report_has_every_section_in_order(geo):
    assert geo["page"].heading_texts() == [
        "Release geo-1", "What the guarantee means",
        "Scale and shape checks (released outputs only)", "Users",
        "What each user was charged by this release", "Rejected (invalid input: nothing charged)",
        "Budget of the domain after this release", "Error bounds (data-independent)",
        "Output files", "Plots (private outputs only)"]


def test_each_users_charge_is_its_curves_times_epsilon(geo):
    eps = Fraction(EPS)
    charges = sorted(n * eps for n in inputs.GEO_CURVES.values())
    [summary] = geo["page"].table_after("What each user was charged")
    assert {k: Fraction(v) for k, v in summary.items()} == {
        "users charged": len(charges), "min": charges[0],
        "median": statistics.median_low(charges), "max": charges[-1]}
    [by_charge] = [t for t in geo["page"].tables_as_dicts() if t and "charged ε" in t[0]]
    assert {Fraction(r["charged ε"]): int(r["users"]) for r in by_charge} == {
        Fraction(1, 2): 2, Fraction(1): 2}


def test_header_states_time_policy_digest_and_entries(geo, setup):
    text = geo["page"].text
    rec = Ledger(setup["ledger"]).release("geo-1")
    assert f"Budget reserved at {rec['created_at']:%Y-%m-%d %H:%M:%S} UTC (ledger time" in text
    # no wall-clock time: a rerun (or a second run racing the first) writes the same bytes
    times = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text)
    assert set(times) == {f"{rec['created_at']:%Y-%m-%d %H:%M:%S}"}, times
    assert "local time" not in text
    digest = re.search(r"Policy digest: ([0-9a-f]{64})", text).group(1)
    manifest = json.loads((Path(geo["out"]) / "manifest.json").read_text())
    assert manifest["policy"]["digest"] == digest
    assert manifest["policy"]["definition"]["ref_lat"] == 40.6
    first, last = Ledger(setup["ledger"]).entry_range("geo-1")
    assert f"seq {first}–{last}" in text
    # the signed head the release ended at: in the manifest, on the page, and genuine
    head = manifest["ledger_head"]
    assert head["seq"] >= last
    assert f"Ledger head after this release: seq {head['seq']}, hash {head['hash']}" in text
    assert re.search(rf"Head signature \(Ed25519\): {head['signature']}\s*;", text)
    assert head_signature_ok(bytes.fromhex(head["public_key"]), head["signature"],
                             head["ledger_id"], head["schema_version"], head["seq"],
                             head["hash"], head["counter"])


def test_guarantee_reading_gives_the_shift_for_ratio_e(geo):
    # Shifting a curve of duration T by X m everywhere puts it at L2 distance X·√T, so the
    # likelihood ratio is e^(ε·X·√T): ratio e at X = 1 / (ε √T), T the median duration.
    df = inputs.geo_frame()
    t = pd.to_datetime(df["t"])
    durations = (t.groupby([df.user_id, df.curve_id]).max()
                 - t.groupby([df.user_id, df.curve_id]).min()).dt.total_seconds()
    expected = 1 / (float(Fraction(EPS)) * np.sqrt(np.median(durations)))
    para = geo["page"].section_text("What the guarantee means")
    m = re.search(r"A shift of ([\d.,]+) (mm|m) gives a likelihood ratio of at most e\^1", para)
    shown = float(m.group(1).replace(",", "")) * (1e-3 if m.group(2) == "mm" else 1)
    assert shown == pytest.approx(expected, rel=2e-3)
    assert "m·s^½" in para


def test_rejections_are_counts_per_rule_only(geo):
    page = geo["page"]
    [row] = page.table_after("Rejected")
    assert row == {"rule": "lat in [-90, 90]", "users rejected": "1"}
    rdir = Path(geo["out"])
    for name in ("report.html", "report.md", "manifest.json"):
        text = (rdir / name).read_text()
        assert inputs.REJECTED_USER not in text
        assert not re.search(r"row \d+", text)
        assert "column 'lat'" not in text and f"{geo['csv'].name}, row" not in text
        assert f"{inputs.REJECTED_SENTINEL_LAT}"[:8] not in text


def test_lonlat_outputs_invert_the_public_projection(geo):
    rdir = Path(geo["out"])
    xy = pq.read_table(rdir / "values.parquet").to_pandas()
    ll = pq.read_table(rdir / "values_lonlat.parquet").to_pandas()
    assert list(ll.columns) == ["user_id", "curve_id", "t", "lon", "lat"]
    assert (ll[["user_id", "curve_id", "t"]].values == xy[["user_id", "curve_id", "t"]].values
            ).all()
    x, y = project(ll.lon.to_numpy(), ll.lat.to_numpy(), ref_lat=40.6)
    assert np.max(np.abs(x - xy.x)) < 1e-6 and np.max(np.abs(y - xy.y)) < 1e-6
    # near the harbour: the noise is metres, not degrees
    assert ll.lon.between(-74.2, -73.8).all() and ll.lat.between(40.4, 40.8).all()


def test_geoparquet_lines_are_wkb_linestrings_of_those_points(geo):
    rdir = Path(geo["out"])
    pf = pq.ParquetFile(rdir / "curves_lonlat.parquet")
    geo_meta = json.loads(pf.schema_arrow.metadata[b"geo"])
    assert geo_meta["primary_column"] == "geometry"
    assert geo_meta["columns"]["geometry"]["encoding"] == "WKB"
    lines = pf.read().to_pandas()
    ll = pq.read_table(rdir / "values_lonlat.parquet").to_pandas()
    assert len(lines) == sum(inputs.GEO_CURVES.values())
    first = lines.iloc[0]
    wkb = first.geometry
    order, kind, n = wkb[0], *struct.unpack("<II", wkb[1:9])
    assert (order, kind, n) == (1, 2, first.points)
    coords = np.frombuffer(wkb[9:], "<f8").reshape(n, 2)
    pts = ll[(ll.user_id == first.user_id) & (ll.curve_id == first.curve_id)]
    np.testing.assert_array_equal(coords, pts[["lon", "lat"]].to_numpy())
    gj = json.loads((rdir / "curves_lonlat.geojson").read_text())
    assert len(gj["features"]) == len(lines)
    assert gj["features"][0]["geometry"]["coordinates"] == coords.tolist()


def test_report_alone_renders_with_every_image(geo, tmp_path):
    lone = tmp_path / "mailed" / "report.html"
    lone.parent.mkdir()
    shutil.copy(geo["report"], lone)
    page = parse(lone)
    # the map, and the figure of each warning of the checks section (tests/flows/
    # test_report_caveats.py): every one embedded
    alts = [i.get("alt") for i in page.images]
    assert "released trajectories" in alts and len(embedded_pngs(page)) == len(alts)
    assert "longitude/latitude" in page.section_text("Plots")
    assert not {"link", "script", "iframe"} & set(page.tags)


def test_a_wholly_denied_release_has_no_empty_sections(geo, setup):
    # After geo-1 every user has at most 4 - 1 = 3 left; 4 per curve is denied for all.
    with pytest.raises(ReleaseNotMadeError) as denied:  # the run ends Failed("Denied")
        release_curves(input_path=str(inputs.write_geo_csv(setup["root"] / "geo2.csv",
                                                           with_rejected=False)),
                       domain="geo", epsilon="4", release_id="geo-denied",
                       out_dir=str(setup["root"] / "out"), ledger_path=str(setup["ledger"]),
                       policy_path=str(setup["policy"]))
    page = parse(denied.value.result["report"])
    assert page.heading_texts() == [
        "Release geo-denied", "Users",
        "Denied (the budget would be exceeded: nothing drawn, nothing released)",
        "Budget of the domain after this release"]
    assert "Nothing was released" in page.text and page.images == []
    denied = page.table_after("Denied")
    assert sorted(r["user_id"] for r in denied) == sorted(inputs.GEO_CURVES)


@pytest.fixture(scope="module")
def meters(setup):
    csv = setup["root"] / "meters.csv"
    inputs.meters_frame().to_csv(csv, index=False)
    res = release_streams(input_path=str(csv), domain="meters", epsilon="8",
                          release_id="meters-1", out_dir=str(setup["root"] / "out"),
                          ledger_path=str(setup["ledger"]), policy_path=str(setup["policy"]))
    return {**res, "page": parse(res["report"])}


def test_stream_values_come_back_unbiased_in_the_declared_unit(meters):
    rdir = Path(meters["out"])
    est = pq.read_table(rdir / "samples_units.parquet").to_pandas()
    raw = inputs.meters_frame()
    assert pq.read_schema(rdir / "samples_units.parquet").field("value").metadata == {
        b"unit": b"kW"}
    np.testing.assert_array_equal(est.t.to_numpy(), est.step.to_numpy() * 30.0)
    # each estimate has sd <= sqrt(worst var at ε/w = 2) x the range width (20 kW)
    sd = np.sqrt(square_wave_worst_variance(2.0)) * 20.0
    assert abs(est.value.mean() - raw.value.mean()) < 5 * sd / np.sqrt(len(est))
    # unbiased for every value, not only on average: E[estimate | x] = x, slope 1 (4 SE);
    # the raw reports' slope is 2b(p - q) = 0.57 at ε/w = 2
    x = raw.value.to_numpy()
    slope = np.polyfit(x, est.value.to_numpy(), 1)[0]
    assert abs(slope - 1) < 4 * sd / (np.std(x) * np.sqrt(len(x)))
    rec = pq.read_table(rdir / "reconstruction_units.parquet").to_pandas()
    rms_rec = np.sqrt(np.mean((rec.value_hat.to_numpy() - raw.value.to_numpy()) ** 2))
    rms_est = np.sqrt(np.mean((est.value.to_numpy() - raw.value.to_numpy()) ** 2))
    assert rms_rec < rms_est  # pooling periods beats single reports, in kW


def test_stream_report_states_charges_periods_and_span_in_units(meters):
    page = meters["page"]
    heads = page.heading_texts()
    assert heads[:4] == ["Release meters-1", "What the guarantee means", "Users",
                         "What each user was charged by this release"]
    assert "Reconstruction (CPR, post-processing: no budget)" in heads
    [summary] = page.table_after("What each user was charged")
    assert summary == {"users charged": "3", "min": "8", "median": "8", "max": "8"}
    [per_stream] = [t for t in page.tables_as_dicts() if t and "period" in t[0]]
    assert len(per_stream) == 3
    for row in per_stream:
        if row["status"] == "ok":
            steps, minutes = map(int, re.fullmatch(r"(\d+) steps \((\d+) min\)",
                                                   row["period"]).groups())
            assert minutes == 30 * steps
        else:
            assert row["period"] == "none" and "Warning" in page.text
    sd = np.sqrt(square_wave_worst_variance(2.0)) * 20.0
    shown = re.search(r"deviation of at most ([\d,.]+) kW", page.section_text("Error bounds"))
    assert float(shown.group(1).replace(",", "")) == pytest.approx(sd, rel=1e-3)
    assert "steps 0–239, 240 of the stream's 240 samples" in page.section_text("Plots")
    assert "one window of 4 steps (120 min)" in page.section_text("What the guarantee means")
    assert len(embedded_pngs(page)) == 1
