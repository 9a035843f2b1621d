"""Plain-language readings of a release's guarantee, in the domain's units.

The numbers depend only on public parameters (ε or ρ, w, the domain's units
and declared range, and a public curve duration), never on data. The
definitions are those of docs/mechanisms.md §1 and §2:

- ε-GP: Pr[M(q) ∈ S] ≤ e^{ε·d(q, q')} Pr[M(q') ∈ S], d the L2 distance
  (∫‖q(t) − q'(t)‖² dt)^½ in value unit × time unit^½ (for the sup metric,
  d = sup_t ‖q(t) − q'(t)‖ in the value unit).
- ρ-CGP: D_α(M(q) ‖ M(q')) ≤ α·ρ·d², which gives, for any δ, the
  (ε', δ) bound ε' = ρ·d² + 2·d·√(ρ·ln(1/δ)) (Bun & Steinke 2016, Prop. 1.3).
- ε-w-event LDP: any two streams that differ only inside one window of w
  consecutive steps are e^ε-indistinguishable; each sample costs ε/w.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from ledger import format_fraction, wevent_budget
from reports.render import num, quantity

DELTA = 1e-6  # the δ of the plain-language (ε', δ) reading of ρ-CGP


def ratio_text(exponent: float) -> str:
    """e^x as a readable likelihood ratio (``e^3 ≈ 20.09``, ``e^632 ≈ 10^274``)."""
    if exponent < 30:
        return f"e^{num(exponent, 3)} ≈ {num(math.exp(exponent), 3)}"
    return f"e^{num(exponent)} ≈ 10^{exponent / math.log(10):.0f}"


def _duration_text(duration: float, time_unit: str) -> str:
    seconds = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}.get(time_unit)
    text = f"{num(duration)} {time_unit}"
    if seconds is None:
        return text
    total = duration * seconds
    nice = (f"{num(total / 86400, 2)} d" if total >= 2 * 86400 else
            f"{num(total / 3600, 2)} h" if total >= 3600 else
            f"{num(total / 60, 2)} min" if total >= 60 else f"{num(total, 3)} s")
    return text if nice.endswith(f" {time_unit}") else f"{text} ({nice})"


def _sup_metric(definition: dict[str, Any]) -> bool:
    return definition.get("metric", "l2") == "dist_inf"


def hidden_shift(notion: str, amount: Fraction, definition: dict[str, Any],
                 duration: float | None) -> float:
    """The shift X (value unit) of a whole curve the guarantee hides at likelihood ratio e.

    A curve moved by X everywhere over `duration` T is at distance d = X·√T (L2;
    d = X for the sup metric, or when T is unknown). ε-GP: ε·d = 1; ρ-CGP: the
    (ε′, δ = `DELTA`) reading gives ε′ = 1. Public parameters only.
    """
    a = float(amount)
    root_t = 1.0 if _sup_metric(definition) or not duration else math.sqrt(duration)
    if notion == "gp":
        return 1.0 / (a * root_t)
    lnd = math.log(1 / DELTA)
    return (math.sqrt(lnd + 1) - math.sqrt(lnd)) / math.sqrt(a) / root_t


def shift_exponent(notion: str, amount: Fraction, definition: dict[str, Any],
                   duration: float | None, shift: float) -> float:
    """The exponent x of the likelihood ratio e^x bounding a whole-curve shift of `shift`.

    ε-GP: ε·d; ρ-CGP: ε′ = ρ·d² + 2·d·√(ρ·ln(1/δ)); d as in `hidden_shift`.
    """
    a = float(amount)
    root_t = 1.0 if _sup_metric(definition) or not duration else math.sqrt(duration)
    d = shift * root_t
    if notion == "gp":
        return a * d
    return a * d * d + 2 * d * math.sqrt(a * math.log(1 / DELTA))


def curves_reading(notion: str, amount: Fraction, definition: dict[str, Any],
                   duration: float | None,
                   duration_is: str = "the median duration of this release, public") -> str:
    """One paragraph: what ε-GP (or ρ-CGP) per curve protects, for a curve of `duration`.

    Args:
        notion: ``gp`` or ``cgp``.
        amount: ε (gp) or ρ (cgp) per curve.
        definition: the domain's public definition (`schemas.units.domain_record`).
        duration: a public curve duration in the domain's time unit (e.g. the
            median of the release), or None when no curve was released.
        duration_is: what `duration` is, for the text.
    """
    vu, tu = definition.get("value_unit", ""), definition.get("time_unit", "")
    a = float(amount)
    sup = _sup_metric(definition)
    metric = (f"the largest pointwise difference d = sup_t ‖q(t) − q′(t)‖ (in {vu})" if sup
              else f"the L2 distance d = (∫‖q(t) − q′(t)‖² dt)^½ (in {vu}·{tu}^½)")
    # A shift of X value units over a curve of duration T is at distance X·√T (L2) or X (sup).
    root_t = 1.0 if sup or not duration else math.sqrt(duration)
    span = "" if sup or not duration else (
        f" For a curve of {_duration_text(duration, tu)} ({duration_is}), shifting it by X "
        f"{vu} everywhere moves it d = X·√T = {num(root_t)}·X away.")
    if notion == "gp":
        x_e = hidden_shift(notion, amount, definition, duration)
        return (f"**What ε = {format_fraction(amount)} per curve protects.** ε-geo-privacy "
                f"w.r.t. {metric}: for any two curves at distance d, every output is at most "
                f"e^(ε·d) times more likely under one than under the other.{span} A shift of "
                f"{quantity(x_e, vu)} gives a likelihood ratio of at most {ratio_text(1.0)}; a "
                f"shift of {quantity(10 * x_e, vu)}, {ratio_text(10.0)}. So this release hides "
                f"differences of about {quantity(x_e, vu)} or less (over the whole curve); "
                f"larger ones are told apart more and more easily. A user with k curves is "
                f"protected at ε per curve (k·ε in total).")
    lnd = math.log(1 / DELTA)
    d_one = (math.sqrt(lnd + 1) - math.sqrt(lnd)) / math.sqrt(a)  # solves ρd² + 2d√(ρ lnd) = 1
    x_one = hidden_shift(notion, amount, definition, duration)
    e_ten = a * (10 * d_one) ** 2 + 20 * d_one * math.sqrt(a * lnd)
    return (f"**What ρ = {format_fraction(amount)} per curve protects.** ρ-concentrated "
            f"geo-privacy w.r.t. {metric}: for curves at distance d the outputs' Rényi "
            f"divergence of order α is at most α·ρ·d², so for δ = {DELTA:g} every output set "
            f"is at most e^(ε′) times more likely (up to δ) with ε′ = ρ·d² + "
            f"2·d·√(ρ·ln(1/δ)).{span} A shift of {quantity(x_one, vu)} gives ε′ = 1 (ratio "
            f"≈ 2.72); a shift of {quantity(10 * x_one, vu)}, ε′ = {num(e_ten, 3)}. A user "
            f"with k curves is protected at ρ per curve (k·ρ in total).")


def streams_reading(epsilon: Fraction, definition: dict[str, Any],
                    title: str = "Square Wave") -> str:
    """One paragraph: what ε per window of w steps protects, in the declared value range.

    `title` names the per-sample randomizer (the registry entry's ``title``).
    """
    w = int(definition.get("w") or 1)
    vu = definition.get("value_unit", "")
    lo, hi = (definition.get("value_range") or (0.0, 1.0))[:2]
    e = float(epsilon)
    step = definition.get("step")
    tu = definition.get("time_unit", "step")
    window = (f"{w} steps" if tu == "step" or step is None
              else f"{w} steps ({num(w * float(step))} {tu})")
    return (f"**What ε = {format_fraction(epsilon)} per window protects.** ε-w-event local "
            f"privacy: any two streams of a user that differ only inside one window of "
            f"{window}, by any values in the declared range [{num(lo)}, {num(hi)}] {vu}, are "
            f"{ratio_text(e)}-indistinguishable from everything released. Each sample is "
            f"randomized on its own with ε/w = {format_fraction(epsilon / w)} ({title}), so "
            f"any one value of the range can be told from any other only up to a likelihood "
            f"ratio of {ratio_text(e / w)}; a change spread over k separate windows is "
            f"protected at k·ε ({ratio_text(2 * e)} for two). Windows count across releases: a "
            f"later release of the same steps adds to the same windows. "
            f"{_budget_text(definition.get('wevent_budget'))}")


def _budget_text(budget: str | None) -> str:
    """Whose windows the cap bounds (`ledger.wevent_budget`), with its per-user reading."""
    if budget == "per_user":
        return (f"The budget is {wevent_budget.guarantee(budget)}: the steps of all of a "
                "user's streams in this domain add to the same windows.")
    return (f"The budget is {wevent_budget.guarantee(budget)} (the domain declares "
            "wevent_budget = \"per_stream\").")
