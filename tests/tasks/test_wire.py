"""The wire format: requests and answers round-trip exactly; malformed ones are refused by name."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tasks.privatize import CurveSpec, StreamSpec, privatize_curve_chunk, privatize_stream_chunk
from tasks.recheck import _plain, _table_bytes
from tasks.stage import CurveChunk, SeededSegment, StreamChunk
from tasks.wire import MAGIC, WireError, ipc_bytes, pack, read_table, unpack
from tasks.wire_chunk import decode_request, encode_curve_request, encode_stream_request
from tasks.wire_result import decode_result, encode_result, expected_schemas

COLS = ("x", "y")
TOKEN = "a-test-token-of-32-characters-ok"


def _curves() -> tuple[CurveChunk, CurveSpec]:
    rng = np.random.default_rng(3)
    t = np.tile(np.arange(60, dtype=float), 5)
    chunk = CurveChunk(2, ("a", "a", "b", "c", "d"), ("c0", "c1", "c0", "c0", "c0"), t,
                       rng.normal(size=(300, 2)), np.arange(6) * 60,
                       {"a": 2**255 + 3, "b": 1, "c": 2**128, "d": 99})
    return chunk, CurveSpec("privfuncseg", "0.5", None)


def _streams() -> tuple[StreamChunk, StreamSpec]:
    rng = np.random.default_rng(4)
    segs = ((SeededSegment(0, 19, False, 5), SeededSegment(20, 39, True, 2**250)),
            (SeededSegment(0, 39, True, 7),))
    return StreamChunk(1, ("m", "n"), ("s0", "s0"), np.tile(np.arange(40), 2),
                       rng.uniform(0, 1, 80), np.array([0, 40, 80]), segs), StreamSpec("1", 4)


def _same(a, b) -> None:
    assert a.index == b.index and a.costs == b.costs
    assert a.error_bounds == b.error_bounds and a.rms_bounds == b.rms_bounds
    assert set(a.tables) == set(b.tables)
    for name in a.tables:
        assert _table_bytes(_plain(a.tables[name])) == _table_bytes(_plain(b.tables[name]))


def test_a_curve_chunk_round_trips_to_the_local_result():
    chunk, spec = _curves()
    req = decode_request(encode_curve_request(chunk, COLS, spec))
    assert req.spec == spec and req.value_columns == COLS and req.chunk.seeds == chunk.seeds
    local = privatize_curve_chunk(chunk, COLS, spec)
    remote = privatize_curve_chunk(req.chunk, req.value_columns, req.spec)
    _same(remote, local)
    answer = decode_result(encode_result("curves", remote), chunk, spec, COLS)
    _same(answer, local)
    for name, schema in expected_schemas("curves", COLS).items():
        assert local.tables[name].schema.equals(schema, check_metadata=True)


def test_a_stream_chunk_round_trips_to_the_local_result():
    chunk, spec = _streams()
    req = decode_request(encode_stream_request(chunk, spec))
    assert req.chunk.segments == chunk.segments
    local = privatize_stream_chunk(chunk, spec)
    _same(decode_result(encode_result("streams", privatize_stream_chunk(req.chunk, req.spec)),
                        chunk, spec), local)


def _edit_request(body: bytes, fn) -> bytes:
    header, parts = unpack(body, max_parts=3)
    header.pop("wire"), header.pop("parts")
    parts = [bytes(p) for p in parts]
    fn(header, parts)
    return pack(header, parts)


def _seeds_of_one_user(header, parts) -> None:
    parts[2] = ipc_bytes(pa.table({"user_id": pa.array(["a"]),
                                   "seed": pa.array([bytes(32)], pa.binary(32))}))


def _unknown_mechanism(header, parts) -> None:
    header["spec"]["mechanism"] = "os.system"


def _points_off(header, parts) -> None:
    items = pa.ipc.open_stream(parts[0]).read_all()
    parts[0] = ipc_bytes(items.set_column(2, "points", pa.array([1] * items.num_rows)))


@pytest.mark.parametrize("fn,why", [
    (_seeds_of_one_user, "not one seed for each user"),
    (_unknown_mechanism, "the spec is refused"),
    (_points_off, "point counts do not match"),
    (lambda h, p: h.update(kind="pickle"), "kind curves|streams"),
    (lambda h, p: h.update(value_columns=[1]), "value_columns"),
])
def test_a_malformed_request_is_refused_by_name(fn, why):
    chunk, spec = _curves()
    with pytest.raises(WireError, match=why):
        decode_request(_edit_request(encode_curve_request(chunk, COLS, spec), fn))


def test_an_envelope_is_checked_before_use():
    with pytest.raises(WireError, match="wrong magic"):
        unpack(b"\x80\x04pickle", max_parts=1)
    with pytest.raises(WireError, match="at most 1"):
        unpack(pack({}, [b"", b""]), max_parts=1)
    with pytest.raises(WireError, match="must be finite"):
        text = b'{"wire":1,"parts":[],"x":Infinity}'
        unpack(MAGIC + len(text).to_bytes(8, "big") + text, max_parts=1)


def test_a_table_with_field_metadata_is_refused():
    schema = pa.schema([("x", pa.int64())])
    field = pa.field("x", pa.int64(),
                     metadata={b"ARROW:extension:name": b"arrow.py_extension_type"})
    table = pa.table([pa.array([1])], schema=pa.schema([field]))
    with pytest.raises(WireError, match="schema"):
        read_table(ipc_bytes(table), schema, "t")
    assert read_table(ipc_bytes(pa.table({"x": [1]})), schema, "t", rows=1).num_rows == 1
    with pytest.raises(WireError, match="2 rows instead of 1"):
        read_table(ipc_bytes(pa.table({"x": [1, 2]})), schema, "t", rows=1)


def test_the_worker_app_answers_and_refuses():
    import asyncio

    import httpx

    from flows.worker_serve import make_app

    chunk, spec = _curves()
    body = encode_curve_request(chunk, COLS, spec)
    auth = {"authorization": f"Bearer {TOKEN}"}
    empty = CurveChunk(5, (), (), np.empty(0), np.empty((0, 2)), np.zeros(1, np.int64), {})

    async def calls() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=make_app(token=TOKEN, max_request=len(body)))
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            return [
                await client.post("/v1/chunk", content=body),
                await client.post("/v1/chunk", content=body,
                                  headers={"authorization": f"Bearer {TOKEN[:-1]}x"}),
                await client.post("/v1/chunk", content=body + b"x", headers=auth),
                await client.post("/v1/chunk", content=b"\x80\x04x", headers=auth),
                await client.post("/v1/chunk", content=body, headers=auth),
                await client.post("/v1/chunk", headers=auth,
                                  content=encode_curve_request(empty, COLS, spec)),
                await client.get("/v1/health"),
            ]

    no_token, bad_token, too_big, malformed, ok, failed, health = asyncio.run(calls())
    assert [r.status_code for r in (no_token, bad_token, too_big, malformed)] == [
        401, 401, 413, 400]
    assert ok.status_code == 200
    _same(decode_result(ok.content, chunk, spec, COLS),
          privatize_curve_chunk(chunk, COLS, spec))
    assert failed.status_code == 422 and failed.json()["item_id"] == "chunk 5"
    assert health.json() == {"wire": 1}


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_compressed_batches_are_refused_before_decompression(codec):
    table = pa.table({"x": pa.array(np.zeros(100_000)),
                      "d": pa.array(["a", "b"] * 50_000).dictionary_encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema,
                           options=pa.ipc.IpcWriteOptions(compression=codec)) as writer:
        writer.write_table(table)
    with pytest.raises(WireError, match="compressed IPC buffers"):
        read_table(sink.getvalue().to_pybytes(), table.schema, "t")
    assert read_table(ipc_bytes(table), table.schema, "t").equals(table)
