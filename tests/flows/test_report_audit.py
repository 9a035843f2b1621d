"""The compliance audit report, read as a compliance officer would (parsed HTML, CSV, JSON).

The ledger is written through its own API with a known history; every number
the report shows is checked against that history (theory), not the report code.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import tomllib
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from flows.audit_flow import audit
from flows.cli import app
from ledger import Ledger, Request, Settlement
from mechanisms.cost import Cost, CostItem
from schemas.policy import load_policy, parse_policy
from tests.flows import report_inputs as inputs
from tests.flows.html_report import embedded_pngs, parse

ACTOR = "ops-alice@harbor"
HOSTILE = "<img src=x onerror=alert(1)>|**bold**_`tick`"


def _charge(led: Ledger, rid: str, per_user: dict[str, int], eps: Fraction) -> list[str]:
    """Reserve and settle `per_user[u]` curves of `eps` each; return the denied users."""
    reqs = [Request(u, "geo", step=f"curve:{i}", amount=eps)
            for u, n in per_user.items() for i in range(n)]
    res = led.reserve(rid, reqs, mechanism="privfuncseg", parameters={"amount": str(eps)})
    led.settle(rid, [Settlement(d.user_id, "geo", d.step, Cost("gp", eps, (
        CostItem("all", "gp", eps),))) for d in res.admitted])
    led.record_release(rid, {"parameters": {"notion": "gp", "amount": str(eps)},
                             "counts": {"users_released": len({d.user_id for d in res.admitted}),
                                        "users_denied": len({d.user_id for d in res.denied}),
                                        "users_rejected": 0}}, "settled")
    return sorted({d.user_id for d in res.denied})


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """r1: u1 2x1/2, u2 1x1/2; r2: u1 2x1, u2 1x1, u3 1x1; r3: u1 2x1 (denied), u2 1x1,
    and the hostile id asks 5 (denied); then the cap is lowered from 4 to 2."""
    root = tmp_path_factory.mktemp("audit")
    policy = inputs.write_policy(root / "policy.toml")
    path = root / "ledger.duckdb"
    Ledger.init(path).apply_policy(load_policy(policy))
    led = Ledger(path, actor=ACTOR)
    assert _charge(led, "r1", {"u1": 2, "u2": 1}, Fraction(1, 2)) == []
    assert _charge(led, "r2", {"u1": 2, "u2": 1, "u3": 1}, Fraction(1)) == []
    assert _charge(led, "r3", {"u1": 2, "u2": 1}, Fraction(1)) == ["u1"]
    assert _charge(led, "r4", {HOSTILE: 1}, Fraction(5)) == [HOSTILE]
    lowered = inputs.POLICY.replace('cap = "4"', 'cap = "2"', 1)
    led.apply_policy(parse_policy(tomllib.loads(lowered), "lowered"), reason="DPO ticket 7")
    out = root / "out"
    res = audit(ledger_path=str(path), out_dir=str(out))
    return {"path": path, "out": out / "audit", "res": res, "page": parse(res["report"])}


def test_header_names_the_ledger_its_head_and_the_audit_time(history):
    text = history["page"].text
    assert f"Ledger: {history['path'].resolve()}" in text
    assert re.search(r"Audited at: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(local time ", text)
    con = duckdb.connect(str(history["path"]), read_only=True)
    seq, digest = con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
    con.close()
    assert f"Ledger head: seq {seq}, hash {digest}" in text
    assert re.search(rf"VERIFIED\s*: {seq} entries checked", text)


def test_every_section_a_compliance_officer_signs_is_there(history):
    heads = history["page"].heading_texts()
    for h in ("Hash chain and balances", "Domains", "Domain geo", "Budget spent over time",
              "Spend per account against the cap", "Accounts within 10% of the cap",
              "Denials over time", "Denials per user", "Releases",
              "Policy in force (the ledger's domains)", "Files"):
        assert h in heads, h
    assert "No release has charged domain meters yet." in history["page"].text


def test_budget_over_time_is_per_account_after_each_release(history):
    rows = history["page"].table_after("Budget spent over time")
    got = [(r["release_id"], Fraction(r["charged min"]), Fraction(r["charged median"]),
            Fraction(r["charged max"]), int(r["accounts"]), float(r["spent median"]),
            float(r["spent max"]), Fraction(r["cap"])) for r in rows]
    half = Fraction(1, 2)
    # r4 charged nobody (its only request was denied): no admitted charge, balances unchanged
    assert got == [("r1", half, half, 1, 2, 0.5, 1.0, 4),
                   ("r2", 1, 1, 2, 3, 1.5, 3.0, 4),
                   ("r3", 1, 1, 1, 3, 2.5, 3.0, 4),
                   ("r4", 0, 0, 0, 4, 1.0, 3.0, 4)]  # the denied user's account holds 0


def test_lowered_cap_shows_accounts_above_it_apart_from_near_cap(history):
    page = history["page"]
    [geo] = [r for r in page.table_after("Domains") if r["domain"] == "geo"]
    assert geo["cap"] == "2" and geo["accounts above cap"] == "2"
    # u1 (3) and u2 (2.5) are above the lowered cap 2: a state of their own, not "near";
    # u3 (1 of 2) has half its cap left
    assert "No account of geo has less than 10% of its cap left." in page.text
    above = page.table_after("Accounts above a lowered cap")
    assert {(r["user_id"], r["spent"], r["cap"]) for r in above} == {("u1", "3", "2"),
                                                                      ("u2", "2.5", "2")}
    assert re.search(r"The cap was lowered after these accounts were charged \(seq \d+, "
                     r"[\d-]+ [\d:]+ UTC: 4 → 2\)", page.text)


def test_policy_change_log_comes_from_the_chain(history):
    rows = [r for r in history["page"].table_after("Policy change log") if r["domain"] == "geo"]
    assert [r["cap"] for r in rows] == ["4", "4 → 2"]
    assert rows[-1]["accounts above cap"] == "2" and rows[-1]["actor"] == ACTOR
    assert rows[-1]["source"] == "lowered" and rows[-1]["reason"] == "DPO ticket 7"
    assert rows[0]["reason"] == ""  # applied without --reason


def test_the_signed_head_on_the_page_verifies_with_the_public_key(history):
    from ledger.signing import head_signature_ok

    head = Ledger(history["path"]).head()
    text = history["page"].text
    sig = re.search(r"Head signature \(Ed25519\): ([0-9a-f]+)\s*; signing key fingerprint "
                    r"([0-9a-f]{64})", text)
    assert sig.group(1) == head.signature and sig.group(2) == head.key_fingerprint
    assert head_signature_ok(bytes.fromhex(head.public_key), sig.group(1), head.ledger_id,
                             head.schema_version, head.seq, head.hash, head.counter)


def test_an_auditor_without_the_noise_key_gets_the_same_figures(history, tmp_path):
    shutil.copy(history["path"], tmp_path / "ledger.duckdb")
    shutil.copy(str(history["path"]) + ".pub", tmp_path / "ledger.duckdb.pub")
    res = audit(ledger_path=str(tmp_path / "ledger.duckdb"), out_dir=str(tmp_path / "out"))
    page = parse(res["report"])
    assert "(read as an auditor: public key only)" in page.text
    assert "Not checked without the noise key:" in page.text
    assert page.table_after("Budget spent over time") == history["page"].table_after(
        "Budget spent over time")


def test_denials_are_counted_per_user_not_per_curve(history):
    rows = history["page"].table_after("Denials per user")
    by_user = {r["user_id"]: r for r in rows}
    assert by_user["u1"]["denied_requests"] == "2" and by_user["u1"]["releases"] == "1"
    assert set(by_user) == {"u1", HOSTILE}


def test_hostile_ids_are_shown_verbatim_never_interpreted(history):
    page = history["page"]
    # the id's <img>, **, _ and ` stay text: the cell holds exactly the id, no element is made
    cells = {r["user_id"] for r in page.table_after("Denials per user")}
    assert HOSTILE in cells
    assert all(img["src"].startswith("data:image/png") for img in page.images)
    assert page.tags.count("img") == len(page.images) == 3


def test_releases_table_has_time_actor_mechanism_and_user_counts(history):
    rows = {r["release_id"]: r for r in history["page"].table_after("Releases")}
    assert set(rows) == {"r1", "r2", "r3", "r4"}
    r3 = rows["r3"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", r3["time (UTC)"])
    assert r3["actor"] == ACTOR and r3["mechanism"] == "privfuncseg" and r3["notion"] == "gp"
    assert r3["requested"] == "1 per curve"
    assert r3["users released / denied / rejected"] == "1 / 1 / 0"
    assert r3["charged per user min / median / max"] == "1 / 1 / 1"


def test_tables_are_also_csv_and_json(history):
    out = history["out"]
    with open(out / "releases.csv", newline="") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert [r["release_id"] for r in csv_rows] == ["r1", "r2", "r3", "r4"]
    with open(out / "denials_per_user.csv", newline="") as fh:
        assert {r["user_id"] for r in csv.DictReader(fh)} == {"u1", HOSTILE}
    data = json.loads((out / "audit.json").read_text())
    assert data["ok"] is True and data["users_denied"] == 2 and data["denials"] == 3
    assert data["ledger"] == str(history["path"].resolve())
    assert data["head"] == Ledger(history["path"]).head().to_dict()
    with open(out / "accounts_above_cap.csv", newline="") as fh:
        assert {r["user_id"] for r in csv.DictReader(fh)} == {"u1", "u2"}
    with open(out / "policy_changes.csv", newline="") as fh:
        assert [r["cap"] for r in csv.DictReader(fh) if r["domain"] == "geo"] == ["4", "4 → 2"]
    assert len(data["spend_over_time"]) == 4


def test_audit_page_alone_renders_every_image(history, tmp_path):
    lone = tmp_path / "inbox" / "audit.html"
    lone.parent.mkdir()
    shutil.copy(history["res"]["report"], lone)
    page = parse(lone)
    # geo: budget over time, spend per account, denials per day; meters: nothing charged
    assert len(embedded_pngs(page)) == 3
    assert 'src="plots/' not in lone.read_text()


def test_a_tampered_ledger_is_reported_failed_and_exits_4(history, tmp_path):
    path = tmp_path / "ledger.duckdb"
    shutil.copy(history["path"], path)
    for suffix in (".key", ".sign", ".pub", ".counter"):  # the operator's keys, next to it
        shutil.copy(str(history["path"]) + suffix, str(path) + suffix)
    con = duckdb.connect(str(path))
    con.execute("UPDATE entries SET amount = amount / 2 WHERE seq = 1")
    con.close()
    r = CliRunner().invoke(app, ["audit", "--ledger", str(path), "--out", str(tmp_path / "o")])
    assert r.exit_code == 4
    page = parse(tmp_path / "o" / "audit" / "report.html")
    assert "FAILED" in page.text and "do not sign this audit" in page.text


def test_an_empty_ledger_audits_to_headers_and_plain_sentences(tmp_path):
    path = tmp_path / "ledger.duckdb"
    Ledger.init(path).apply_policy(load_policy(inputs.write_policy(tmp_path / "policy.toml")))
    res = audit(ledger_path=str(path), out_dir=str(tmp_path / "out"))
    page = parse(res["report"])
    assert page.images == [] and "No request was denied." in page.text
    for dom in ("geo", "plain", "meters"):
        assert f"No release has charged domain {dom} yet." in page.text
    for name in ("releases", "denials_per_user", "accounts_near_cap", "spend_over_time"):
        with open(tmp_path / "out" / "audit" / f"{name}.csv", newline="") as fh:
            reader = csv.DictReader(fh)
            assert reader.fieldnames and list(reader) == [], name


# ------------------------------------------- issue #29: causes, filters, checkpoints, JSON schema

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "audit.schema.json")
                    .read_text(encoding="utf-8"))


def _keys(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from _keys(v)


def test_audit_json_matches_the_documented_schema(history):
    jsonschema = pytest.importorskip("jsonschema")
    data = json.loads((history["out"] / "audit.json").read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    data.pop("head")  # the signed head's own fields
    bad = [k for k in _keys(data) if not re.fullmatch(r"[a-z][a-z0-9_]*", k)]
    assert bad == []
    # numbers are numbers: u1 spent 1 + 2 = 3 of the lowered cap 2
    u1 = next(a for a in data["accounts_above_cap"] if a["user_id"] == "u1")
    assert (u1["spent"], u1["spent_exact"], u1["cap"], u1["unit"]) == (3.0, "3", 2.0, "ε")


def test_denials_show_their_cause_and_reason(history):
    # u1 asked 2 x 1 with 3 of 4 spent, the hostile id 5 of 4: both "over cap"
    [cause] = history["page"].table_after("Why requests were denied")
    assert (cause["domain"], cause["cause"], cause["requests"], cause["users"]) == (
        "geo", "over_cap", "3", "2")
    data = json.loads((history["out"] / "audit.json").read_text())
    u1 = next(r for r in data["denials_per_user"] if r["user_id"] == "u1")
    assert u1["causes"] == {"over_cap": 2}
    assert "spent 3 + requested 2 > cap 4" in u1["last_reason"]
    assert "denials_per_user.csv" in history["page"].text


def _collect(history, **kw):
    from ledger.audit_data import collect

    return collect(str(history["path"]), **kw)


def test_filters_narrow_the_listings_never_the_verification(history, tmp_path):
    from ledger.filters import Filter
    from reports.audit_report import write_audit_report

    full = _collect(history)
    u2 = _collect(history, where=Filter(user="u2"))
    assert u2.verification.entries_checked == full.verification.entries_checked
    assert u2.verification.ok
    # u2 was charged in r1, r2, r3 and never denied
    assert [r["release_id"] for r in u2.releases] == ["r1", "r2", "r3"]
    assert u2.denials == [] and {b["user_id"] for b in u2.balances} == {"u2"}
    r3 = _collect(history, where=Filter(release="r3"))
    assert [(d["user_id"], d["denied_requests"]) for d in r3.denials] == [("u1", 2)]
    res = write_audit_report(r3, tmp_path)
    assert res["filter"]["release"] == "r3"
    assert "Narrowed listings" in parse(res["report"]).text
    later = _collect(history, where=Filter.parse(since="2999-01-01"))
    assert later.releases == [] and later.policy_history == []


def _seq_hash(history, release):
    con = duckdb.connect(str(history["path"]), read_only=True)
    seq, digest = con.execute("SELECT seq, hash FROM entries WHERE release_id = ? "
                              "ORDER BY seq DESC LIMIT 1", [release]).fetchone()
    con.close()
    return seq, digest


def test_since_checkpoint_lists_what_changed_after_the_kept_head(history):
    seq, digest = _seq_hash(history, "r2")
    data = _collect(history, since_checkpoint=f"{seq}:{digest}")
    s = data.since
    assert data.verification.ok and s["in_chain"]
    assert [r["release_id"] for r in s["releases"]] == ["r3", "r4"]
    # r3 charged u2 one curve of 1 (1.5 -> 2.5); u1 and the hostile id were denied
    [geo] = s["charges"]
    assert (geo["domain"], geo["accounts_charged"], geo["balance_increase_max"]) == ("geo", 1, 1)
    assert [(d["domain"], d["denied_requests"], d["users_denied"]) for d in s["denials"]] == [
        ("geo", 3, 2)]
    assert [(p["domain"], p["cap_before"], p["cap_after"]) for p in s["policy_changes"]] == [
        ("geo", 4, 2)]


def test_a_checkpoint_not_in_the_chain_fails_the_audit_with_exit_4(history, tmp_path):
    seq, _ = _seq_hash(history, "r2")
    data = _collect(history, since_checkpoint=f"{seq}:{'0' * 64}")
    assert not data.verification.ok and not data.since["in_chain"]
    r = CliRunner().invoke(app, ["audit", "--ledger", str(history["path"]), "--out",
                                 str(tmp_path), "--since-checkpoint", f"{seq}:{'0' * 64}"])
    assert r.exit_code == 4, r.output
    assert "is not in this ledger's chain" in parse(tmp_path / "audit" / "report.html").text


def test_a_forged_checkpoint_is_not_reported_in_the_chain(history, tmp_path):
    """A checkpoint whose seq and hash are in the chain but whose signature is forged."""
    seq, _ = _seq_hash(history, "r2")
    cp = tmp_path / "cp.json"
    Ledger(history["path"]).checkpoint(cp)
    doc = json.loads(cp.read_text())
    doc["signature"] = ("00" if doc["signature"][:2] != "00" else "11") + doc["signature"][2:]
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    data = _collect(history, since_checkpoint=str(forged))
    assert not data.verification.ok
    assert not data.since["in_chain"]
    assert "signature does not verify" in data.since["problem"]
    r = CliRunner().invoke(app, ["audit", "--ledger", str(history["path"]), "--out",
                                 str(tmp_path), "--since-checkpoint", str(forged)])
    assert r.exit_code == 4, r.output
    assert "is not a head this ledger's key signed" in parse(
        tmp_path / "audit" / "report.html").text
    since = json.loads((tmp_path / "audit" / "audit.json").read_text())["since_checkpoint"]
    assert since["in_chain"] is False and "signature" in since["problem"]
    honest = _collect(history, since_checkpoint=str(cp))
    assert honest.verification.ok and honest.since["in_chain"]
    assert "problem" not in honest.since


@pytest.mark.parametrize("args, says", [
    (["--since", "2026-31-01"], "--since must be an ISO 8601"),
    (["--since", "2026-02-01", "--until", "2026-01-01"], "must be before --until"),
    (["--since-checkpoint", "no-such-file.json"], "no-such-file.json"),
])
def test_bad_audit_filters_exit_2_naming_the_flag(history, tmp_path, args, says):
    r = CliRunner().invoke(app, ["audit", "--ledger", str(history["path"]), "--out",
                                 str(tmp_path), *args])
    assert r.exit_code == 2 and says in r.output
