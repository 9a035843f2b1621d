"""The rows a sequence of reserve/settle/close calls writes are exactly those of 92fa992.

`scenario` runs w-event (per-user and per-stream budgets, stream claims,
continuations, denials, refunds, replays) and gp/cgp calls on a fresh ledger
with a fixed clock and fixed entry ids, so every column of every entry,
including the chain hashes, is reproducible. `data/golden_rows_92fa992.json`
was written by this file run as a script against the tree at 92fa992 (before
the column-wise reserve and settle of issue #30):

    PYTHONPATH=<tree at 92fa992> python tests/ledger/test_ledger_golden_rows.py OUT.json

The test builds the same ledger through the current code and compares
entries, step runs, accounts, releases and the chain head row by row. The
head's seal and signature depend on the ledger's random keys; they cover
(seq, hash, counter), which are compared, and `verify` must pass.
"""

from __future__ import annotations

import hashlib
import json
import sys
import types
from fractions import Fraction
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parent / "data" / "golden_rows_92fa992.json"

STREAMS = {"kind": "streams", "notion": "wevent", "cap": "10", "w": 5,
           "value_range": [0.0, 10.0]}
POLICY = {"domains": {
    "own": {**STREAMS, "wevent_budget": "per_stream"},
    "user": {**STREAMS, "cap": "12", "w": 4},  # per_user: a user's streams share windows
    "curve": {"kind": "curves", "public": {"duration": True, "points": True},
              "notion": "gp", "cap": "3"},
    "zcdp": {"kind": "curves", "public": {"duration": True, "points": True},
             "notion": "cgp", "cap": "2"},
}}


def _fixed(monkeypatch: Any) -> None:
    """A clock that ticks one microsecond per call and entry ids from a counter."""
    from ledger import entries, storage

    ticks = iter(range(10**6))
    monkeypatch.setattr(storage, "now", lambda: f"2026-01-01 00:00:00.{next(ticks):06d}")
    counter = iter(range(1, 10**9))

    def urandom(n: int) -> bytes:
        return b"".join(hashlib.sha256(str(next(counter)).encode()).digest()[:16]
                        for _ in range(n // 16))

    monkeypatch.setattr(entries, "os", types.SimpleNamespace(urandom=urandom))


def _claim(first: int, last: int, steps: int, user: str, wm: int | None) -> Any:
    from ledger import StreamClaim

    return StreamClaim(first, last, steps, hashlib.sha256(f"{user}{first}".encode()).hexdigest(),
                       wm)


def _stream_requests(dom: str, first: int, last: int, wm: int | None, per_step: Fraction,
                     users: list[str], gap: set[str] = frozenset(), sid: str = "s0") -> list:
    from ledger import Request
    from mechanisms.cost import StepRun

    shared = (StepRun(first, last + 1, per_step),)
    out = []
    for u in users:
        runs = shared
        steps = last - first + 1
        if u in gap:  # a hole in the middle: two runs
            mid = (first + last) // 2
            runs = (StepRun(first, mid, per_step), StepRun(mid + 1, last + 1, per_step))
            steps -= 1
        out.append(Request(u, dom, step=f"stream:{sid}", notion="wevent", stream_id=sid,
                           runs=runs, stream_claim=_claim(first, last, steps, u, wm)))
    return out


def _stream_settlements(dom: str, w: int, reqs: list, per_step: Fraction,
                        partial: set[str]) -> list:
    from ledger import Settlement
    from mechanisms.cost import StepRun, WEventCost

    costs: dict[Any, Any] = {}
    out = []
    for r in reqs:
        runs = r.runs
        if r.user_id in partial:  # the last step unused: a refund
            last = runs[-1]
            runs = (*runs[:-1], StepRun(last.start, last.stop - 1, last.epsilon))
        cost = costs.setdefault(runs, WEventCost(Fraction(w) * runs[0].epsilon, w, runs))
        out.append(Settlement(r.user_id, dom, r.step, cost, stream_id=r.stream_id))
    return out


def _stream_calls(led: Any) -> None:
    users = [f"u{i}" for i in range(8)]
    one, two = Fraction(1), Fraction(2)
    r1 = _stream_requests("own", 0, 19, None, one, users, gap={"u3"})
    r1 += _stream_requests("own", 0, 9, None, Fraction(3), ["big"])  # 15 > 10: denied
    led.reserve("s-1", r1, mechanism="m", parameters={"epsilon": "5"})
    led.reserve("s-1", r1, mechanism="m", parameters={"epsilon": "5"})  # replayed
    admitted = [r for r in r1 if r.user_id != "big"]
    sets = _stream_settlements("own", 5, admitted, one, partial={"u1", "u2", "u3"})
    led.settle("s-1", sets)
    led.settle("s-1", sets)  # settled earlier with the same cost: nothing written
    # the continuation: u0..u3 at 1 per step (cap holds), u4 at 2 per step (window 5+... denied)
    r2 = _stream_requests("own", 20, 29, 19, one, users[:4])
    r2 += _stream_requests("own", 20, 29, 19, two, users[4:6])
    led.reserve("s-2", r2, mechanism="m", parameters={"epsilon": "5"})
    led.settle("s-2", _stream_settlements("own", 5, r2[:3], one, partial={"u0"}))
    led.close("s-2", reason="operator")
    # u3's and u4's s-2 ranges were closed: their watermark is step 19 again; the replay of
    # s-3 sees the ranges before its own
    r3 = _stream_requests("own", 20, 24, 19, one, users[3:5])  # u3, u4: closed in s-2
    led.reserve("s-3", r3, mechanism="m", parameters={"epsilon": "5"})
    led.reserve("s-3", r3, mechanism="m", parameters={"epsilon": "5"})
    # per-user budget: two streams of one user share the windows (3 + 3 per step, w=4: 24 > 12)
    p1 = _stream_requests("user", 0, 5, None, Fraction(3, 2), ["a", "b"], sid="x")
    p1 += _stream_requests("user", 0, 5, None, Fraction(3, 2), ["a"], sid="y")
    p1 += _stream_requests("user", 3, 8, None, Fraction(3), ["c"], sid="y")
    p1 += _stream_requests("user", 0, 2, None, Fraction(1), ["c"], sid="x")
    led.reserve("p-1", p1, mechanism="m", parameters={"epsilon": "6"})
    led.settle("p-1", _stream_settlements(
        "user", 4, [r for r in p1 if r.user_id != "c"], Fraction(3, 2), partial={"b"}))
    # a's windows already hold 9 in steps 3..5: 4 more at step 6 is 13 > 12 (denied with its
    # other request); b refunded step 5, so 1.5 + 1.5 + 4 fits
    p2 = _stream_requests("user", 6, 6, None, Fraction(4), ["a", "b"], sid="z")
    p2 += _stream_requests("user", 10, 11, None, Fraction(1), ["a"], sid="w")
    led.reserve("p-2", p2, mechanism="m", parameters={"epsilon": "6"})


def _curve_calls(led: Any) -> None:
    from ledger import Request, Settlement
    from mechanisms.cost import Cost, CostItem

    half, third = Fraction(1, 2), Fraction(1, 3)
    reqs = [Request(f"c{i}", "curve", amount=half if i % 2 else third) for i in range(6)]
    reqs += [Request(f"c{i}", "zcdp", step="z", amount=Fraction(1)) for i in range(3)]
    reqs += [Request("c9", "curve", amount=Fraction(4))]  # above the cap: denied
    led.reserve("c-1", reqs, mechanism="m", parameters={"epsilon": "1"})
    full = Cost("gp", half, (CostItem("a", "gp", half / 2), CostItem("b", "gp", half / 2)))
    less = Cost("gp", third, (CostItem("a", "gp", third / 2),))
    gp1 = Cost("gp", Fraction(1), (CostItem("curve", "gp", Fraction(1)),))
    sets = [Settlement(f"c{i}", "curve", "release", full if i % 2 else less) for i in range(6)]
    sets += [Settlement(f"c{i}", "zcdp", "z", gp1) for i in range(2)]
    led.settle("c-1", sets)
    led.reserve("c-1", reqs, mechanism="m", parameters={"epsilon": "1"})  # replayed
    led.reserve("c-1", [Request("c9", "zcdp", step="z", amount=Fraction(1, 10))],
                mechanism="m", parameters={"epsilon": "1"})  # denied earlier in the release
    led.reserve("c-2", reqs[:4], mechanism="m", parameters={"epsilon": "1"})
    led.close("c-2", reason="operator")


def scenario(path: Path) -> Any:
    """Build the ledger at `path` (under a fixed clock and fixed entry ids); return it."""
    from ledger import Ledger
    from schemas.policy import parse_policy

    led = Ledger.init(path, actor="golden")
    led.apply_policy(parse_policy(POLICY))
    _stream_calls(led)
    _curve_calls(led)
    return led


TABLES = {
    "entries": "SELECT * EXCLUDE (amount, cap, balance_after), CAST(amount AS VARCHAR), "
               "CAST(cap AS VARCHAR), CAST(balance_after AS VARCHAR) FROM entries ORDER BY seq",
    "step_runs": "SELECT * EXCLUDE (amount), CAST(amount AS VARCHAR) FROM step_runs "
                 "ORDER BY ALL",
    "accounts": "SELECT * EXCLUDE (spent, cap), CAST(spent AS VARCHAR), CAST(cap AS VARCHAR) "
                "FROM accounts ORDER BY ALL",
    "releases": "SELECT * EXCLUDE (mac) FROM releases ORDER BY ALL",
    "chain_head": "SELECT last_seq, last_hash, counter FROM chain_head",
}


def dump(path: Path) -> dict[str, list[list[str | None]]]:
    """Every row of the compared tables, as text."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        return {t: [[None if v is None else str(v) for v in row]
                    for row in con.execute(sql).fetchall()] for t, sql in TABLES.items()}
    finally:
        con.close()


def test_rows_equal_those_of_92fa992(tmp_path: Path, monkeypatch: Any) -> None:
    """Same calls, same rows: entries (hashes included), runs, accounts, releases, head."""
    _fixed(monkeypatch)
    led = scenario(tmp_path / "l.duckdb")
    assert led.verify().ok
    want = json.loads(FIXTURE.read_text(encoding="utf-8"))
    got = dump(tmp_path / "l.duckdb")
    assert len(got["entries"]) == len(want["entries"]) > 60
    for table in TABLES:
        for k, (g, w) in enumerate(zip(got[table], want[table], strict=True)):
            assert g == w, f"{table} row {k}"


if __name__ == "__main__":  # write the fixture with the tree on PYTHONPATH
    import tempfile

    import pytest

    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        _fixed(mp)
        scenario(Path(d) / "l.duckdb").verify()
        Path(sys.argv[1]).write_text(json.dumps(dump(Path(d) / "l.duckdb"), indent=0),
                                     encoding="utf-8")


HOSTILE = ["ab" * 32, 'q"uote\\back', "é\u2028\x01\x1f tab\t", "\U0001f600 emoji", ""]


def test_claim_texts_are_what_json_dumps_writes() -> None:
    """The claim's signature and detail texts, written directly, equal `json.dumps`'s."""
    from ledger import StreamClaim, watermark

    for fp in HOSTILE:
        for wm in (None, 0, 7, 2**70):
            c = StreamClaim(3, 2**65, 12, fp, wm)
            cd = watermark.claim_detail(c)
            details, sigs = watermark.with_claims([{"runs": []}], ['["wevent", "d\\u00e9"]'], [c])
            assert sigs[0] == json.dumps(['["wevent", "d\\u00e9"]', cd], sort_keys=True)
            assert details[0] == {"runs": [], "stream_range": cd}
            assert watermark.claim_json(cd) == json.dumps(
                cd, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    odd = {"fingerprint": "x", "first_step": True, "last_step": 1, "steps": 1,
           "watermark_before": None}  # not what claim_detail makes: the encoder writes it
    assert watermark.claim_json(odd) == json.dumps(odd, sort_keys=True, separators=(",", ":"))


def test_hostile_claim_detail_round_trips(tmp_path: Path) -> None:
    """A reserve entry's detail, assembled from parts, parses back to the claim and verifies."""
    import duckdb

    from ledger import Ledger
    from schemas.policy import parse_policy

    led = Ledger.init(tmp_path / "l.duckdb", actor="t")
    led.apply_policy(parse_policy(POLICY))
    reqs = _stream_requests("own", 0, 9, None, Fraction(1, 3), ["u", "v"])
    reqs = [r.__class__(**{**r.__dict__, "stream_claim": r.stream_claim.__class__(
        0, 9, 10, fp, None)}) for r, fp in zip(reqs, HOSTILE[1:3], strict=True)]
    res = led.reserve("h", reqs, mechanism="m", parameters={})
    assert len(res.admitted) == 2 and led.verify().ok
    con = duckdb.connect(str(tmp_path / "l.duckdb"), read_only=True)
    rows = con.execute("SELECT detail FROM entries WHERE kind = 'reserve' ORDER BY seq").fetchall()
    con.close()
    for (text,), fp in zip(rows, HOSTILE[1:3], strict=True):
        d = json.loads(text)
        assert d["stream_range"] == {"fingerprint": fp, "first_step": 0, "last_step": 9,
                                     "steps": 10, "watermark_before": None}
        assert d["runs"] == [[0, 10, "1/3"]]
        assert text == json.dumps(d, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
