"""`privpipe ledger export` through the ledger service: the files the embedded ledger writes.

The service sends the export tables (Arrow IPC, ``GET /v1/tables/<table>``) and
the client writes them with the embedded ledger's code; an auditor credential
is enough; a missing or refused token is 401 and an unknown table exit 2.
"""

from __future__ import annotations

import http.client
import ssl
import subprocess
from fractions import Fraction

from ledger_helpers import POLICY, PYTHON
from served_helpers import start_server

from ledger import Ledger, Request, Settlement
from mechanisms.cost import Cost, CostItem
from schemas.policy import parse_policy


def _ledger(tmp_path):
    path = tmp_path / "led" / "ledger.duckdb"
    led = Ledger.init(path, actor="pytest")
    led.apply_policy(parse_policy(POLICY, source="p"))
    reqs = [Request(f"u{i}", "ais", amount=Fraction(1, 3)) for i in range(4)]
    led.reserve("x1", reqs, mechanism="curves_gp", parameters={"epsilon": "1/3"})
    third = Fraction(1, 3)
    led.settle("x1", [Settlement("u1", "ais", "release",
                                 Cost("gp", third, (CostItem("s", "gp", third),)))])
    led.reserve("x2", [Request("u1", "ais", amount=Fraction(1))], mechanism="curves_gp",
                parameters={"epsilon": "1"})  # denied: u1 has 2/3 left
    return path


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_export_through_the_service_writes_the_embedded_files(tmp_path):
    path = _ledger(tmp_path)
    served = start_server(path, tmp_path / "srv")
    env = served.env("aud")
    (tmp_path / "served").mkdir()
    (tmp_path / "embedded").mkdir()
    try:
        for fmt in ("csv", "parquet", "json"):
            for table in ("entries", "all"):
                r = subprocess.run([PYTHON, "-m", "flows.cli", "ledger", "export", "--ledger",
                                    served.url, "--format", fmt, "--table", table, "--out",
                                    str(tmp_path / "served" / f"{table}.{fmt}")],
                                   env=env, capture_output=True, text=True, timeout=120)
                assert r.returncode == 0, r.stderr
        bad = subprocess.run([PYTHON, "-m", "flows.cli", "ledger", "export", "--ledger",
                              served.url, "--table", "keys", "--out", str(tmp_path / "k")],
                             env=env, capture_output=True, text=True, timeout=120)
        ctx = ssl.create_default_context(cafile=str(served.ca))
        statuses = {}
        for token, table in (("", "entries"), ("wrong", "entries"),
                             (served.tokens["aud"], "keys")):
            con = http.client.HTTPSConnection("127.0.0.1", int(served.url.rsplit(":", 1)[1]),
                                              context=ctx, timeout=30)
            con.request("GET", f"/v1/tables/{table}", headers={"Authorization": f"Bearer {token}"})
            statuses[(token[:5], table)] = con.getresponse().status
            con.close()
    finally:
        served.stop()
    assert bad.returncode == 2 and "export table must be one of" in bad.stderr
    assert list(statuses.values()) == [401, 401, 422]
    emb = Ledger(path)
    for fmt in ("csv", "parquet", "json"):
        for table in ("entries", "all"):
            emb.export(tmp_path / "embedded" / f"{table}.{fmt}", fmt=fmt, what=table)
    served_files, embedded_files = _files(tmp_path / "served"), _files(tmp_path / "embedded")
    assert len(embedded_files) == 3 + 4 * 3 and served_files == embedded_files
    assert b"x2" in embedded_files["entries.csv"]  # the denial is in the audit log
