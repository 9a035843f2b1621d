"""Report building blocks: escaping, embedding, number wording, guarantee readings, sections.

Expected numbers are worked out by hand (or by an independent root finder) from
the definitions in docs/mechanisms.md, not taken from the code under test.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from reports.guarantee import curves_reading, streams_reading
from reports.kind_sections import reconstruction
from reports.release_sections import ReleaseContext
from reports.render import md_table, num, quantity, to_html
from tests.flows.html_report import parse

HOSTILE = ["<script>alert(1)</script>", "a | b | c", "**bold** _it_", "`code`",
           "[link](http://evil.example)", "&amp; &lt;", "back\\slash\\", "![img](x.png)",
           "line\nbreak", "#not-a-heading", "'; DROP TABLE entries; --"]


def test_table_cells_show_hostile_text_verbatim(tmp_path):
    rows = [{"user_id": h, "n": i} for i, h in enumerate(HOSTILE)]
    page_path = tmp_path / "p.html"
    page_path.write_text(to_html(md_table(rows, ["user_id", "n"]), "t", {}))
    page = parse(page_path)
    [table] = page.tables
    assert [r[0] for r in table[1:]] == [h.replace("\n", " ") for h in HOSTILE]
    assert not {"script", "a", "strong", "em", "code", "img", "h1"} & set(page.tags)


def test_images_are_embedded_and_a_missing_one_is_a_bug():
    png = b"\x89PNG\r\n\x1a\n" + b"0" * 100
    html = to_html("![a plot](plots/a.png)", "t", {"a.png": png})
    assert 'src="data:image/png;base64,' in html and "plots/a.png" not in html
    with pytest.raises(AssertionError, match="bug"):
        to_html("![a plot](plots/missing.png)", "t", {"a.png": png})


@pytest.mark.parametrize(("value", "text"), [
    (25840.5, "25,840"), (0.000158, "0.000158"), (1.174, "1.174"), (24110.0, "24,110"),
    (0.5, "0.5"), (12345678, "12,345,678"), (2.5e10, "2.500e+10")])
def test_numbers_read_plainly(value, text):
    assert num(value) == text


@pytest.mark.parametrize(("value", "unit", "text"), [
    (0.000158, "mV", "0.158 µV"), (0.129, "m", "129 mm"), (1290, "m", "1,290 m"),
    (25840, "MW", "25,840 MW"), (0.5, "s", "500 ms"), (3.2, "z-score", "3.2 z-score")])
def test_small_quantities_take_a_smaller_si_prefix(value, unit, text):
    assert quantity(value, unit) == text


GP_TRACKS = {"value_unit": "m", "time_unit": "s"}


def test_gp_reading_one_hour_track():
    # ε = 0.05 per curve, T = 3600 s: d = X·60, ratio e at X = 1/(0.05·60) = 1/3 m.
    text = curves_reading("gp", Fraction(1, 20), GP_TRACKS, 3600.0)
    assert "3,600 s (1 h)" in text and "d = X·√T = 60·X" in text
    assert "A shift of 333.3 mm gives a likelihood ratio of at most e^1 ≈ 2.72" in text
    assert "a shift of 3.333 m, e^10 ≈ 22,026" in text


def test_gp_reading_ecg_record_in_microvolts():
    # ε = 2000, T = 10 s, mV: X = 1/(2000·√10) mV = 0.1581 µV.
    text = curves_reading("gp", Fraction(2000), {"value_unit": "mV", "time_unit": "s"}, 10.0)
    assert "A shift of 0.1581 µV" in text


def test_cgp_reading_solves_the_zcdp_conversion():
    # ρ = 1/2, T = 4 s: ε'(d) = ρd² + 2d√(ρ ln(1/δ)) = 1 at δ = 1e-6, X = d/√T.
    rho, lnd = 0.5, math.log(1e6)
    d = max(np.roots([rho, 2 * math.sqrt(rho * lnd), -1]).real)
    text = curves_reading("cgp", Fraction(1, 2), GP_TRACKS, 4.0)
    expected = quantity(d / 2.0, "m")
    assert f"A shift of {expected} gives ε′ = 1" in text


def test_wevent_reading_names_the_window_in_time_and_the_range():
    d = {"w": 5, "value_unit": "MW", "value_range": [18000.0, 40000.0], "time_unit": "min",
         "step": 30}
    text = streams_reading(Fraction(5), d)
    assert "one window of 5 steps (150 min)" in text
    assert "[18,000, 40,000] MW" in text and "e^5 ≈ 148" in text
    assert "ε/w = 1 (Square Wave)" in text and "e^1 ≈ 2.72" in text


def _ctx(tmp_path: Path, periods: list[dict]) -> ReleaseContext:
    manifest = {"release_id": "r", "domain": "d", "units": "u", "parameters": {},
                "counts": {"users_released": 2}, "periods": periods,
                "policy": {"definition": {"time_unit": "h", "step": 0.5, "w": 4}}}
    return ReleaseContext(rdir=tmp_path, manifest=manifest, denied=[], rejected=[],
                          charges=None, balances=None, record=None)


def test_reconstruction_warns_where_cpr_fell_back(tmp_path):
    lines = "\n".join(reconstruction(_ctx(tmp_path, [
        {"user_id": "a", "stream_id": "s", "samples": 96, "period": 48, "status": "ok"},
        {"user_id": "b", "stream_id": "s", "samples": 96, "period": None,
         "status": "no significant period: constant"}])))
    assert "**Warning:** for 1 of 2 stream(s) CPR found no significant period" in lines
    assert "48 steps (24 h)" in lines


def test_reconstruction_without_fallback_has_no_warning(tmp_path):
    lines = "\n".join(reconstruction(_ctx(tmp_path, [
        {"user_id": "a", "stream_id": "s", "samples": 96, "period": 48, "status": "ok"}])))
    assert "Warning" not in lines
    assert reconstruction(_ctx(tmp_path, [])) == []
