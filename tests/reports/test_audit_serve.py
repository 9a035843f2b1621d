"""`privpipe audit serve` in a real browser (headless Chromium): every page, drill-down, safety.

The ledger is built here through the Ledger API; every expected figure comes
from what this file charged (or a direct SQL over the entries), never from
the code under test.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from flows.cli import app
from ledger import Ledger, Request, Settlement
from mechanisms.cost import Cost, CostItem
from schemas.policy import parse_policy
from tests.reports.browser import Server, chromium, dump_dom, parse, screenshot

ACTOR = "ops-alice@harbor"
HOSTILE = "<script>alert(1)</script>"
REASON = "board decision 7: raise the cap for the survey"
DOMAIN = {"kind": "curves", "public": {"duration": True, "points": True}, "notion": "gp"}


def _policy(cap: str):
    return parse_policy({"domains": {"geo": {**DOMAIN, "cap": cap}}})


def _charge(led: Ledger, rid: str, asks: dict[str, Fraction]) -> None:
    res = led.reserve(rid, [Request(u, "geo", amount=a) for u, a in asks.items()],
                      mechanism="privfuncseg", parameters={"epsilon": "per user"})
    if res.admitted:
        led.settle(rid, [Settlement(d.user_id, "geo", "release", Cost(
            "gp", asks[d.user_id], (CostItem("all", "gp", asks[d.user_id]),)))
            for d in res.admitted])


def build(path: Path) -> dict:
    """r1: six users 1/2 each; kept head; r2: u1, u2, HOSTILE ask 3/5 (denied), u3 1/4.

    Then the cap goes from 1 to 2."""
    led = Ledger.init(path, actor=ACTOR)
    led.apply_policy(_policy("1"), reason="initial policy")
    users = ["u1", "u2", "u3", "u4", "u5", HOSTILE]
    _charge(led, "r1", dict.fromkeys(users, Fraction(1, 2)))
    kept = led.head()
    led.checkpoint(path.parent / "kept.json")
    _charge(led, "r2", {"u1": Fraction(3, 5), "u2": Fraction(3, 5), "u3": Fraction(1, 4),
                        HOSTILE: Fraction(3, 5)})
    led.apply_policy(_policy("2"), reason=REASON)
    con = duckdb.connect(str(path), read_only=True)
    try:
        last_seq, denials = con.execute(
            "SELECT max(seq), count(*) FILTER (WHERE kind = 'deny') FROM entries").fetchone()
        first_hash = con.execute("SELECT hash FROM entries WHERE seq = 1").fetchone()[0]
    finally:
        con.close()
    return {"path": path, "kept": kept, "last_seq": last_seq, "denials": denials,
            "first_hash": first_hash,
            "pub": Path(f"{path}.pub")}


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    return build(tmp_path_factory.mktemp("auditweb") / "ledger.duckdb")


@pytest.fixture(scope="module")
def server(ledger):
    chromium()  # fails with the install command when the browser is missing
    srv = Server(ledger["path"], public_key=ledger["pub"])
    srv.wait_verified()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return tmp_path_factory.mktemp("chromium-profile")


def browse(server: Server, path: str, profile: Path):
    return parse(dump_dom(server.base + path, profile))


def test_overview_shows_the_verified_signed_head_and_the_domain(server, ledger, profile):
    dom = browse(server, "/", profile)
    assert f"Whole chain verified up to entry {ledger['last_seq']:,}" in dom.text
    assert "Signature of this head valid" in dom.text
    assert ledger["kept"].hash not in dom.text  # the head moved on since the kept one
    row = dom.table_with("Cap per user")[0]
    # six accounts: 1/2 each, u3 1/2 + 1/4; median (lower) 1/2, max 3/4; 3 denials
    assert (row["Domain"], row["Cap per user"], row["Accounts"]) == ("geo", "2 ε", "6")
    assert (row["Spent: median"], row["Spent: largest"]) == ("0.5 ε", "0.75 ε")
    assert (row["Releases"], row["Denied requests"]) == ("2", str(ledger["denials"]))
    assert ledger["denials"] == 3


def test_user_lookup_shows_balance_charges_and_denials(server, profile):
    dom = browse(server, "/user?" + urllib.parse.urlencode({"id": "u1"}), profile)
    bal = dom.table_with("Remaining")[0]
    assert (bal["Spent"], bal["Cap"], bal["Remaining"]) == ("0.5 ε", "2 ε", "1.5 ε")
    rows = dom.table_with("Why denied")
    assert [r["Release"] for r in rows] == ["r1", "r1", "r2"]
    assert [r["What"] for r in rows] == ["charge (reserved)", "charge confirmed", "DENIED"]
    assert rows[2]["Amount"] == "0.6 ε" and "exceed the cap" in rows[2]["Why denied"]
    assert dom.link("r2") == "/release?id=r2"


def test_release_filters_by_domain_and_dates(server, profile):
    today = datetime.now(UTC).date()
    assert {r["Release"] for r in browse(server, "/releases?domain=geo", profile)
            .table_with("Release")} == {"r1", "r2"}
    assert "No release matches" in browse(server, "/releases?domain=other", profile).text
    later = (today + timedelta(days=2)).isoformat()
    assert "No release matches" in browse(server, f"/releases?since={later}", profile).text
    assert "No release matches" in browse(server, "/releases?until=2000-01-01", profile).text
    rows = browse(server, f"/releases?since={today.isoformat()}&until={later}", profile
                  ).table_with("Release")
    assert [(r["Release"], r["Users admitted"], r["Users denied"]) for r in rows] == [
        ("r2", "1", "3"), ("r1", "6", "0")]
    bad = browse(server, "/releases?since=yesterday-ish", profile)
    assert "Cannot show this page" in bad.text


def test_denial_to_release_to_charges_drill_down_by_following_links(server, profile):
    dom = browse(server, "/denials?reason=spent", profile)
    denied = {r["User"] for r in dom.table_with("Why")}
    assert denied == {"u1", "u2", HOSTILE}
    release = browse(server, dom.link("r2"), profile)  # the denial's release link
    facts = release.table_with("Mechanism")[0]
    assert (facts["Mechanism"], facts["Users admitted"], facts["Users denied"]) == (
        "privfuncseg", "1", "3")
    charges = release.table_with("Accounts charged")[0]
    assert (charges["Accounts charged"], charges["Largest"], charges["Median"]) == (
        "1", "0.25 ε", "0.25 ε")
    assert "Total" not in charges  # a sum over accounts is no one's privacy loss
    user = browse(server, release.link("u3"), profile)  # and on to the user it charged
    assert user.table_with("Remaining")[0]["Spent"] == "0.75 ε"
    back = browse(server, release.link("3"), profile)  # its denials, filtered to r2
    assert {r["Release"] for r in back.table_with("Why")} == {"r2"}


def test_policy_history_has_reasons_and_actors(server, profile):
    rows = browse(server, "/policy", profile).table_with("Reason given")
    assert [(r["Reason given"], r["Changed by"], r["Cap after"]) for r in rows] == [
        (REASON, ACTOR, "2 ε"), ("initial policy", ACTOR, "1 ε")]
    assert rows[0]["Cap before"] == "1 ε"


def test_since_a_kept_head_in_the_chain_lists_what_came_after(server, ledger, profile):
    kept = ledger["kept"]
    dom = browse(server, "/since?" + urllib.parse.urlencode(
        {"head": f"{kept.seq}:{kept.hash}"}), profile)
    assert "is in the chain" in dom.text and not dom.bad
    assert [r["Release"] for r in dom.table_with("Users admitted")] == ["r2"]
    chg = dom.table_with("Largest rise of one account")[0]
    assert (chg["Accounts charged"], chg["Largest rise of one account"]) == ("1", "0.25 ε")
    assert dom.table_with("Denied requests")[0]["Denied requests"] == "3"
    assert dom.table_with("Reason given")[0]["Reason given"] == REASON
    pasted = (ledger["path"].parent / "kept.json").read_text()
    dom2 = browse(server, "/since?" + urllib.parse.urlencode({"head": pasted}), profile)
    assert "is in the chain" in dom2.text


def test_since_an_early_head_counts_every_charge_after_it(server, ledger, profile):
    # entry 1 is the first policy entry: everything charged came after it
    dom = browse(server, f"/since?head=1:{ledger['first_hash']}", profile)
    assert "is in the chain" in dom.text and not dom.bad
    assert [r["Release"] for r in dom.table_with("Users admitted")] == ["r1", "r2"]
    chg = dom.table_with("Largest rise of one account")[0]
    assert (chg["Accounts charged"], chg["Largest rise of one account"]) == ("6", "0.75 ε")
    assert [r["Reason given"] for r in dom.table_with("Reason given")] == [REASON]


def test_a_kept_head_not_in_the_chain_is_shown_in_red(server, ledger, profile):
    kept = ledger["kept"]
    other = "f" * 64
    dom = browse(server, f"/since?head={kept.seq}:{other}", profile)
    assert any("NOT in the chain" in b for b in dom.bad)
    dom = browse(server, f"/since?head={ledger['last_seq'] + 5}:{other}", profile)
    assert any("NOT in the chain" in b for b in dom.bad)
    dom = browse(server, "/since?head=/etc/passwd", profile)  # never a file read
    assert "root:" not in dom.text and dom.bad


def test_a_hostile_user_id_is_shown_as_text(server, tmp_path):
    dom = browse(server, "/user?" + urllib.parse.urlencode({"id": HOSTILE}), tmp_path)
    assert "script" not in dom.tags
    assert f"User {HOSTILE}" in dom.text
    assert dom.table_with("Remaining")[0]["Spent"] == "0.5 ε"
    denials = browse(server, "/denials", tmp_path)
    assert "script" not in denials.tags and HOSTILE in {r["User"] for r in
                                                        denials.table_with("Why")}


def test_only_get_is_served(server):
    for method in ("POST", "PUT", "DELETE"):
        req = urllib.request.Request(server.base + "/", data=b"x", method=method)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 405


def test_pages_are_fast_and_say_how_long_they_took(server):
    for path in ("/", "/user?id=u1", "/releases", "/release?id=r2", "/denials", "/policy"):
        status, _, ms = server.get(path)
        assert status == 200 and 0 <= ms < 1000


def test_a_tampered_ledger_shows_failed_in_red(ledger, tmp_path):
    copy = tmp_path / "ledger.duckdb"
    shutil.copyfile(ledger["path"], copy)
    con = duckdb.connect(str(copy))
    con.execute("UPDATE entries SET amount = amount + 1 WHERE kind = 'settle' AND user_id = 'u4'")
    con.close()
    srv = Server(copy, public_key=ledger["pub"])
    try:
        dom = parse(dump_dom(srv.base + "/", tmp_path / "p")) if "FAILED" in srv.wait_verified(
        ) else None
    finally:
        srv.stop()
    assert dom is not None and any("Chain verification FAILED" in b for b in dom.bad)


def test_a_backup_snapshot_is_served_with_the_kept_public_key(ledger, tmp_path):
    led = Ledger(ledger["path"])
    manifest = led.backup(tmp_path / "snap")
    srv = Server(tmp_path / "snap" / "ledger.duckdb", public_key=ledger["pub"])
    try:
        over = parse(dump_dom(srv.base + "/", tmp_path / "p")) if srv.wait_verified() else None
        user = parse(dump_dom(srv.base + "/user?id=u3", tmp_path / "p"))
    finally:
        srv.stop()
    assert f"Whole chain verified up to entry {manifest['head']['seq']:,}" in over.text
    assert user.table_with("Remaining")[0]["Spent"] == "0.75 ε"


def test_a_release_charges_while_the_server_is_being_hit(ledger, tmp_path):
    shutil.copytree(ledger["path"].parent, tmp_path / "l")
    path = tmp_path / "l" / "ledger.duckdb"
    srv = Server(path, extra=("--reverify-every", "0"))
    stop, hits, errors = threading.Event(), [0], []

    def hammer():
        while not stop.is_set():
            for p in ("/", "/user?id=u4", "/releases", "/denials", "/release?id=r1"):
                status = srv.get(p)[0]
                hits[0] += 1
                if status != 200:
                    errors.append((p, status))

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        time.sleep(1)
        t0 = time.perf_counter()
        _charge(Ledger(path, lock_timeout=30), "r3", {"u4": Fraction(1, 4)})
        took = time.perf_counter() - t0
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join()
    con = duckdb.connect(str(path), read_only=True)
    last = con.execute("SELECT max(seq) FROM entries").fetchone()[0]
    con.close()
    try:
        dom = parse(dump_dom(srv.base + "/user?id=u4", tmp_path / "p"))
        # the head moved: verified again, up to the new last entry
        over = srv.wait_verified(timeout=120, until=f"verified up to entry {last:,}")
    finally:
        srv.stop()
    assert f"verified up to entry {last:,}" in over and "FAILED" not in over
    assert not errors and hits[0] > 5
    assert took < 10, f"the charge waited {took:.1f} s beside the server"
    assert dom.table_with("Remaining")[0]["Spent"] == "0.75 ε"  # 1/2 + 1/4, r3 seen


def test_screenshot_of_the_overview(server, tmp_path):
    png = tmp_path / "overview.png"
    screenshot(server.base + "/", png, tmp_path / "p")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_audit_without_subcommand_is_still_the_static_audit_and_serve_is_listed():
    r = CliRunner().invoke(app, ["audit", "--help"])
    assert r.exit_code == 0 and "--out" in r.output and "serve" in r.output
    r = CliRunner().invoke(app, ["audit", "serve", "--help"])
    assert r.exit_code == 0 and "127.0.0.1" in r.output and "TLS" in r.output
    r = CliRunner().invoke(app, ["audit", "serve", "--ledger", "/nonexistent/l.duckdb"])
    assert r.exit_code != 0


def test_json_of_pasted_checkpoint_is_not_a_path(server, ledger, profile):
    text = json.dumps({"seq": 1})
    dom = browse(server, "/since?" + urllib.parse.urlencode({"head": text}), profile)
    assert dom.bad  # an incomplete checkpoint is refused with a message, not a crash


@pytest.fixture(scope="module")
def clicks(server):
    """A Playwright page in the Debian Chromium (real clicks and typing)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            yield browser.new_page()
        finally:
            browser.close()


def _cells(page, header: str) -> list[dict[str, str]]:
    """The rows of the first table with column `header`, as the browser shows them."""
    table = page.locator("table", has=page.locator("th", has_text=header)).first
    heads = table.locator("th").all_inner_texts()
    return [dict(zip(heads, row.locator("td").all_inner_texts(), strict=True))
            for row in table.locator("tbody tr").all()]


def test_clicking_from_a_user_to_a_denial_to_its_release_and_back(server, clicks):
    page = clicks
    page.goto(server.base + "/")
    page.fill("input[name=id]", "u2")  # the lookup form, typed and submitted
    page.click("button:has-text('Show')")
    assert page.url.endswith("/user?id=u2")
    denied = [r for r in _cells(page, "Why denied") if r["What"] == "DENIED"]
    assert len(denied) == 1 and denied[0]["Amount"] == "0.6 ε"
    page.click("table >> text=r2")  # the denial's release
    assert page.url.endswith("/release?id=r2")
    charges = _cells(page, "Accounts charged")[0]
    assert (charges["Accounts charged"], charges["Largest"]) == ("1", "0.25 ε")
    page.click("table >> a:text-is('3')")  # its 3 denied users
    assert {r["User"] for r in _cells(page, "Why")} == {"u1", "u2", HOSTILE}
    page.click(f"table >> a:text-is('{HOSTILE}')")  # the hostile id, as a link, as text
    assert page.locator("h2").first.inner_text() == f"User {HOSTILE}"
    assert page.locator("script").count() == 0


def test_clicking_the_filters_and_the_checkpoint_form(server, ledger, clicks):
    page = clicks
    page.goto(server.base + "/releases")
    page.fill("input[name=since]", "2000-01-01")
    page.fill("input[name=until]", "2000-01-02")
    page.click("form.filters button")
    assert "since=2000-01-01" in page.url and "No release matches" in page.content()
    page.click("nav >> text=Since a checkpoint")
    kept = ledger["kept"]
    page.fill("input[name=head]", f"{kept.seq}:{kept.hash}")
    page.click("form.filters button")
    assert "is in the chain" in page.inner_text("body")
    page.fill("input[name=head]", f"{kept.seq}:{'e' * 64}")
    page.click("form.filters button")
    assert "NOT in the chain" in page.inner_text(".banner.bad")
