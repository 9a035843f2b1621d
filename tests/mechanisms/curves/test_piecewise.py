import numpy as np
import pytest

from mechanisms.curves._piecewise import SubPieces, check_curve, interpolate
from mechanisms.errors import MechanismParameterError
from mechanisms.metrics import l2_distance, l2_norm


def test_check_curve_shapes_and_errors():
    t, v = check_curve([10, 20, 30], [1.0, 2.0, 3.0])
    assert v.shape == (3, 1)
    with pytest.raises(MechanismParameterError, match="strictly increasing"):
        check_curve([1, 1, 2], [0, 0, 0])
    with pytest.raises(MechanismParameterError, match="NaN"):
        check_curve([1, 2, 3], [0, np.nan, 0])
    with pytest.raises(MechanismParameterError, match="at least 2"):
        check_curve([1], [0])
    with pytest.raises(MechanismParameterError, match="shape"):
        check_curve([1, 2, 3], np.zeros((2, 2)))


def test_error_messages_do_not_leak_values():
    with pytest.raises(MechanismParameterError) as err:
        check_curve([1.0, 3.0, 2.0], [123456.789, 2.0, 3.0])
    assert "123456" not in str(err.value)


def test_l2_distance_closed_form_on_10_60():
    # a(t) = 2t + 1, b(t) = 0 on [10, 60]: ∫(2t+1)^2 = [(2t+1)^3/6]
    t = np.linspace(10, 60, 7)
    a = 2 * t + 1
    expected = np.sqrt((121**3 - 21**3) / 6)
    assert l2_distance(t, a, np.zeros_like(a)) == pytest.approx(expected, rel=1e-13)
    assert l2_norm(t, a) == pytest.approx(expected, rel=1e-13)


def test_l2_distance_vector_and_kinks():
    # triangle |t| on [-1, 1] in both coordinates: ∫ 2 t^2 = 4/3
    t = np.array([-1.0, 0.0, 1.0])
    a = np.c_[np.abs(t), np.abs(t)]
    assert l2_distance(t, a, np.zeros_like(a)) == pytest.approx(np.sqrt(4 / 3), rel=1e-14)


def test_subpieces_cover_and_integrate_exactly():
    t = np.array([10.0, 13.0, 20.0, 41.0, 60.0])
    v = np.array([[0.0], [3.0], [-1.0], [2.0], [5.0]])
    edges = np.array([10.0, 15.0, 41.0, 60.0])
    p = SubPieces(t, v, edges)
    assert np.allclose(np.add.reduceat(p.right - p.left, p.starts), np.diff(edges))
    total = p.squared_norms().sum()
    fine = np.linspace(10, 60, 2_000_001)
    vals = interpolate(t, v, fine)[:, 0]
    assert total == pytest.approx(np.trapezoid(vals**2, fine), rel=1e-9)
