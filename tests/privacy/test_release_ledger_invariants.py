"""What a curve release charges, refunds and seeds, read back from the ledger.

Expected amounts come from the accounting model (ledger/README.md, docs/policy.md,
MECHANISMS.md Lemma C.1): a curve costs ε on a GP domain and ρ on a CGP
domain; an ε-GP mechanism on a CGP domain reserves ρ = ε²/2 per curve and
settles Σᵢ εᵢ²/2 over its GP sub-steps (εᵢ summing to at most ε), the
difference being refunded, exactly; the account's balance is what was
settled. The noise seed of a user is an HMAC of (release, user, the user's
data, the parameters) (docs/sampling.md), and the released coefficients are
rounded to multiples of 2^-20·Λ, Λ the smallest power of two ≥ the noise
scale 1/ε or 1/√(2ρ) (docs/sampling.md, "Output rounding").
"""

from __future__ import annotations

import shutil
from fractions import Fraction

import numpy as np
import pytest
from release_path import curve_frame, curves_domain, new_ledger, release_curves, run_release

from ledger import Ledger, Request
from mechanisms import registry
from schemas.errors import ParameterError
from tasks.privatize import CurveFraming, CurveSpec

#: registry entries whose release path this module checks (test_registry_coverage.py)
MECHANISMS_COVERED = registry.names("curves")

USERS = ("u1", "u2", "u3")


def _curves() -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    out = {}
    for i, user in enumerate(USERS):
        for c in ("a", "b"):
            t = np.linspace(0.0, 30.0 + 5 * i, 61)
            out[(user, c)] = (t, np.c_[20 * np.sin(t / 4 + i), t - 10.0 + (c == "b")])
    return out


def _by_user(entries, kind: str) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for e in entries:
        if e.kind == kind:
            out[e.user_id] = out.get(e.user_id, Fraction(0)) + e.amount
    return out


def _balances(ledger_path) -> dict[str, Fraction]:
    return {b["user_id"]: b["spent"] for b in Ledger(ledger_path).balances("tracks")}


@pytest.mark.parametrize("mechanism", registry.names("curves"))
def test_gp_mechanism_on_a_cgp_domain_is_charged_epsilon_squared_over_two(tmp_path, mechanism):
    eps = Fraction(3, 5)
    dom = curves_domain("cgp", metric=registry.get(mechanism).metric)
    rel = release_curves(tmp_path, mechanism, "gp", "3/5", {}, _curves(), domain=dom)
    entries = rel.ledger.entries
    reserves = [e for e in entries if e.kind == "reserve"]
    assert len(reserves) == 2 * len(USERS)
    for e in reserves:
        assert e.notion == "cgp"
        assert e.amount == eps * eps / 2  # Lemma C.1: ε-GP is ε²/2-CGP, and no less
        assert Fraction(e.detail["request_amount"]) == eps
    refunded_any = False
    for r in reserves:
        mine = [e for e in entries if (e.user_id, e.step) == (r.user_id, r.step)]
        settle = next(e for e in mine if e.kind == "settle")
        parts = settle.detail["breakdown"]
        assert {p["notion"] for p in parts} == {"gp"}
        spent = [Fraction(p["amount"]) for p in parts]
        assert sum(spent) <= eps
        assert settle.amount == sum((x * x / 2 for x in spent), Fraction(0))
        refunds = [e for e in mine if e.kind == "refund"]
        if settle.amount < r.amount:
            assert [e.amount for e in refunds] == [r.amount - settle.amount]
            refunded_any = True
        else:
            assert refunds == []
    if len({p["step"] for e in entries if e.kind == "settle"
            for p in e.detail["breakdown"]}) > 1:
        assert refunded_any  # several sub-steps: Σεᵢ²/2 < (Σεᵢ)²/2 is refunded
    settled = _by_user(entries, "settle")
    assert _balances(_ledger_file(tmp_path)) == settled
    assert settled == {u: _by_user(entries, "reserve")[u] - _by_user(entries, "refund").get(
        u, Fraction(0)) for u in USERS}


def _ledger_file(tmp_path):
    """The ledger file `release_curves` creates under `tmp_path`."""
    return tmp_path / "ledger" / "ledger.duckdb"


@pytest.mark.parametrize(("mechanism", "notion", "amount"), [
    ("privfuncseg", "gp", "1/3"), ("privfuncseg", "cgp", "2/7"),
    ("project_and_privatize", "cgp", "5/4"), ("baseline", "gp", "2")])
def test_curves_are_charged_their_amount_in_the_domains_notion(tmp_path, mechanism, notion,
                                                                 amount):
    dom = curves_domain(notion, metric=registry.get(mechanism).metric)
    rel = release_curves(tmp_path, mechanism, notion, amount, {}, _curves(), domain=dom)
    value = Fraction(amount)
    entries = rel.ledger.entries
    assert sorted(e.kind for e in entries) == ["reserve"] * 6 + ["settle"] * 6
    for e in entries:
        assert e.notion == notion and e.amount == value
        if e.kind == "settle":
            assert sum(Fraction(p["amount"]) for p in e.detail["breakdown"]) == value
    assert _balances(_ledger_file(tmp_path)) == {u: 2 * value for u in USERS}


def test_noise_seeds_cover_release_user_data_and_parameters(tmp_path):
    led = Ledger(new_ledger(tmp_path, curves_domain("gp")))
    params = {"mechanism": "privfuncseg", "amount": "1"}
    base = led.noise_seeds("r", ["u", "v"], ["fp", "fp"], params)
    assert base["u"] != base["v"]  # same data fingerprint, other user
    assert led.noise_seeds("r", ["u"], ["fp"], dict(params))["u"] == base["u"]
    assert led.noise_seeds("r", ["u"], ["fp2"], params)["u"] != base["u"]
    assert led.noise_seeds("r2", ["u"], ["fp"], params)["u"] != base["u"]
    assert led.noise_seeds("r", ["u"], ["fp"], {**params, "amount": "2"})["u"] != base["u"]


def test_same_release_id_on_other_data_draws_other_noise(tmp_path):
    """Two copies of one ledger (one key), one release id: only the changed user's noise changes."""
    dom = curves_domain("gp")
    first = new_ledger(tmp_path / "orig", dom)
    paths = []
    for name in ("a", "b"):
        shutil.copytree(first.parent, tmp_path / name / "ledger")
        paths.append(tmp_path / name / "ledger" / "ledger.duckdb")
    same = _curves()
    moved = _curves()
    t, v = moved[("u2", "a")]
    v = v.copy()
    v[30, 0] += 1e-6  # a change far below the noise (scale 1/ε = 1 m·s^½)
    moved[("u2", "a")] = (t, v)
    rels = [release_curves(tmp_path / n, "project_and_privatize", "gp", "1", {}, data,
                           ledger_path=p, domain=dom)
            for n, data, p in (("ra", same, paths[0]), ("rb", moved, paths[1]))]

    def coefs(rel, user):
        seg = rel.segments[rel.segments["user_id"] == user].sort_values(["curve_id", "segment"])
        return np.concatenate([np.asarray(c) for c in seg["coefficients"]])

    for user in ("u1", "u3"):  # unchanged data: the same seed, the same bytes
        assert coefs(rels[0], user).tobytes() == coefs(rels[1], user).tobytes()
    # changed data: another seed, so noise of its own scale, not the same noise moved by 1e-6
    assert np.max(np.abs(coefs(rels[0], "u2") - coefs(rels[1], "u2"))) > 0.05


@pytest.mark.parametrize(("mechanism", "notion", "amount", "scale"), [
    ("privfuncseg", "gp", "3/5", 5 / 3), ("project_and_privatize", "cgp", "2/9", 1.5),
    ("privfuncselect", "gp", "3", 1 / 3), ("baseline", "gp", "1/5", 5.0)])
def test_released_coefficients_are_on_the_noise_grid(tmp_path, mechanism, notion, amount,
                                                       scale):
    dom = curves_domain(notion, metric=registry.get(mechanism).metric)
    rel = release_curves(tmp_path, mechanism, notion, amount, {}, _curves(), domain=dom)
    power = 2.0 ** np.ceil(np.log2(scale))  # the smallest power of two >= the noise scale
    grid = power * 2.0**-20
    c = np.concatenate([np.asarray(x) for x in rel.segments["coefficients"]])
    assert c.size > 0 and np.any(c != 0)
    assert np.array_equal(c / grid, np.round(c / grid))
    assert not np.array_equal(c / (2 * grid), np.round(c / (2 * grid)))  # not a coarser grid


def test_a_user_is_admitted_up_to_the_cap_and_denied_above_it(tmp_path):
    """cap 2/3, ε = 1/3 per curve: two curves fill the cap exactly, three exceed it."""
    dom = curves_domain("gp", cap=Fraction(2, 3))
    curves = {k: v for k, v in _curves().items() if k[0] != "u3"}
    t, v = curves[("u2", "a")]
    curves[("u2", "c")] = (t, v + 1.0)
    path = new_ledger(tmp_path, dom)
    rel = run_release(tmp_path, dom, curve_frame(curves),
                      CurveSpec("privfuncseg", "1/3", None, framing=CurveFraming()),
                      ledger_path=path, strict=False)
    assert rel.admitted == {"u1"}
    assert [d["user_id"] for d in rel.denied] == ["u2"]
    assert set(rel.table("curves")["user_id"]) == {"u1"}  # the denied user is not released
    assert {e.kind for e in rel.ledger.entries if e.user_id == "u2"} == {"deny"}
    assert _balances(path) == {"u1": Fraction(2, 3), "u2": Fraction(0)}


def test_a_mechanism_of_another_metric_is_refused_before_anything_is_charged(tmp_path):
    """The dist_∞ baseline on an L2 domain: the release and the ledger both refuse it."""
    dom = curves_domain("gp", metric="l2")
    path = new_ledger(tmp_path, dom)
    with pytest.raises(ParameterError, match="no budget of this domain covers it"):
        release_curves(tmp_path / "r", "baseline", "gp", "1", {}, _curves(), domain=dom,
                       ledger_path=path)
    led = Ledger(path)
    with pytest.raises(ParameterError, match="nothing was charged"):
        led.reserve("direct", [Request("u1", "tracks", step="curve:a", notion="gp",
                                       amount=Fraction(1))],
                    mechanism="baseline", parameters={"test": "gp"})
    assert led.entry_range("direct") is None
    assert led.balances("tracks") == []
