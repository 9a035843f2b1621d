"""The export tables on the wire between `privpipe ledger serve` and `RemoteLedger.export`.

Body: one line of JSON, ``{"tables": [{"name": NAME, "bytes": N}, ...]}``,
then each table's Arrow IPC stream (N bytes) in that order. The client writes
the decoded tables with `ledger.queries.write_export`, the code the embedded
`Ledger.export` uses, so the files are the same.
"""

from __future__ import annotations

import json

import pyarrow as pa

from ledger.errors import LedgerInternalError


def encode_tables(tables: dict[str, pa.Table]) -> bytes:
    """The body of a tables answer."""
    parts = []
    for tbl in tables.values():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, tbl.schema) as writer:
            writer.write_table(tbl)
        parts.append(sink.getvalue().to_pybytes())
    header = {"tables": [{"name": n, "bytes": len(b)} for n, b in zip(tables, parts,
                                                                      strict=True)]}
    return json.dumps(header).encode("utf-8") + b"\n" + b"".join(parts)


def decode_tables(body: bytes, expected: list[str]) -> dict[str, pa.Table]:
    """The tables of an answer, which must be exactly `expected`, in that order.

    Raises:
        LedgerInternalError: a body that is not a tables answer (wrong header,
            lengths, names, or an unreadable IPC stream).
    """
    line, _, rest = body.partition(b"\n")
    try:
        entries = json.loads(line)["tables"]
        names = [str(e["name"]) for e in entries]
        sizes = [int(e["bytes"]) for e in entries]
    except (ValueError, KeyError, TypeError) as err:
        raise LedgerInternalError(f"the ledger service's tables answer has no valid header "
                                  f"({type(err).__name__})") from None
    if names != expected or sum(sizes) != len(rest) or min(sizes, default=0) < 0:
        raise LedgerInternalError(f"the ledger service answered tables {names} of "
                                  f"{sum(sizes)} bytes; expected {expected} in "
                                  f"{len(rest)} bytes")
    out, at = {}, 0
    for name, size in zip(names, sizes, strict=True):
        try:
            out[name] = pa.ipc.open_stream(pa.py_buffer(rest[at:at + size])).read_all()
        except (pa.ArrowInvalid, OSError) as err:
            raise LedgerInternalError(f"the ledger service's table {name!r} cannot be read: "
                                      f"{err}") from None
        at += size
    return out
