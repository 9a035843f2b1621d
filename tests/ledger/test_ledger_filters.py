"""Auditor filters and units: `ledger history|denials|releases|balance` narrowed by user,
domain, release and time; every amount per account in the cap's unit (issue #29, item 1-3).

Every expected figure is computed by hand from the charges the test makes (policy of
`ledger_helpers`: ais gp cap 1 ε, ecg cgp cap 1/2 ρ, power w-event cap 1 ε per window of
w = 4 steps).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from ledger_helpers import POLICY, POLICY_TOML, copy_tree
from typer.testing import CliRunner

from flows.cli_ledger import ledger_app
from ledger import Ledger, Request, storage
from ledger.filters import Filter
from mechanisms.cost import StepRun
from schemas.policy import parse_policy

runner = CliRunner()

DAY1, DAY2, DAY3 = "2026-01-10 09:00:00.000000", "2026-01-20 09:00:00.000000", \
    "2026-02-01 00:00:00.000000"


def run(*args):
    return runner.invoke(ledger_app, [str(a) for a in args])


def _at(monkeypatch, when: str) -> None:
    monkeypatch.setattr(storage, "now", lambda: when)


@pytest.fixture(scope="module")
def dated_built(tmp_path_factory) -> Path:
    """The directory of `dated`'s ledger, built once per module."""
    root = tmp_path_factory.mktemp("dated")
    led = Ledger.init(root / "ledger.duckdb", actor="pytest")
    led.apply_policy(parse_policy(POLICY, source="test-policy"))
    with pytest.MonkeyPatch.context() as monkeypatch:
        _at(monkeypatch, DAY1)
        led.reserve("r1", [Request("a", "ais", amount=Fraction(1, 2)),
                           Request("b", "ais", amount=Fraction(1, 4))], mechanism="m",
                    parameters={})
        _at(monkeypatch, DAY2)
        led.reserve("r2", [Request("a", "ais", amount=Fraction(1, 2)),
                           Request("b", "ais", amount=3)], mechanism="m", parameters={})
        _at(monkeypatch, DAY3)
        led.reserve("r3", [Request("a", "ais", amount=Fraction(3, 4)),
                           Request("u", "power", notion="wevent", stream_id="s",
                                   runs=(StepRun(0, 8, Fraction(1, 8)),))],
                    mechanism="m", parameters={})
    return root


@pytest.fixture
def dated(dated_built, tmp_path: Path) -> Ledger:
    """Three releases on three days (a private copy of the module's ledger).

    r1 (DAY1): a 0.5 ε, b 0.25 ε (ais); r2 (DAY2): a 0.5 ε (ais, fills it), b 3 ε denied;
    r3 (DAY3, exactly midnight): a 0.75 ε denied (a has 0 left), power: u steps 0..8 at
    1/8 per step (1/2 per window of 4 steps, 1 over all 8 steps).
    """
    return Ledger(copy_tree(dated_built, tmp_path) / "ledger.duckdb", actor="pytest")


def test_bad_times_and_empty_ranges_name_the_flag():
    with pytest.raises(Exception, match="--since must be an ISO 8601"):
        Filter.parse(since="last tuesday")
    with pytest.raises(Exception, match="--until must be an ISO 8601"):
        Filter.parse(until="2026-13-01")
    with pytest.raises(Exception, match="--since .* must be before --until"):
        Filter.parse(since="2026-02-01", until="2026-02-01")
    # an offset is converted to UTC: 10:00+01:00 is 09:00 UTC
    assert Filter.parse(since="2026-01-10T10:00:00+01:00").since == \
        Filter.parse(since="2026-01-10 09:00").since


def test_denials_filtered_with_reasons_spent_and_cap(dated):
    den = dated.denials()
    assert [(d["release_id"], d["user_id"]) for d in den] == [("r2", "b"), ("r3", "a")]
    # b asked 3 with 1/4 spent of cap 1; a asked 3/4 with 1 spent
    assert [(d["requested"], d["spent"], d["cap"], d["unit"]) for d in den] == [
        (3, Fraction(1, 4), 1, "ε"), (Fraction(3, 4), 1, 1, "ε")]
    assert all(d["reason"] for d in den)
    assert [d["user_id"] for d in dated.denials(Filter(user="a"))] == ["a"]
    assert [d["release_id"] for d in dated.denials(Filter(release="r2"))] == ["r2"]
    assert dated.denials(Filter(domain="power")) == []
    # --until is exclusive: r3 at exactly 2026-02-01 00:00 is not before it
    jan = Filter.parse(since="2026-01-01", until="2026-02-01")
    assert [d["release_id"] for d in dated.denials(jan)] == ["r2"]
    # --since is inclusive
    assert [d["release_id"] for d in dated.denials(Filter.parse(since="2026-02-01"))] == ["r3"]


def test_history_by_user_release_and_time(dated):
    a = dated.history(where=Filter(user="a"))
    assert [(h["release_id"], h["kind"]) for h in a] == [("r1", "reserve"), ("r2", "reserve"),
                                                         ("r3", "deny")]
    rel = dated.history(where=Filter(release="r1"))
    assert sorted(h["user_id"] for h in rel) == ["a", "b"]
    jan20 = Filter.parse(user="a", since="2026-01-15", until="2026-01-21")
    assert [h["release_id"] for h in dated.history(where=jan20)] == ["r2"]


def test_wevent_history_is_per_window_like_its_cap(dated):
    [h] = dated.history("u")
    # 8 steps at 1/8: 1/2 in any window of w = 4 steps, 1 over all 8 steps
    assert (h["amount"], h["amount_all_steps"], h["balance_after"], h["cap"]) == (
        Fraction(1, 2), 1, Fraction(1, 2), 1)
    assert h["unit"] == "ε per window of 4 steps" and h["steps"] == "0:8"


def test_releases_per_account_never_summed_over_users(dated):
    rows = {(r["release_id"], r["domain"]): r for r in dated.releases()}
    assert set(rows) == {("r1", "ais"), ("r2", "ais"), ("r3", "ais"), ("r3", "power")}
    r1 = rows[("r1", "ais")]
    # a 1/2, b 1/4: max 1/2, mean 3/8 (a sum over users would say 3/4)
    assert (r1["accounts"], r1["spent_max"], r1["spent_mean"], r1["cap"], r1["unit"]) == (
        2, Fraction(1, 2), Fraction(3, 8), 1, "ε")
    r2 = rows[("r2", "ais")]
    assert (r2["users_admitted"], r2["users_denied"], r2["spent_max"]) == (1, 1, Fraction(1, 2))
    assert rows[("r3", "ais")]["accounts"] == 0 and rows[("r3", "ais")]["spent_max"] is None
    power = rows[("r3", "power")]
    assert (power["spent_max"], power["unit"]) == (Fraction(1, 2), "ε per window of 4 steps")
    # one user's figures
    [b1] = dated.releases(Filter(user="b", release="r1"))
    assert (b1["accounts"], b1["spent_max"], b1["spent_mean"]) == (1, Fraction(1, 4),
                                                                   Fraction(1, 4))


def test_balance_as_of_a_time_and_by_release(dated):
    now = {(b["user_id"], b["domain"]): b["spent"] for b in dated.balances()}
    assert now == {("a", "ais"): 1, ("b", "ais"): Fraction(1, 4),
                   ("u", "power"): Fraction(1, 2)}
    then = dated.balances(where=Filter.parse(until="2026-01-15"))
    assert {(b["user_id"], b["spent"], b["remaining"]) for b in then} == {
        ("a", Fraction(1, 2), Fraction(1, 2)), ("b", Fraction(1, 4), Fraction(3, 4))}
    assert {b["user_id"] for b in dated.balances(where=Filter(release="r3"))} == {"a", "u"}
    assert {b["user_id"] for b in dated.balances(where=Filter.parse(since="2026-01-15"))} == {
        "a", "b", "u"}
    assert [b["unit"] for b in dated.balances("power")] == ["ε per window of 4 steps"]


def test_a_filter_value_is_data_not_sql(dated):
    hostile = "a' OR '1'='1"
    assert dated.denials(Filter(user=hostile)) == []
    assert dated.history(where=Filter(release=hostile)) == []
    assert dated.releases(Filter(domain=hostile)) == []


@pytest.fixture(scope="module")
def cli_dated_built(tmp_path_factory) -> Path:
    """The directory of `cli_dated`, built once per module through the CLI."""
    root = tmp_path_factory.mktemp("cli-dated")
    pol = root / "policy.toml"
    pol.write_text(POLICY_TOML)
    path = root / "l.duckdb"
    assert run("init", "--ledger", path, "--policy", pol).exit_code == 0
    with pytest.MonkeyPatch.context() as monkeypatch:
        for day, rel, eps in (("2026-01-10", "r1", "0.5"), ("2026-01-20", "r2", "0.75")):
            _at(monkeypatch, f"{day} 09:00:00.000000")
            r = run("charge", "--ledger", path, "--user", "a", "--domain", "ais", "--epsilon",
                    eps, "--release", rel)
            assert r.exit_code in (0, 3), r.output
    return root


@pytest.fixture
def cli_dated(cli_dated_built, tmp_path: Path) -> Path:
    """A private copy of a ledger charged on two days through the CLI (a: 0.5 in r1, r2 denied)."""
    return copy_tree(cli_dated_built, tmp_path) / "l.duckdb"


def test_cli_filters_and_json(cli_dated):
    r = run("denials", "--ledger", cli_dated, "--format", "json", "--since", "2026-01-15")
    assert r.exit_code == 0, r.output
    [d] = json.loads(r.output)
    # a spent 1/2 of 1 in r1, asked 3/4 in r2
    assert (d["release_id"], d["requested"], d["requested_exact"], d["spent"], d["cap"]) == (
        "r2", 0.75, "0.75", 0.5, 1.0)
    assert d["unit"] == "ε" and d["created_at"] == "2026-01-20T09:00:00"
    r = run("denials", "--ledger", cli_dated, "--format", "json", "--until", "2026-01-15")
    assert json.loads(r.output) == []
    r = run("releases", "--ledger", cli_dated, "--format", "json", "--release", "r1")
    [rel] = json.loads(r.output)
    assert (rel["spent_max_exact"], rel["spent_mean"], rel["accounts"]) == ("0.5", 0.5, 1)
    assert "net_spent" not in rel
    r = run("history", "--ledger", cli_dated, "--user", "a", "--format", "json",
            "--since", "2026-01-10T09:00:00Z", "--until", "2026-01-10T09:00:01Z")
    assert [h["kind"] for h in json.loads(r.output)] == ["reserve", "settle"]


@pytest.mark.parametrize("cmd", ["history", "denials", "releases", "balance"])
@pytest.mark.parametrize("flag, value", [("--since", "yesterday"), ("--until", "2026-02-30")])
def test_cli_bad_dates_exit_2_naming_the_flag(cli_dated, cmd, flag, value):
    r = run(cmd, "--ledger", cli_dated, flag, value)
    assert r.exit_code == 2 and f"{flag} must be an ISO 8601" in r.output


def test_filters_never_hide_a_failed_verify(cli_dated):
    import duckdb

    con = duckdb.connect(str(cli_dated))
    con.execute("UPDATE entries SET amount = amount - 1 WHERE kind = 'reserve'")
    con.close()
    r = run("verify", "--ledger", cli_dated)
    assert r.exit_code == 4


SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "audit.schema.json")
                    .read_text(encoding="utf-8"))


@pytest.mark.parametrize("args, row", [
    (["balance"], "ledger_balance_row"),
    (["history", "--user", "a"], "ledger_history_row"),
    (["history"], "ledger_policy_history_row"),
    (["releases"], "ledger_release_row"),
    (["denials"], "ledger_denial_row"),
])
def test_listing_json_matches_the_documented_schema(cli_dated, args, row):
    jsonschema = pytest.importorskip("jsonschema")
    r = run(*args, "--ledger", cli_dated, "--format", "json")
    rows = json.loads(r.output)
    assert rows, r.output
    schema = {**SCHEMA, "type": "array", "items": {"$ref": f"#/$defs/{row}"}}
    for key in ("required", "properties", "additionalProperties"):
        schema.pop(key)
    jsonschema.Draft202012Validator(schema).validate(rows)


def test_audit_figures_of_one_user_in_a_wevent_release(led):
    from ledger.audit_data import collect

    # power: w = 4, cap 1. a: 1/8 per step over 0..8 (1/2 per window); b: 1/4 over 0..4 (1)
    led.reserve("r", [Request("a", "power", notion="wevent", stream_id="s",
                              runs=(StepRun(0, 8, Fraction(1, 8)),)),
                      Request("b", "power", notion="wevent", stream_id="s",
                              runs=(StepRun(0, 4, Fraction(1, 4)),))],
                mechanism="m", parameters={})
    [everyone] = collect(str(led.path)).releases
    assert (everyone["net_min"], everyone["net_max"]) == (Fraction(1, 2), 1)
    [only_a] = collect(str(led.path), where=Filter(user="a")).releases
    assert (only_a["net_min"], only_a["net_max"]) == (Fraction(1, 2), Fraction(1, 2))
