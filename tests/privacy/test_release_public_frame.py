"""Every registered curve mechanism releases on the public frame only (private N, fixed window).

On a domain with ``public.duration = false`` and ``public.points = false``
(docs/policy.md, docs/guarantees.md "What is released outside the noise"):
every curve lies on the domain's window [0, T] (a shorter one is held at its
last value), the output grid is ``grid_points`` evenly spaced times of
[0, T], and nothing is sized by a curve's number of samples N: PrivFuncSeg's
SVT depth is ⌈log₂ grid_points⌉, so it has at most 2^⌈log₂ grid_points⌉
dyadic segments of [0, T]; Project-and-Privatize and PrivFuncSelect fit one
basis on [0, T]; the baseline's k points are evenly spaced on [0, T]
(MECHANISMS.md 1.11: t_i = (i−1)T/(k−1)). One release holds curves that
differ only in N and in their (private) durations, so every output time
column and every fixed segment edge must be the same for all of them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from release_path import curves_domain, release_curves

from mechanisms import registry

T = 40.0
GRID = 40  # grid points: ⌈log₂ 40⌉ = 6 SVT levels, at most 64 dyadic segments
#: (samples N, duration) of each curve: N far above and below the grid, durations below T
SHAPES = {("u1", "a"): (4097, 25.0), ("u2", "a"): (300, 33.0), ("u3", "a"): (7, T),
          ("u3", "b"): (2000, 12.5)}

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = registry.names("curves")


def _curves() -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    out = {}
    for key, (n, end) in SHAPES.items():
        t = np.linspace(0.0, end, n)
        out[key] = (t, np.c_[10 * np.sin(1.3 * t), 3 * np.cos(t / 3) + t / 4])
    return out


@pytest.fixture(scope="module", params=registry.names("curves"))
def released(request, tmp_path_factory):
    name = request.param
    dom = curves_domain("gp", metric=registry.get(name).metric, window=T, grid_points=GRID)
    rel = release_curves(tmp_path_factory.mktemp(name), name, "gp", "1000", {}, _curves(),
                         domain=dom)
    return name, rel


def test_every_curve_is_evaluated_on_the_public_grid(released):
    _, rel = released
    grid = np.linspace(0.0, T, GRID)
    assert sorted(rel.curve_keys()) == sorted(SHAPES)
    for user, curve in rel.curve_keys():
        v = rel.values[(rel.values["user_id"] == user) & (rel.values["curve_id"] == curve)]
        assert v["t"].to_numpy().tobytes() == grid.tobytes()
    assert set(rel.curves["duration"]) == {T}  # the window, never a private duration


def test_segment_edges_are_functions_of_public_parameters(released):
    name, rel = released
    edges = {}
    for user, curve in rel.curve_keys():
        seg = rel.segments_of(user, curve)
        a, b = seg["t_start"].to_numpy(), seg["t_end"].to_numpy()
        assert a[0] == 0.0 and b[-1] == T  # on [0, T], whatever the curve's own duration
        assert np.array_equal(a[1:], b[:-1])
        edges[(user, curve)] = np.r_[a, b[-1]]
    if name == "privfuncseg":
        depth = math.ceil(math.log2(GRID))
        for e in edges.values():
            # dyadic edges of [0, T] at most ⌈log₂ grid_points⌉ levels deep
            assert len(e) - 1 <= 2**depth
            scaled = e / T * 2**depth
            assert np.array_equal(scaled, np.round(scaled))
        for d in rel.diagnostics:
            assert d["max_level"] == depth
        # the SVT is free to go as deep as the grid allows on these wiggly curves at
        # ε = 1000: a depth read from N (4097 samples: 13 levels) would go deeper
        assert max(len(e) - 1 for e in edges.values()) == 2**depth
    else:
        first = next(iter(edges.values()))
        for e in edges.values():
            assert e.tobytes() == first.tobytes()  # identical for every N and duration
        assert np.allclose(first, np.linspace(0.0, T, len(first)), rtol=0, atol=1e-12)
        if name == "baseline":
            assert {d["k"] for d in rel.diagnostics} == {len(first)}
