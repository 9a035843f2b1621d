"""``GET /v1/tables/<table>`` of `privpipe ledger serve`: the export tables, as Arrow IPC.

`privpipe ledger export --ledger https://...` asks the service for the tables
`Ledger.export_tables` reads (``all``: every table, from one snapshot) and
writes them locally with the same code as the embedded ledger
(`ledger.queries.write_export`), so the files are the ones `export` writes on
the service's host. Any authenticated client may read them (the `READ_OPS` of
every role); 401 for a missing or refused token, 422 for an unknown table.

Body: `ledger.export_wire` (a JSON header line, then Arrow IPC streams).
"""

from __future__ import annotations

from typing import Any

from ledger import remote_codec as codec
from ledger.export_wire import encode_tables
from ledger.remote import LedgerAccessError
from schemas.errors import PrivpipeError


def _error(status: int, err: BaseException) -> tuple[int, bytes, str]:
    body = {"error": {"class": type(err).__name__, "message": str(err), "attrs": {}}}
    return status, codec.dumps(body), "application/json"


def tables_answer(service: Any, header: str, what: str) -> tuple[int, bytes, str]:
    """(status, body, media type) of ``GET /v1/tables/<what>`` for the bearer in `header`."""
    try:
        client = service.authenticate(header)
    except LedgerAccessError as err:
        return _error(401, err)
    try:
        tables = service.ledger_for(client).export_tables(what)
    except PrivpipeError as err:
        return _error(422, err)
    return 200, encode_tables(tables), "application/vnd.apache.arrow.stream"
