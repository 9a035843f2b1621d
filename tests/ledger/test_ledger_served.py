"""The ledger service (`privpipe ledger serve`, `RemoteLedger`): same answers as the
embedded ledger, and the attacks a served ledger must refuse.

`any_led` gives an embedded `Ledger` or a `RemoteLedger` (admin credential) on a
fresh ledger with the test policy; the same assertions run against both (the
start of an abstract ledger test suite).
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import threading
from fractions import Fraction
from pathlib import Path

import pytest
from ledger_helpers import PYTHON, subprocess_env
from served_helpers import Served, make_certs, serve_new_ledger, start_server

from ledger import Filter, Ledger, ReplayConflictError, Request, Settlement
from ledger.errors import BudgetExceededError
from ledger.remote import LedgerAccessError, RemoteLedger, open_ledger
from mechanisms.cost import Cost, CostItem, StepRun
from schemas.errors import ParameterError

PARAMS = {"epsilon": "1/4", "mechanism": "test"}


def _gp(total, *parts):
    return Cost("gp", Fraction(total), tuple(CostItem(f"s{i}", "gp", Fraction(p))
                                             for i, p in enumerate(parts)))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Served:
    """One service for the module (tests use their own release ids)."""
    served = serve_new_ledger(tmp_path_factory.mktemp("served"))
    yield served
    served.stop()


def _remote(served: Served, who: str, **kw) -> RemoteLedger:
    return RemoteLedger(served.url, token=served.tokens[who], ca=str(served.ca), **kw)


@pytest.fixture(params=["embedded", "served"])
def any_led(request, tmp_path, policy):
    path = tmp_path / "led" / "ledger.duckdb"
    Ledger.init(path, actor="pytest").apply_policy(policy)
    if request.param == "embedded":
        yield Ledger(path, actor="adm")
        return
    served = start_server(path, tmp_path)
    try:
        yield _remote(served, "adm")
    finally:
        served.stop()


def _script(led) -> dict:
    """A sequence of operations through `led`; what each returned, without times and ids."""
    reqs = [Request("u1", "ais", amount=Fraction(1, 3)), Request("u2", "ais", amount="1/3"),
            Request("u3", "ais", amount=Fraction(2))]
    out = {"plan": led.plan("r1", reqs, mechanism="curves_gp", parameters=PARAMS)}
    out["reserve"] = led.reserve("r1", reqs, mechanism="curves_gp", parameters=PARAMS,
                                 input_fingerprint="fp1")
    out["replay"] = led.reserve("r1", reqs, mechanism="curves_gp", parameters=PARAMS,
                                input_fingerprint="fp1")
    led.settle("r1", [Settlement("u1", "ais", "release", _gp("1/3", "1/6", "1/12"))],
               input_fingerprint="fp1", parameters=PARAMS)
    led.settle("r1", [Settlement("u1", "ais", "release", _gp("1/3", "1/6", "1/12"))])
    led.record_release("r1", {"a": [1, 2], "b": "x"}, "settled")
    wreq = [Request("u1", "power", notion="wevent", stream_id="s1",
                    runs=(StepRun(0, 8, Fraction(1, 4)),))]
    out["wevent"] = led.reserve("r2", wreq, mechanism="streams_wevent", parameters=PARAMS)
    led.close("r2", "test close")
    out["seeds"] = led.noise_seeds("r1", ["u1", "u2"], ["f1", "f2"], PARAMS)
    out["tag"] = led.input_tag("content")
    out["fp"] = led.range_fingerprint("u1", "power", "s1", [0, 1, 2], [0.25, 0.5, 0.1])
    out["ranges"] = led.stream_ranges("power", [("u1", "s1")])
    for q in ("balances", "history", "releases", "denials", "domains", "policy_history"):
        out[q] = getattr(led, q)()
    out["history_u1"] = led.history("u1", where=Filter(domain="ais"))
    out["release"] = led.release("r1")
    out["entry_range"] = led.entry_range("r1")
    out["charges"] = led.release_charges("r1")
    out["spread"] = led.charge_summary("r1")
    out["wspread"] = led.window_charge_summary("r2")
    out["budget"] = led.balance_summary("ais")
    out["near"] = led.near_cap_users("r1", "ais")
    out["domain"] = led.domain("ais")
    out["verify"] = led.verify().ok
    out["head_seq"] = led.head().seq
    return _strip(out)


def _strip(x):
    """Drop what differs between two ledgers by nature: times, entry ids, hashes, actors."""
    volatile = {"created_at", "entry_id", "settled_at", "updated_at", "hash", "prev_hash",
                "actor", "recorded_at", "first_at", "last_at", "applied_at", "mac", "signature"}
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in volatile}
    if isinstance(x, list | tuple):
        return type(x)(_strip(v) for v in x)
    return x


def test_every_operation_answers_as_the_embedded_ledger(tmp_path, policy):
    """The same script on an embedded ledger and through the service: equal answers."""
    a, b = tmp_path / "a" / "ledger.duckdb", tmp_path / "b" / "ledger.duckdb"
    for p in (a, b):
        Ledger.init(p, actor="pytest").apply_policy(policy)
    embedded = _script(Ledger(a, actor="adm"))
    served = start_server(b, tmp_path)
    try:
        remote = _script(_remote(served, "adm"))
    finally:
        served.stop()
    for key in embedded:
        if key not in ("seeds", "tag", "fp"):  # keyed by each ledger's own noise key
            assert remote[key] == embedded[key], key
    assert set(remote["seeds"]) == {"u1", "u2"} and remote["verify"]
    assert Ledger(b).verify().ok


def test_reserve_replay_settle_and_errors(any_led):
    """Replays, exact amounts and the error classes are the same through the service."""
    req = [Request("u1", "ais", amount=Fraction(1, 3)), Request("u2", "ais", amount="5/4")]
    first = any_led.reserve("rr", req, mechanism="curves_gp", parameters=PARAMS)
    again = any_led.reserve("rr", req, mechanism="curves_gp", parameters=PARAMS)
    assert [d.user_id for d in first.admitted] == ["u1"] and first.denied[0].user_id == "u2"
    assert [(d.entry_seq, d.replayed) for d in again.admitted] == [
        (first.admitted[0].entry_seq, True)]
    assert first.admitted[0].remaining == Fraction(2, 3)
    with pytest.raises(BudgetExceededError):
        first.denied[0].raise_if_denied("rr")
    with pytest.raises(ReplayConflictError):
        any_led.reserve("rr", req, mechanism="curves_gp", parameters={"other": 1})
    with pytest.raises(ParameterError, match="unknown domain|domain"):
        any_led.reserve("rx", [Request("u1", "nope", amount=1)], mechanism="curves_gp",
                        parameters=PARAMS)
    head = any_led.head().seq
    any_led.settle("rr", [Settlement("u1", "ais", "release", _gp("1/3", "1/3"))])
    any_led.settle("rr", [Settlement("u1", "ais", "release", _gp("1/3", "1/3"))])
    assert any_led.head().seq == head + 1  # the replayed settle wrote nothing
    bal = {r["user_id"]: r for r in any_led.balances("ais")}
    assert bal["u1"]["spent"] == Fraction(1, 3) and isinstance(bal["u1"]["cap"], Fraction)
    any_led.verify_or_raise()


def test_actor_is_the_credential_name(server):
    rel = _remote(server, "rel-a")
    rel.reserve("actor-1", [Request("ua", "ais", amount=Fraction(1, 100))],
                mechanism="curves_gp", parameters=PARAMS)
    rows = rel.history(where=Filter(release="actor-1"))
    assert {r["actor"] for r in rows} == {"rel-a"}


# ---------------------------------------------------------------- attacks


def test_other_releaser_cannot_touch_a_release(server):
    """Releaser B may not settle, close, record or seed releaser A's release."""
    a, b = _remote(server, "rel-a"), _remote(server, "rel-b")
    a.reserve("owned-1", [Request("uo", "ais", amount=Fraction(1, 10))],
              mechanism="curves_gp", parameters=PARAMS)
    attempts = [
        lambda: b.settle("owned-1", [Settlement("uo", "ais", "release", _gp("1/10", "0"))]),
        lambda: b.close("owned-1", "stolen"),
        lambda: b.record_release("owned-1", {}, "failed"),
        lambda: b.noise_seeds("owned-1", ["uo"], ["f"], PARAMS),
        lambda: b.reserve("owned-1", [Request("uz", "ais", amount=Fraction(1, 10))],
                          mechanism="curves_gp", parameters=PARAMS)]
    for attempt in attempts:
        with pytest.raises(LedgerAccessError, match="belongs to another client"):
            attempt()
    assert _remote(server, "adm").release_charges("owned-1")[0]["user_id"] == "uo"
    a.settle("owned-1", [Settlement("uo", "ais", "release", _gp("1/10", "1/20"))])


def test_seeds_only_for_admitted_users(server):
    a = _remote(server, "rel-a")
    a.reserve("seeds-1", [Request("s1", "ais", amount=Fraction(1, 10)),
                          Request("s2", "ais", amount=Fraction(5))],
              mechanism="curves_gp", parameters=PARAMS)
    assert set(a.noise_seeds("seeds-1", ["s1"], ["f"], PARAMS)) == {"s1"}
    for users in (["s2"], ["never"], ["s1", "s2"]):
        with pytest.raises(LedgerAccessError, match="admitted"):
            a.noise_seeds("seeds-1", users, ["f"] * len(users), PARAMS)
    with pytest.raises(LedgerAccessError):
        a.noise_seeds("seeds-none", ["s1"], ["f"], PARAMS)


def test_roles(server):
    aud, rel = _remote(server, "aud"), _remote(server, "rel-a")
    assert aud.verify().ok and isinstance(aud.balances(), list)
    with pytest.raises(LedgerAccessError, match="releaser or admin role"):
        aud.reserve("role-1", [Request("u", "ais", amount=1)], mechanism="curves_gp",
                    parameters=PARAMS)
    with pytest.raises(LedgerAccessError, match="releaser or admin"):
        aud.noise_seeds("role-1", ["u"], ["f"], PARAMS)
    from ledger_helpers import POLICY

    from schemas.policy import parse_policy

    with pytest.raises(LedgerAccessError, match="admin role"):
        rel.apply_policy(parse_policy(POLICY, source="p"))
    assert _remote(server, "adm").apply_policy(parse_policy(POLICY, source="p")) == []


def _post(served: Served, op: str, body: bytes, token: str | None) -> tuple[int, dict]:
    ctx = ssl.create_default_context(cafile=str(served.ca))
    host, port = served.url.removeprefix("https://").split(":")
    con = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    con.request("POST", f"/v1/{op}", body=body, headers=headers)
    resp = con.getresponse()
    return resp.status, json.loads(resp.read())


def test_credentials_refused_with_401_and_403(server):
    assert _post(server, "head", b"{}", None)[0] == 401
    assert _post(server, "head", b"{}", "not-a-token")[0] == 401
    status, body = _post(server, "head", b"{}", server.tokens["old"])
    assert status == 401 and "expired" in body["error"]["message"]
    status, body = _post(server, "reserve", b"{}", server.tokens["aud"])
    assert status == 403 and "releaser or admin role" in body["error"]["message"]
    with pytest.raises(LedgerAccessError, match="expired"):
        _remote(server, "old").head()
    with pytest.raises(LedgerAccessError, match="does not know"):
        RemoteLedger(server.url, token="wrong-token-123456", ca=str(server.ca)).head()


def test_a_token_whose_hash_shares_a_prefix_is_refused(server):
    """The whole SHA-256 of the token is compared: a near miss is an unknown token.

    The attacker searches tokens whose hash starts as a real client's does (the first
    five hex digits: about 10^6 tries); a comparison of a prefix, or of a truncated
    hash, would let one in as that client.
    """
    import hashlib
    import itertools

    real = hashlib.sha256(server.tokens["rel-a"].encode()).hexdigest()
    near = next(t for t in (f"guess-{i}" for i in itertools.count())
                if hashlib.sha256(t.encode()).hexdigest()[:5] == real[:5])
    assert hashlib.sha256(near.encode()).hexdigest() != real
    status, body = _post(server, "head", b"{}", near)
    assert status == 401 and "does not know" in body["error"]["message"]


@pytest.mark.parametrize("body", [
    b"not json", b"[1]", b'{"release_id": {"$frac": "1/0"}}',
    b'{"release_id": "x", "requests": [{"$type": "Request", "fields": {"user_id": "u", '
    b'"domain": "ais", "evil": 1}}], "mechanism": "m", "parameters": {}}',
    b'{"release_id": "x", "requests": [{"$type": "Request", "fields": {"user_id": 5, '
    b'"domain": "ais"}}], "mechanism": "m", "parameters": {}}',
    b'{"release_id": "x", "requests": [{"$type": "Popen", "fields": {}}], '
    b'"mechanism": "m", "parameters": {}}',
    b'{"release_id": "x", "requests": [{"user_id": "u"}], "mechanism": "m", '
    b'"parameters": {}}',
    b'{"release_id": "x", "requests": [], "mechanism": "m", "parameters": {}, "extra": 1}',
    b'{"release_id": "x", "requests": {"$rows": {"type": "Request", "columns": {"user_id": '
    b'["a", 5], "domain": ["ais", "ais"]}}}, "mechanism": "m", "parameters": {}}',
    b'{"release_id": "x", "requests": {"$rows": {"type": "Request", "columns": {"user_id": '
    b'["a", "b"], "domain": ["ais"]}}}, "mechanism": "m", "parameters": {}}',
    b'{"release_id": "x", "requests": {"$rows": {"type": "Request", "columns": {"user_id": '
    b'["a", "b"], "domain": ["ais", "ais"], "evil": [1, 2]}}}, "mechanism": "m", '
    b'"parameters": {}}',
])
def test_malformed_messages_are_400(server, body):
    status, answer = _post(server, "reserve", body, server.tokens["rel-a"])
    assert status == 400, answer
    assert _post(server, "no_such_op", b"{}", server.tokens["adm"])[0] == 400


_ROWS = (b'{"release_id": "hostile-1", "mechanism": "m", "parameters": {}, "requests": '
         b'{"$rows": {"type": "Request", "columns": {"user_id": ["a", "b"], "domain": '
         b'["ais", "ais"], "amount": %s}}}}')


@pytest.mark.parametrize("column", [
    b'{"$dict": {"values": [{"$frac": "1/10"}], "codes": [0, 1]}}',  # code out of range
    b'{"$dict": {"values": [{"$frac": "1/10"}], "codes": [0, -1]}}',
    b'{"$dict": {"values": [{"$frac": "1/10"}], "codes": [0, true]}}',
    b'{"$dict": {"values": [{"$frac": "1/10"}], "codes": [0]}}',  # one row of two
    b'{"$dict": {"values": [{"$frac": "1/10"}], "codes": [0, 0], "more": []}}',
    b'{"$dict": {"values": [{"$type": "Popen", "fields": {}}], "codes": [0, 0]}}',
    b'{"$dict": {"values": [{"$frac": "1/10"}], "codes": [0, 0]',  # truncated
    b'{"$repeat": {"value": {"$frac": "1/10"}, "count": 3}}',  # three rows of two
    b'{"$repeat": {"value": {"$frac": "1/10"}, "count": 99999999999999999999}}',
    b'{"$repeat": {"value": true, "count": 2}}',
])
def test_hostile_column_bodies_are_400_and_change_nothing(server, column):
    """A malformed ``$dict``/``$repeat`` column of a reserve is refused with 400; nothing
    is written."""
    before = _remote(server, "aud").head()
    status, answer = _post(server, "reserve", _ROWS % column, server.tokens["rel-a"])
    assert status == 400, answer
    assert answer["error"]["class"] == "CodecError"
    assert _remote(server, "aud").head() == before
    assert _remote(server, "aud").release("hostile-1") is None


def test_a_huge_declared_length_is_413_before_reading(server):
    """A body declared larger than the cap is refused at once (no body is read)."""
    ctx = ssl.create_default_context(cafile=str(server.ca))
    host, port = server.url.removeprefix("https://").split(":")
    con = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
    con.putrequest("POST", "/v1/reserve")
    con.putheader("Authorization", f"Bearer {server.tokens['rel-a']}")
    con.putheader("Content-Length", str(2**40))
    con.endheaders()
    resp = con.getresponse()
    assert resp.status == 413 and b"content-length" in resp.read()
    con.close()


def test_untrusted_certificate_refused(server, tmp_path):
    other_ca = make_certs(tmp_path, "other")[0]
    with pytest.raises(LedgerAccessError, match="does not trust"):
        RemoteLedger(server.url, token=server.tokens["aud"], ca=str(other_ca),
                     retry_seconds=1).head()


def test_http_url_refused():
    with pytest.raises(ParameterError, match="plain HTTP is refused"):
        open_ledger("http://127.0.0.1:9")


def _cli(served: Served, who: str, *args: str, env: dict | None = None
         ) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "flows.cli", "ledger", *args], capture_output=True,
                          text=True, env=env or served.env(who), timeout=120)


def test_cli_through_the_service(server):
    """The CLI's read commands take a URL; refusals are exit 2 with one line."""
    for cmd in ("balance", "history", "releases", "denials", "verify"):
        r = _cli(server, "aud", cmd, "--ledger", server.url)
        assert r.returncode == 0, (cmd, r.stdout, r.stderr)
    r = _cli(server, "aud", "charge", "--ledger", server.url, "--user", "u", "--domain",
             "ais", "--epsilon", "0.1", "--release", "cli-1")
    assert r.returncode == 2 and "releaser or admin role" in r.stderr + r.stdout
    env = server.env("aud") | {"PRIVPIPE_LEDGER": server.url}
    assert _cli(server, "aud", "verify", env=env).returncode == 0
    r = _cli(server, "old", "verify", "--ledger", server.url)
    assert r.returncode == 2 and "expired" in r.stderr + r.stdout
    r = _cli(server, "aud", "verify", "--ledger", "http://127.0.0.1:1")
    assert r.returncode == 2 and "plain HTTP is refused" in r.stderr + r.stdout
    assert len((r.stderr + r.stdout).strip().splitlines()) == 1


def test_serve_token_appends_a_client(tmp_path):
    clients = tmp_path / "clients.toml"
    run = [PYTHON, "-m", "flows.cli", "ledger", "serve-token", "--clients", str(clients)]
    r1 = subprocess.run([*run, "--name", "a", "--role", "releaser"], capture_output=True,
                        text=True, env=subprocess_env(), timeout=60)
    r2 = subprocess.run([*run, "--name", "b", "--role", "auditor", "--expires",
                         "2099-01-01T00:00:00Z"], capture_output=True, text=True,
                        env=subprocess_env(), timeout=60)
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    from flows.ledger_server import load_clients

    got = load_clients(clients)
    assert [(c.name, c.role) for c in got] == [("a", "releaser"), ("b", "auditor")]
    assert got[1].expires.year == 2099
    assert r1.stdout.strip() not in clients.read_text()
    assert (clients.stat().st_mode & 0o777) == 0o600
    r3 = subprocess.run([*run, "--name", "a", "--role", "admin"], capture_output=True,
                        text=True, env=subprocess_env(), timeout=60)
    assert r3.returncode == 2
    assert Path(clients).read_text().count("[[client]]") == 2


_RESERVER = """
import sys
from fractions import Fraction
from ledger import Request
from ledger.remote import RemoteLedger
url, token, ca, rid = sys.argv[1:5]
led = RemoteLedger(url, token=token, ca=ca)
reqs = [Request(f"cc-u{i}", "ais", amount=Fraction(1, 3)) for i in range(40)]
res = led.reserve(rid, reqs, mechanism="curves_gp", parameters={"p": 1})
again = led.reserve(rid, reqs, mechanism="curves_gp", parameters={"p": 1})
assert [d.user_id for d in again.admitted] == [d.user_id for d in res.admitted]
print(len(res.admitted))
"""


def test_concurrent_releasers_against_one_cap(server):
    """4 processes, 40 users, 1/3 each against a cap of 1: exactly 3 admitted per user."""
    procs = [subprocess.Popen([PYTHON, "-c", _RESERVER, server.url, server.tokens[who],
                               str(server.ca), f"cc-{i}"], env=subprocess_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, who in enumerate(("rel-a", "rel-b", "rel-a", "rel-b"))]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert sum(int(o[0]) for o in outs) == 3 * 40
    adm = _remote(server, "adm")
    spent = {r["user_id"]: r["spent"] for r in adm.balances("ais")
             if r["user_id"].startswith("cc-u")}
    assert len(spent) == 40 and set(spent.values()) == {Fraction(1)}
    assert adm.verify().ok


def test_new_client_is_served_without_restart_and_token_file_works(server, tmp_path):
    """`serve-token` on the running service's clients file: the new token works at once."""
    clients = server.args[server.args.index("--clients") + 1]
    r = subprocess.run([PYTHON, "-m", "flows.cli", "ledger", "serve-token", "--clients",
                        clients, "--name", "late", "--role", "auditor"], capture_output=True,
                       text=True, env=subprocess_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    token_file = tmp_path / "token"
    token_file.write_text(r.stdout.strip() + "\n")
    token_file.chmod(0o600)
    env = server.env("aud") | {"PRIVPIPE_LEDGER_TOKEN_FILE": str(token_file)}
    del env["PRIVPIPE_LEDGER_TOKEN"]
    who = subprocess.run([PYTHON, "-c", "from ledger.remote import RemoteLedger; import sys; "
                          "print(RemoteLedger(sys.argv[1]).whoami()['name'])", server.url],
                         capture_output=True, text=True, env=env, timeout=60)
    assert who.returncode == 0 and who.stdout.strip() == "late", who.stderr
    env.pop("PRIVPIPE_LEDGER_TOKEN_FILE")
    r = _cli(server, "aud", "balance", "--ledger", server.url, env=env)
    assert r.returncode == 2 and "PRIVPIPE_LEDGER_TOKEN" in r.stderr + r.stdout


def test_serve_refuses_bad_options(tmp_path):
    """No certificate, a bad clients file or a bad role: exit 2 with one line, nothing served."""
    clients = tmp_path / "clients.toml"
    clients.write_text('[[client]]\nname = "x"\nrole = "root"\ntoken_sha256 = "00"\n')
    base = [PYTHON, "-m", "flows.cli", "ledger"]
    runs = [
        [*base, "serve", "--ledger", str(tmp_path / "l.duckdb"), "--listen", "127.0.0.1:1",
         "--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(tmp_path / "none.key"),
         "--clients", str(clients)],
        [*base, "serve-token", "--clients", str(tmp_path / "c2.toml"), "--name", "a",
         "--role", "root"],
        [*base, "serve-token", "--clients", str(tmp_path / "c2.toml"), "--name", "a b",
         "--role", "admin"],
        [*base, "serve-token", "--clients", str(tmp_path / "c2.toml"), "--name", "a",
         "--role", "admin", "--expires", "2001-01-01T00:00:00Z"],
    ]
    for args in runs:
        r = subprocess.run(args, capture_output=True, text=True, env=subprocess_env(),
                           timeout=60)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert not (tmp_path / "c2.toml").exists()
    from flows.ledger_server import load_clients

    with pytest.raises(ParameterError, match="role must be one of"):
        load_clients(clients)


def test_verifications_for_non_admins_are_limited_so_writes_are_not_held_up(tmp_path):
    """The attack: an auditor's token asks for `verify` in a loop.

    A whole-chain verification holds the ledger (a write waits 22.6 s for one at 10^6
    users), so an unlimited loop stops every release. The service answers the same
    question at an unchanged head from its last verification, runs a new one at most
    every --verify-every seconds, and refuses the rest with LedgerBusyError (exit 2,
    retryable) naming when to ask again; an admin is not limited.
    """
    from ledger_helpers import POLICY

    from ledger.errors import LedgerBusyError
    from schemas.policy import parse_policy

    path = tmp_path / "led" / "ledger.duckdb"
    Ledger.init(path, actor="pytest").apply_policy(parse_policy(POLICY, source="p"))
    served = start_server(path, tmp_path, verify_every=3600)
    try:
        aud, rel, adm = (_remote(served, who) for who in ("aud", "rel-a", "adm"))
        first = aud.verify()
        assert first.ok
        assert aud.verify() == first and rel.verify() == first  # same head: the same answer
        rel.reserve("busy-1", [Request("u1", "ais", amount=Fraction(1, 8))], mechanism="m",
                    parameters={})
        with pytest.raises(LedgerBusyError, match=r"verified the chain \d+ s ago .* at most "
                                                  r"every 3600 s"):
            aud.verify()  # the head moved: a new verification would run within the hour
        assert adm.verify().ok  # the admin is not limited
        res = subprocess.run(
            [PYTHON, "-m", "flows.cli", "ledger", "verify", "--ledger", served.url],
            env=served.env("aud"), capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode == 2 and "ask again in" in res.stderr, res.stderr
    finally:
        served.stop()


def _in_process_service(tmp_path):
    """A `LedgerService` in this process (no HTTP) on a fresh ledger; (service, clients)."""
    from ledger_helpers import POLICY
    from served_helpers import write_clients

    from flows.ledger_server import LedgerService
    from schemas.policy import parse_policy

    path = tmp_path / "led" / "ledger.duckdb"
    Ledger.init(path, actor="pytest").apply_policy(parse_policy(POLICY, source="p"))
    write_clients(tmp_path / "clients.toml")
    svc = LedgerService(path, tmp_path / "clients.toml", verify_every=0)
    return svc, {c.name: c for c in svc.clients()}


def _pause_in(monkeypatch, module, name: str, thread_name: str, first: bool = False):
    """Make `module.name` stop after it ran (`first`: before), in the thread `thread_name`.

    Returns (inside, resume): `inside` is set when that thread is paused there,
    which lasts until the test sets `resume`.
    """
    real, inside, resume = getattr(module, name), threading.Event(), threading.Event()

    def paused(*args, **kwargs):
        out = None if first else real(*args, **kwargs)
        if threading.current_thread().name == thread_name:
            inside.set()
            assert resume.wait(120), "the test never resumed the paused thread"
        return real(*args, **kwargs) if first else out

    monkeypatch.setattr(module, name, paused)
    return inside, resume


def _run(name: str, fn, box: list) -> threading.Thread:
    def target():
        try:
            box.append(fn())
        except BaseException as err:  # noqa: BLE001 - the test asserts on it
            box.append(err)

    th = threading.Thread(target=target, name=name, daemon=True)
    th.start()
    return th


def test_reads_answer_from_a_snapshot_while_a_write_is_inside_its_transaction(
        tmp_path, monkeypatch):
    """The attack on availability: a releaser's write transaction in progress (a big
    settle) used to hold every auditor's read. Paused inside its transaction (after its
    rows are written, before COMMIT), the write does not stop `balances`, `history` or
    `head`: they answer with the state before it, and after the commit with the new one."""
    from ledger import storage

    svc, who = _in_process_service(tmp_path)
    try:
        aud, rel = who["aud"], who["rel-a"]
        svc.call(rel, "reserve", {"release_id": "s0", "requests": [
            Request("u1", "ais", amount=Fraction(1, 8))], "mechanism": "m", "parameters": {}})
        before = {op: svc.call(aud, op, {}) for op in ("balances", "history", "head")}
        inside, resume = _pause_in(monkeypatch, storage, "head", "writer")
        wrote, read = [], []
        writer = _run("writer", lambda: svc.call(rel, "reserve", {
            "release_id": "s1", "requests": [Request("u2", "ais", amount=Fraction(1, 4))],
            "mechanism": "m", "parameters": {}}), wrote)
        try:
            assert inside.wait(60), wrote
            reader = _run("reader", lambda: {op: svc.call(aud, op, {})
                                             for op in ("balances", "history", "head")}, read)
            reader.join(60)
            assert not reader.is_alive(), "a read waited for the write in progress"
            assert writer.is_alive() and not wrote  # the writer is still inside
        finally:
            resume.set()
            writer.join(60)
        assert read[0] == before
        assert wrote and not isinstance(wrote[0], BaseException), wrote
        after = {op: svc.call(aud, op, {}) for op in ("balances", "history", "head")}
        assert after["head"].seq == before["head"].seq + 1
        assert {r["user_id"] for r in after["balances"]} == {"u1", "u2"}
        assert [r["release_id"] for r in after["history"]][-1] == "s1"
    finally:
        svc.close()


def test_a_read_of_several_statements_sees_one_state_and_does_not_hold_a_write(
        tmp_path, monkeypatch):
    """`head` reads the head row (seq, hash, signature), then its counter, in two
    statements. Paused between them while a reserve commits: the write does not wait
    for the read, and the read still sees one state (the head before the write, whose
    signature covers the counter it returns; a counter read after the commit would not
    match). The checkpoint the open read held off runs when it ends: no WAL is left."""
    from ledger import heads

    svc, who = _in_process_service(tmp_path)
    try:
        adm, aud, rel = who["adm"], who["aud"], who["rel-a"]
        svc.call(rel, "reserve", {"release_id": "v0", "requests": [
            Request("u1", "ais", amount=Fraction(1, 8))], "mechanism": "m", "parameters": {}})
        before = svc.call(aud, "head", {})
        inside, resume = _pause_in(monkeypatch, heads, "head_counter", "reader", first=True)
        read, wrote = [], []
        reader = _run("reader", lambda: svc.call(aud, "head", {}), read)
        try:
            assert inside.wait(60), read
            writer = _run("writer", lambda: svc.call(rel, "reserve", {
                "release_id": "v1", "requests": [Request("u2", "ais", amount=Fraction(1, 4))],
                "mechanism": "m", "parameters": {}}), wrote)
            writer.join(60)
            assert not writer.is_alive(), "a write waited for a read in progress"
            assert reader.is_alive() and not read  # the read is still inside
            assert not isinstance(wrote[0], BaseException), wrote
        finally:
            resume.set()
            reader.join(60)
        wal = Path(str(svc.path) + ".wal")
        assert not wal.exists() or wal.stat().st_size == 0  # folded in once the read ended
        assert read[0] == before
        assert svc.ledger_for(adm).kept_head_problem("the read", read[0]) is None
        assert svc.call(aud, "head", {}).seq == before.seq + 1
        assert svc.call(adm, "verify", {}).ok
    finally:
        svc.close()
