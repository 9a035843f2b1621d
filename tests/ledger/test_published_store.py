"""The ledger's store of published files (`ledger.published`), embedded and served.

Attacks, each refused: bytes that are not the file the manifest names (ledger
and store untouched), a releaser keeping files of another client's release
(403), an auditor writing, a stored file edited on disk (detected on read,
nothing left at the destination), symlinks planted in the store (never
followed), an upload over the size cap (413).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import ssl
from fractions import Fraction

import pytest
from served_helpers import Served, serve_new_ledger

from ledger import Ledger, PublishedFileError, Request
from ledger.published import store_dir, stored_files
from ledger.remote import LedgerAccessError, RemoteLedger
from schemas.errors import OutputIntegrityError

DATA = b"PAR1 published samples of one release " * 50
SHA = hashlib.sha256(DATA).hexdigest()
NAME = "samples.parquet"


def _manifest(sha: str = SHA) -> dict:
    return {"flow": "release_streams", "files": {"samples": NAME}, "sha256": {NAME: sha}}


def _settle_release(led, rid: str) -> None:
    """A release reserved and recorded as settled through `led`, naming DATA's digest."""
    led.reserve(rid, [Request("u1", "ais", amount=Fraction(1, 100))], mechanism="test",
                parameters={"rid": rid})
    led.record_release(rid, _manifest(), "settled")


@pytest.fixture()
def led(tmp_path, policy) -> Ledger:
    led = Ledger.init(tmp_path / "led" / "ledger.duckdb", actor="adm")
    led.apply_policy(policy)
    return led


def test_kept_once_by_digest_and_read_back_checked(led, tmp_path):
    _settle_release(led, "r1")
    assert led.put_published("r1", NAME, DATA) == {"sha256": SHA, "size": len(DATA),
                                                   "stored": True}
    assert led.put_published("r1", NAME, DATA)["stored"] is False  # idempotent
    store = store_dir(led.path)
    assert os.listdir(store) == [f"{SHA}.parquet"]
    assert (store.stat().st_mode & 0o777, (store / f"{SHA}.parquet").stat().st_mode & 0o777) == (
        0o700, 0o600)
    assert led.published("r1", NAME, tmp_path / "copy").read_bytes() == DATA


def test_bytes_not_named_by_the_manifest_are_refused_and_nothing_changes(led, tmp_path):
    _settle_release(led, "r1")
    head = led.head()
    with pytest.raises(PublishedFileError, match="not the file its manifest"):
        led.put_published("r1", NAME, DATA + b"x")
    with pytest.raises(PublishedFileError, match="names no file"):
        led.put_published("r1", "other.parquet", DATA)
    led.reserve("r2", [Request("u2", "ais", amount=Fraction(1, 100))], mechanism="test",
                parameters={})
    with pytest.raises(PublishedFileError, match="not settled"):
        led.put_published("r2", NAME, DATA)  # reserved only: its outputs are not published
    assert os.listdir(store_dir(led.path)) == []  # not even a temporary file is left
    assert led.verify().ok
    assert led.head().seq == head.seq + 1  # only r2's reserve was written


def test_an_auditor_cannot_keep_files(led):
    _settle_release(led, "r1")
    with pytest.raises(Exception, match="auditor"):
        Ledger.open_auditor(led.path).put_published("r1", NAME, DATA)


def test_a_stored_file_edited_on_disk_is_detected_and_not_used(led, tmp_path):
    _settle_release(led, "r1")
    led.put_published("r1", NAME, DATA)
    stored = store_dir(led.path) / f"{SHA}.parquet"
    stored.write_bytes(DATA.replace(b"one", b"two"))  # the attack: same size, other bytes
    with pytest.raises(OutputIntegrityError, match="does not match the SHA-256"):
        led.published("r1", NAME, tmp_path / "copy")
    assert not (tmp_path / "copy").exists() and os.listdir(tmp_path) == ["led"]
    assert stored_files(store_dir(led.path)) == []  # a backup leaves it out too
    led.put_published("r1", NAME, DATA)  # keeping the genuine bytes again repairs it
    assert led.published("r1", NAME, tmp_path / "copy").read_bytes() == DATA


def test_symlinks_planted_in_the_store_are_not_followed(led, tmp_path):
    _settle_release(led, "r1")
    secret = tmp_path / "secret"
    secret.write_bytes(DATA)  # even the right bytes are not read through a link
    store = store_dir(led.path)
    store.mkdir(mode=0o700)
    (store / f"{SHA}.parquet").symlink_to(secret)
    with pytest.raises(OutputIntegrityError, match="without following a link"):
        led.published("r1", NAME, tmp_path / "copy")
    led.put_published("r1", NAME, DATA)  # the rename replaces the link, never writes through it
    assert not (store / f"{SHA}.parquet").is_symlink() and secret.read_bytes() == DATA
    # a symlink in place of the store directory itself: refused, nothing written through it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (store / f"{SHA}.parquet").unlink()
    store.rmdir()
    store.symlink_to(elsewhere)
    with pytest.raises(PublishedFileError, match="is a symlink"):
        led.put_published("r1", NAME, DATA)
    with pytest.raises(PublishedFileError, match="is a symlink"):
        led.published("r1", NAME, tmp_path / "copy")
    assert os.listdir(elsewhere) == []


# ------------------------------------------------------------------ served


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Served:
    served = serve_new_ledger(tmp_path_factory.mktemp("served"), ("--max-published-mb", "1"))
    yield served
    served.stop()


def _remote(served: Served, who: str) -> RemoteLedger:
    return RemoteLedger(served.url, token=served.tokens[who], ca=str(served.ca),
                        retry_seconds=5)


def test_served_owner_keeps_and_any_role_reads(server, tmp_path):
    a = _remote(server, "rel-a")
    _settle_release(a, "s1")
    assert a.put_published("s1", NAME, DATA)["stored"] is True
    assert a.put_published("s1", NAME, DATA)["stored"] is False
    path = tmp_path / "samples.parquet"
    path.write_bytes(DATA)
    assert a.put_published("s1", NAME, path)["sha256"] == SHA  # streamed from a file
    got = _remote(server, "aud").published("s1", NAME, tmp_path / "copy")
    assert got.read_bytes() == DATA


def test_served_attacks_are_refused(server, tmp_path):
    a, b = _remote(server, "rel-a"), _remote(server, "rel-b")
    data = DATA + b"s2"  # bytes no other test keeps (the store is content-addressed)
    a.reserve("s2", [Request("u1", "ais", amount=Fraction(1, 100))], mechanism="test",
              parameters={})
    a.record_release("s2", _manifest(hashlib.sha256(data).hexdigest()), "settled")
    head = a.head()
    store = store_dir(server.ledger)
    before = sorted(os.listdir(store)) if store.exists() else []
    with pytest.raises(PublishedFileError, match="not the file its manifest"):
        a.put_published("s2", NAME, DATA)  # bytes the manifest does not name: 422
    with pytest.raises(LedgerAccessError, match="belongs to another client"):
        b.put_published("s2", NAME, data)  # another releaser: 403, even with the right bytes
    with pytest.raises(LedgerAccessError, match="releaser or admin role"):
        _remote(server, "aud").put_published("s2", NAME, data)
    with pytest.raises(PublishedFileError, match="keeps no copy"):
        b.published("s2", NAME, tmp_path / "copy")  # nothing was kept by the refused calls
    assert (sorted(os.listdir(store)) if store.exists() else []) == before
    assert a.head() == head and a.verify().ok
    _remote(server, "adm").put_published("s2", NAME, data)  # an admin may keep any release's


def test_served_edited_store_file_is_refused_by_the_client(server, tmp_path):
    a = _remote(server, "rel-a")
    _settle_release(a, "s3")
    a.put_published("s3", NAME, DATA)
    stored = store_dir(server.ledger) / f"{SHA}.parquet"
    original = stored.read_bytes()
    try:
        stored.write_bytes(original.replace(b"one", b"two"))
        with pytest.raises(OutputIntegrityError, match="does not match"):
            a.published("s3", NAME, tmp_path / "copy")
        assert not (tmp_path / "copy").exists()
        stored.unlink()
        stored.symlink_to(tmp_path / "plant")  # a link in the store: the service refuses it
        (tmp_path / "plant").write_bytes(original)
        with pytest.raises(OutputIntegrityError, match="without following a link"):
            a.published("s3", NAME, tmp_path / "copy")
    finally:
        stored.unlink(missing_ok=True)
        a.put_published("s3", NAME, DATA)


def _raw_put(server: Served, token: str, path: str, body: bytes) -> int:
    ctx = ssl.create_default_context(cafile=str(server.ca))
    host, port = server.url.removeprefix("https://").split(":")
    con = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
    try:
        con.request("PUT", path, body=body, headers={"Authorization": f"Bearer {token}"})
        resp = con.getresponse()
        resp.read()
        return resp.status
    finally:
        con.close()


def test_served_size_cap_and_credentials(server):
    a = _remote(server, "rel-a")
    _settle_release(a, "s4")
    route = f"/v1/published/s4/{NAME}"
    assert _raw_put(server, server.tokens["rel-a"], route, b"x" * (2 << 20)) == 413
    assert _raw_put(server, "not-a-token", route, DATA) == 401
    assert _raw_put(server, server.tokens["rel-a"], "/v1/published/..%2Fx/" + NAME, DATA) in (
        400, 404)
    assert _raw_put(server, server.tokens["rel-a"], route, DATA) == 200
