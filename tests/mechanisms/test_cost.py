"""Exact budgets: float conversions never exceed, the per-step share ε/w."""

from fractions import Fraction

from mechanisms import registry
from mechanisms.cost import exact, float_at_most


def test_float_at_most_never_exceeds():
    for v in [Fraction(1, 3), Fraction(1, 10), Fraction(2, 7), Fraction(1, 30), Fraction(5)]:
        f = float_at_most(v)
        assert Fraction(f) <= v
        assert v - Fraction(f) < Fraction(1, 10**15)


def test_per_step_share_is_exact_eps_over_w():
    assert registry.stream("square_wave").reservation(exact(0.1), w=4) == Fraction(1, 40)
