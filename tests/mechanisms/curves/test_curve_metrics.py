import ast
from pathlib import Path

import numpy as np
import pytest

from mechanisms.curves import least_squares
from mechanisms.metrics import l2_distance, l2_error, normalized_l2_error, normalized_squared_error

ROOT = Path(__file__).resolve().parents[3]


def test_l2_error_exact_for_piecewise_fit_matches_pointwise_difference():
    t = np.linspace(10, 60, 51)
    v = np.c_[np.sin(t / 3), np.cos(t / 5)]
    fit = least_squares(t, v, "legendre", degree=1, breakpoints=[10, 25, 60])
    # the fit is linear on [10, 25] and on [25, 60] (knots of t), so per-segment l2_distance
    # on the grid is exact; the left segment is evaluated with its own basis at t = 25
    c = fit.coefficients
    basis = fit.basis()
    left_t = t[t <= 25]
    right_t = t[t >= 25]
    left_f = basis.values(left_t, 10.0, 25.0) @ c[0]
    right_f = basis.values(right_t, 25.0, 60.0) @ c[1]
    ref = np.hypot(l2_distance(left_t, v[t <= 25], left_f),
                   l2_distance(right_t, v[t >= 25], right_f))
    assert l2_error(t, v, fit) == pytest.approx(ref, rel=1e-12)
    n2 = normalized_l2_error(t, v, fit)
    assert normalized_squared_error(t, v, fit) == pytest.approx(n2**2)


def test_curves_core_is_pure():
    allowed = {"numpy", "scipy", "mechanisms", "__future__"}
    std = {"math", "dataclasses", "fractions", "functools", "typing", "collections", "numbers",
           "bisect", "abc"}
    files = list((ROOT / "mechanisms" / "curves").glob("*.py"))
    files.append(ROOT / "mechanisms" / "metrics" / "curves.py")
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in allowed | std, f"{path.name} imports {name}"


def test_round_trip_through_plain_arrays():
    import json

    from mechanisms.curves import PrivateFunction, privfuncseg, project_and_privatize

    t = np.linspace(10, 60, 300)
    v = np.c_[np.sin(t / 3), np.cos(t / 5)]
    for f in (privfuncseg(t, v, epsilon=3, rng=np.random.default_rng(0)),
              project_and_privatize(t, v, "sinc", n_terms=20, spacing=2.5, epsilon=3,
                                    rng=np.random.default_rng(0))):
        stored = f.to_arrays()
        json.dumps(stored["diagnostics"])
        json.dumps(stored["cost"])
        g = PrivateFunction.from_arrays(stored)
        grid = np.linspace(0, 70, 333)
        assert np.array_equal(g.evaluate(grid), f.evaluate(grid))


def test_l2_error_sinc_domain_end_not_overshot():
    # 799.2·333/333 rounds above 799.2: the fine grid of l2_error must still end at T
    from scipy import integrate

    t = np.linspace(0.0, 799.2, 21)
    v = np.sin(t / 40.0)
    fit = least_squares(t, v, "sinc", n_terms=5, spacing=0.8 * 6, first=80)  # 4.800000000000001
    ref = integrate.quad(lambda x: (np.interp(x, t, v) - fit.evaluate(np.array([x]))[0, 0]) ** 2,
                         0.0, 799.2, points=t[1:-1], limit=500)[0]
    assert l2_error(t, v, fit) == pytest.approx(np.sqrt(ref), rel=1e-8)
