"""`privpipe ledger backup --ledger https://...`: an online, verified backup through the service.

While `ledger serve` runs it holds the ledger file, so a backup of the file
waits and gives up; through the service, the backup is taken from the held
database while releases run (reserved and not settled, and a writer charging
meanwhile), streamed, verified again by the client, and restorable with
`ledger restore`. Attacks, each refused: a releaser (403), no or an unknown
token (401), an auditor asking for the secret keys (403), a wrong public key
(nothing kept), a store file edited on the server (nothing kept).
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import shutil
import ssl
import tarfile
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest
from ledger_helpers import chain_of
from ledger_helpers import ledger_cli as _cli
from served_helpers import Served, serve_new_ledger

from ledger import Ledger, Request
from ledger.published import store_dir
from ledger.remote import RemoteLedger
from schemas.errors import EXIT_BAD_INPUT, EXIT_INTEGRITY

DATA = b"PAR1 samples kept by the served ledger " * 40
SHA = hashlib.sha256(DATA).hexdigest()
NAME = "samples.parquet"
KEY_FILES = ("ledger.duckdb.key", "ledger.duckdb.sign", "ledger.duckdb.pub",
             "ledger.duckdb.pin")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Served:
    served = serve_new_ledger(tmp_path_factory.mktemp("served"))
    a = _remote(served, "rel-a")
    a.reserve("kept", [Request("u1", "ais", amount=Fraction(1, 100))], mechanism="test",
              parameters={})
    a.record_release("kept", {"flow": "release_streams", "sha256": {NAME: SHA}}, "settled")
    a.put_published("kept", NAME, DATA)
    yield served
    served.stop()


def _remote(served: Served, who: str) -> RemoteLedger:
    return RemoteLedger(served.url, token=served.tokens[who], ca=str(served.ca),
                        retry_seconds=5)


def _as(monkeypatch, served: Served, who: str | None) -> None:
    monkeypatch.setenv("PRIVPIPE_LEDGER_CA", str(served.ca))
    monkeypatch.setenv("PRIVPIPE_LEDGER_RETRY_SECONDS", "5")
    monkeypatch.delenv("PRIVPIPE_LEDGER_TOKEN_FILE", raising=False)
    if who is None:
        monkeypatch.delenv("PRIVPIPE_LEDGER_TOKEN", raising=False)
    else:
        monkeypatch.setenv("PRIVPIPE_LEDGER_TOKEN", served.tokens[who])


def _balances(led) -> list[tuple]:
    return sorted((b["user_id"], b["domain"], str(b["spent"])) for b in led.balances())


def test_a_file_backup_of_a_served_ledger_gives_up_on_the_lock(server, tmp_path):
    """The reason for the route: the service holds the file."""
    with pytest.raises(Exception, match="another process holds the ledger file"):
        Ledger(server.ledger, lock_timeout=0.5).backup(tmp_path / "b")


def test_a_backup_through_the_service_while_releases_run_is_restorable(server, tmp_path,
                                                                       monkeypatch):
    a, b = _remote(server, "rel-a"), _remote(server, "rel-b")
    a.reserve("open", [Request("u2", "ais", amount=Fraction(1, 100))], mechanism="test",
              parameters={})  # reserved, not settled: a release in progress
    stop, charged = threading.Event(), []

    def charge() -> None:  # another release charging while the backups are taken
        while not stop.is_set():
            rid = f"bg-{len(charged)}"
            b.reserve(rid, [Request(f"v{len(charged)}", "ais", amount=Fraction(1, 1000))],
                      mechanism="test", parameters={})
            charged.append(rid)

    writer = threading.Thread(target=charge)
    writer.start()
    _as(monkeypatch, server, "adm")
    try:
        while len(charged) < 3:
            time.sleep(0.01)
        code, out = _cli("backup", "--ledger", server.url, "--out", tmp_path / "b1")
        assert code == 0, out
        during = len(charged)
    finally:
        stop.set()
        writer.join()
    assert during > 3 or len(charged) > during, "the writer charged while the backup ran"
    code, out = _cli("backup", "--ledger", server.url, "--out", tmp_path / "b2",
                     "--include-keys")
    assert code == 0, out
    assert "1 published files" in out and "keys included" in out
    first, second = (chain_of(tmp_path / b / "ledger.duckdb") for b in ("b1", "b2"))
    assert second[:len(first)] == first  # one consistent prefix of the served chain
    manifest = json.loads((tmp_path / "b2" / "manifest.json").read_text())
    assert [p["file"] for p in manifest["published"]] == [f"{SHA}.parquet"]
    assert manifest["includes_keys"] is True

    host = tmp_path / "host"
    host.mkdir(mode=0o700)
    for name in KEY_FILES:
        shutil.copy2(tmp_path / "b2" / name, host / name)
    code, out = _cli("restore", tmp_path / "b2", "--ledger", host / "ledger.duckdb")
    assert code == 0, out
    restored = Ledger(host / "ledger.duckdb")
    assert restored.verify().ok
    assert restored.release("open")["state"] == "reserved"
    assert chain_of(host / "ledger.duckdb") == second
    assert _balances(restored) == _balances(_remote(server, "aud"))
    assert restored.published("kept", NAME, tmp_path / "copy").read_bytes() == DATA


def _get(served: Served, token: str | None, route: str = "/v1/backup?keys=0") -> int:
    ctx = ssl.create_default_context(cafile=str(served.ca))
    host, port = served.url.removeprefix("https://").split(":")
    con = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
    try:
        con.request("GET", route, headers={} if token is None else {
            "Authorization": f"Bearer {token}"})
        resp = con.getresponse()
        resp.read()
        return resp.status
    finally:
        con.close()


def test_roles_and_credentials(server, tmp_path, monkeypatch):
    assert _get(server, None) == 401
    assert _get(server, "not-a-token") == 401
    assert _get(server, server.tokens["rel-a"]) == 403
    assert _get(server, server.tokens["aud"], "/v1/backup?keys=1") == 403
    assert _get(server, server.tokens["adm"], "/v1/backup?keys=yes") == 400
    _as(monkeypatch, server, "rel-a")
    code, out = _cli("backup", "--ledger", server.url, "--out", tmp_path / "r")
    assert code == EXIT_BAD_INPUT and "admin or auditor role" in out
    assert os.listdir(tmp_path / "r") == []
    _as(monkeypatch, server, "aud")
    code, out = _cli("backup", "--ledger", server.url, "--out", tmp_path / "k", "--include-keys")
    assert code == EXIT_BAD_INPUT and "needs the admin role" in out.replace("\n", " ")
    code, out = _cli("backup", "--ledger", server.url, "--out", tmp_path / "a")
    assert code == 0, out
    assert "keys NOT included" in out
    assert sorted(os.listdir(tmp_path / "a")) == ["ledger.duckdb", "manifest.json", "published"]
    _as(monkeypatch, server, None)
    code, out = _cli("backup", "--ledger", server.url, "--out", tmp_path / "n")
    assert code == EXIT_BAD_INPUT


def test_a_wrong_public_key_or_an_edited_store_file_keeps_nothing(server, tmp_path,
                                                                  monkeypatch):
    other = Ledger.init(tmp_path / "other" / "ledger.duckdb")
    _as(monkeypatch, server, "aud")
    code, out = _cli("backup", "--ledger", server.url, "--out", tmp_path / "w",
                     "--public-key", f"{other.path}.pub")
    assert code == EXIT_INTEGRITY and os.listdir(tmp_path / "w") == []
    code, out = _cli("backup", "--ledger", server.url, "--out", tmp_path / "p",
                     "--public-key", f"{server.ledger}.pub")
    assert code == 0, out
    stored = store_dir(server.ledger) / f"{SHA}.parquet"
    try:
        stored.write_bytes(DATA.replace(b"kept", b"KEPT"))  # edited on the server's disk
        code, out = _cli("backup", "--ledger", server.url, "--out", tmp_path / "e")
        assert code == EXIT_INTEGRITY and "kept/samples.parquet" in out.replace("\n", "")
        assert os.listdir(tmp_path / "e") == []
        assert not list(Path(server.ledger).parent.glob(".served-backup-*"))
    finally:
        stored.unlink(missing_ok=True)
        _remote(server, "adm").put_published("kept", NAME, DATA)


@pytest.mark.parametrize("name,kind", [("../evil", tarfile.REGTYPE),
                                       ("published/../../evil", tarfile.REGTYPE),
                                       ("ledger.duckdb", tarfile.SYMTYPE),
                                       ("notes.txt", tarfile.REGTYPE)])
def test_a_tar_member_that_is_not_a_backup_file_is_refused(tmp_path, name, kind):
    """Attack: the answer names a path outside --out, a link, or a file a backup has not."""
    from ledger.errors import LedgerIntegrityError
    from ledger.remote_backup import _extract

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        if kind == tarfile.SYMTYPE:
            info.linkname = "/etc/passwd"
            tar.addfile(info)
        else:
            info.size = 4
            tar.addfile(info, io.BytesIO(b"evil"))
    out = tmp_path / "sub" / "out"
    out.mkdir(parents=True)
    with pytest.raises(LedgerIntegrityError, match="not a file of a backup"):
        _extract(io.BytesIO(buf.getvalue()), out)
    assert os.listdir(out) == [] and os.listdir(tmp_path / "sub") == ["out"]
