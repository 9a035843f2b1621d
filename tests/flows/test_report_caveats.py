"""The release report's warnings: a guarantee that hides almost nothing, a poor reconstruction.

The ECG of the demo (ε = 2000 per 10 s record in mV·s^½) hides a shift of
about 0.16 µV of a record whose beats span millivolts; Project-and-Privatize
with its default basis (Legendre degree 1) releases each record as a straight
line. Both must be said in the report, with the figure they rest on, and
neither on a release whose guarantee is meaningful at the data's scale.
Expected numbers are worked out by hand here, not read from the report code.
"""

from __future__ import annotations

import math
import tomllib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from data.loaders import ecg_curves
from flows.api import release_curves
from ledger import Ledger
from reports.caveats import curve_shapes
from reports.guarantee import hidden_shift, shift_exponent
from schemas.policy import parse_policy
from tests.flows.html_report import embedded_pngs, parse

REPO = Path(__file__).resolve().parents[2]
SCALE = "at the data's scale this guarantee protects almost nothing"
STRAIGHT = "the released curves are (near) straight lines"
NOISE = "the released curves are mostly noise"
CHECKS = "Scale and shape checks (released outputs only)"


def test_shapes_by_hand():
    # two curves in one array: a line and a tent, each on t = 0, 1, 2 (trapezoid weights
    # 1/2, 1, 1/2): the line's mean is 1 and its variance (1/2·1 + 0 + 1/2·1)/2 = 1/2;
    # the tent's mean is 1/2, its variance 1/4 and its covariance with t is 0.
    t = np.array([0.0, 1.0, 2.0, 0.0, 1.0, 2.0])
    v = np.array([[0.0], [1.0], [2.0], [0.0], [1.0], [0.0]])
    spread, straight = curve_shapes(t, v, np.array([0, 3]))
    assert spread == pytest.approx([math.sqrt(0.5), 0.5])
    assert straight == pytest.approx([1.0, 0.0])
    # two columns: a line in x and a constant y: all of the variation is straight
    spread, straight = curve_shapes(t[:3], np.column_stack([t[:3], np.ones(3)]), np.array([0]))
    assert spread == pytest.approx([math.sqrt(0.5)]) and straight == pytest.approx([1.0])


def test_the_hidden_shift_is_the_reading_s():
    ecg = {"value_unit": "mV", "time_unit": "s"}
    # ε·X·√T = 1 with ε = 2000, T = 10 s: X = 1/(2000·√10) mV = 0.158 µV
    assert hidden_shift("gp", Fraction(2000), ecg, 10.0) == pytest.approx(1.5811388e-4)
    assert shift_exponent("gp", Fraction(2000), ecg, 10.0, 0.01) == pytest.approx(
        2000 * 0.01 * math.sqrt(10))
    # ρ-CGP: ε′ = ρd² + 2d√(ρ ln 1e6) = 1 at the hidden shift
    x = hidden_shift("cgp", Fraction(1, 2), ecg, 4.0)
    assert shift_exponent("cgp", Fraction(1, 2), ecg, 4.0, x) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("caveats")
    with open(REPO / "data" / "policy.toml", "rb") as fh:
        ecg = tomllib.load(fh)["domains"]["ecg"]
    policy = {"domains": {"ecg": ecg, "rings": {
        "kind": "curves", "notion": "gp", "cap": "10", "time_unit": "s",
        "value_columns": ["x", "y"], "value_unit": "m",
        "public": {"duration": True, "points": True}}}}
    ledger = root / "ledger.duckdb"
    Ledger.init(ledger).apply_policy(parse_policy(policy))
    records = ecg_curves()
    csv = root / "ecg.csv"
    records[records["user_id"] < "mitbih208_06"].to_csv(csv, index=False)
    return {"root": root, "ledger": ledger, "ecg": csv}


def _release(work, path, domain, epsilon, **kw):
    res = release_curves(path, domain=domain, epsilon=epsilon, ledger_path=work["ledger"],
                         out_dir=work["root"] / "out", **kw)
    page = parse(res["report"])
    return res, page, page.section_text(CHECKS)


def test_the_demo_s_ecg_guarantee_is_called_almost_nothing(work):
    _, page, text = _release(work, work["ecg"], "ecg", "2000",
                             mechanism="project_and_privatize",
                             options={"basis": "sinc", "n_terms": 500, "spacing": 0.02,
                                      "first": 0})
    assert SCALE in text and STRAIGHT not in text and NOISE not in text
    assert "0.1581 µV" in text  # the guarantee reading's number, compared
    row = page.table_after(CHECKS)[0]
    value, unit = row["released curves' spread (median RMS about the mean)"].split()
    spread = float(value.replace(",", "")) * {"mV": 1.0, "µV": 1e-3}[unit]
    assert 0.1 < spread < 2.0  # millivolts: the records' beats, not the 0.16 µV hidden
    assert any(i.get("alt") == "the guarantee against the data's scale" for i in page.images)
    embedded_pngs(page)
    order = page.heading_texts()
    assert order.index(CHECKS) == order.index("What the guarantee means") + 1


def test_a_straight_line_release_of_the_ecg_says_so(work):
    # the case: project_and_privatize with its default basis (Legendre degree 1)
    _, page, text = _release(work, work["ecg"], "ecg", "2000",
                             mechanism="project_and_privatize")
    assert STRAIGHT in text and "legendre" in text
    assert "For 6 of the 6 measured released curves" in text
    assert any(i.get("alt") == "shape checks of the released curves" for i in page.images)


def _rings(path: Path) -> Path:
    """Six users, one circle of radius 100 m each over 100 s (RMS about the centre: 100 m)."""
    t = np.linspace(0.0, 100.0, 201)
    frames = [pd.DataFrame({"user_id": f"u{u}", "curve_id": "c0", "t": t,
                            "x": 100 * np.cos(2 * np.pi * t / 100 + u),
                            "y": 100 * np.sin(2 * np.pi * t / 100 + u)}) for u in range(6)]
    pd.concat(frames).to_csv(path, index=False)
    return path


def test_no_warning_where_the_guarantee_is_meaningful(work):
    # ε = 0.05 over 100 s hides a 2 m shift (1/(0.05·10)): 2% of the rings' 100 m,
    # above the 1% line; Legendre degree 3 per column (8 coefficients) keeps the
    # noise near 8·2 = 16 m RMS, far from half of the released variance.
    _, page, text = _release(work, _rings(work["root"] / "rings.csv"), "rings", "0.05",
                             mechanism="project_and_privatize",
                             options={"basis": "legendre", "degree": 3})
    assert SCALE not in text and STRAIGHT not in text and NOISE not in text
    assert "No warning" in text
    assert not any(i.get("alt", "").startswith(("the guarantee against", "shape checks"))
                   for i in page.images)


def test_noise_is_called_noise(work):
    # ε = 0.002: the noise's RMS is about 8/(0.002·10) = 400 m against rings of 100 m
    _, _, text = _release(work, _rings(work["root"] / "rings.csv"), "rings", "0.002",
                          mechanism="project_and_privatize",
                          options={"basis": "legendre", "degree": 3})
    assert NOISE in text and SCALE not in text
