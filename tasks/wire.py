"""The privpipe worker wire format, version 1: an envelope of JSON and Arrow IPC, never pickle.

A chunk request (flow -> worker) and a chunk answer (worker -> flow) are both
one *envelope*::

    "PRIVPIPE-WIRE/1" and a newline           16 bytes
    header length                             8 bytes, unsigned big-endian
    header                                    UTF-8 JSON object (no NaN / Infinity)
    part 0, part 1, ...                       the byte lengths listed in header["parts"]

Each part is one uncompressed Arrow IPC *stream* (schema then record batches;
a batch declaring compressed buffers is refused before anything is
decompressed, so no decompression bomb). The header
says what the parts are (`tasks.wire_chunk` for requests, `tasks.wire_result`
for answers). Decoding uses only `json` and `pyarrow.ipc`: no pickle, no
class named by the sender is ever imported or built, and every table read is
checked against the schema the reader expects (names, types, no metadata;
`read_table`), then fully validated (`Table.validate(full=True)`) before any
value is used. Anything else is a `WireError` naming what is wrong, never a
value.

Guarantee: a sender controls only bytes that are parsed as JSON or as Arrow
IPC of a fixed schema; a malformed envelope fails with `WireError`.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pyarrow as pa

__all__ = ["MAGIC", "WIRE_VERSION", "WireError", "ipc_bytes", "pack", "read_table", "unpack"]

MAGIC = b"PRIVPIPE-WIRE/1\n"
WIRE_VERSION = 1
_LEN = 8


class WireError(ValueError):
    """A request or answer that is not a well-formed envelope of the expected tables."""


def _refuse_constant(name: str) -> Any:
    raise WireError(f"the header holds {name}: JSON numbers must be finite")


def pack(header: dict[str, Any], parts: list[bytes]) -> bytes:
    """One envelope: `header` (plus ``wire`` and ``parts``) as JSON, then the parts."""
    head = {**header, "wire": WIRE_VERSION, "parts": [len(p) for p in parts]}
    text = json.dumps(head, allow_nan=False, separators=(",", ":")).encode("utf-8")
    return b"".join([MAGIC, len(text).to_bytes(_LEN, "big"), text, *parts])


def unpack(body: bytes, *, max_parts: int) -> tuple[dict[str, Any], list[memoryview]]:
    """The header and parts of an envelope; every length is checked against the body.

    Raises:
        WireError: a wrong magic or version, a header that is not a JSON object
            of finite numbers, more than `max_parts` parts, or lengths that do not
            add up to the body exactly.
    """
    view = memoryview(body)
    if bytes(view[:len(MAGIC)]) != MAGIC:
        raise WireError("not a privpipe wire envelope (wrong magic; a version 1 peer?)")
    start = len(MAGIC) + _LEN
    if len(view) < start:
        raise WireError("the envelope is truncated")
    size = int.from_bytes(view[len(MAGIC):start], "big")
    if size > len(view) - start:
        raise WireError("the header length exceeds the envelope")
    try:
        header = json.loads(bytes(view[start:start + size]).decode("utf-8"),
                            parse_constant=_refuse_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise WireError(f"the header is not JSON ({type(err).__name__})") from None
    if not isinstance(header, dict) or header.get("wire") != WIRE_VERSION:
        raise WireError(f"the header is not a version {WIRE_VERSION} JSON object")
    lengths = header.get("parts")
    if (not isinstance(lengths, list) or len(lengths) > max_parts
            or not all(type(n) is int and n >= 0 for n in lengths)):
        raise WireError(f"the header's parts are not a list of at most {max_parts} lengths")
    at = start + size
    if sum(lengths) != len(view) - at:
        raise WireError("the parts' lengths do not add up to the envelope's size")
    parts = []
    for n in lengths:
        parts.append(view[at:at + n])
        at += n
    return header, parts


def ipc_bytes(table: pa.Table) -> bytes:
    """`table` as one uncompressed Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _at(b: bytes, fmt: str, pos: int) -> int:
    if not 0 <= pos <= len(b) - struct.calcsize(fmt):
        raise WireError("an IPC message's metadata points outside itself")
    return int(struct.unpack_from(fmt, b, pos)[0])


def _field(b: bytes, table: int, i: int) -> int | None:
    """Where field `i` of the flatbuffer table at `table` is, or None when it is absent."""
    vtable = table - _at(b, "<i", table)
    if 4 + 2 * i + 2 > _at(b, "<H", vtable):
        return None
    offset = _at(b, "<H", vtable + 4 + 2 * i)
    return table + offset if offset else None


def _is_compressed(meta: bytes, kind: str) -> bool:
    """Whether a record or dictionary batch message declares compressed buffers.

    Reads the flatbuffer of the Arrow IPC ``Message`` (Message.header, field 2;
    a DictionaryBatch's data, field 1; RecordBatch.compression, field 3)
    without decompressing anything.
    """
    header = _field(meta, _at(meta, "<I", 0), 2)
    if header is None:
        raise WireError("an IPC message without a header")
    batch = header + _at(meta, "<I", header)
    if kind == "dictionary":
        data = _field(meta, batch, 1)
        if data is None:
            raise WireError("a dictionary batch without data")
        batch = data + _at(meta, "<I", data)
    return _field(meta, batch, 3) is not None


def _refuse_compression(buf: pa.Buffer, what: str) -> None:
    """Refuse compressed batches before pyarrow decompresses them (no decompression bomb)."""
    reader = pa.ipc.MessageReader.open_stream(buf)
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            return
        if message.type in ("record batch", "dictionary") and _is_compressed(
                message.metadata.to_pybytes(), message.type):
            raise WireError(f"{what}: compressed IPC buffers (the wire format is uncompressed)")


def read_table(part: memoryview | bytes, schema: pa.Schema, what: str,
               rows: int | None = None) -> pa.Table:
    """The Arrow IPC stream `part` as a table of exactly `schema` (and `rows` rows, if given).

    Compressed batches are refused before anything is decompressed; the stream's
    schema must equal `schema` with no schema or field metadata (so no
    extension type is ever built); the table is then fully validated (offsets,
    dictionary indices, UTF-8) before it is returned.

    Raises:
        WireError: naming `what`, for anything else.
    """
    try:
        buf = pa.py_buffer(part)
        _refuse_compression(buf, what)
        reader = pa.ipc.open_stream(buf)
        got = reader.schema
        if not got.equals(schema, check_metadata=True) or got.metadata:
            raise WireError(f"{what}: schema {_names(got)} instead of {_names(schema)}")
        table = reader.read_all()
        table.validate(full=True)
    except WireError:
        raise
    except (pa.ArrowException, ValueError, TypeError, OSError, MemoryError, struct.error,
            IndexError) as err:
        raise WireError(f"{what}: not a valid Arrow IPC stream ({type(err).__name__})") from None
    if rows is not None and table.num_rows != rows:
        raise WireError(f"{what}: {table.num_rows} rows instead of {rows}")
    return table


def _names(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"
