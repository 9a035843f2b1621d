"""Validated, streaming ingestion of curve and stream inputs (CSV, Parquet, DuckDB).

Plain functions, called by the Prefect tasks and by ``privpipe validate``:
`iter_users` streams validated users (`read_users`: straight when the
input is in order), `scan` summarises an input in one pass, `check_input`
finds every file-level problem before a release starts and `stream_keys`
lists a stream input's (user, stream) pairs.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.check import check_input, stream_keys
    from ingest.defaults import default_domain
    from ingest.fingerprint import input_fingerprint, user_fingerprint
    from ingest.pipeline import INPUT_TIME_UNITS, NeedsSpill, iter_users, read_users, scan
    from ingest.projection import EARTH_RADIUS_M, project
    from ingest.types import Curve, IngestReport, Rejection, Stream, UserCurves, UserStreams

# Names load on first use (PEP 562), as in `schemas`: the CLI's checks of an input
# before a release (`check_input`, `stream_keys`: DuckDB only) must not import
# pandas and pandera, which the reading of users needs.
_LAZY = {
    "check_input": "ingest.check", "stream_keys": "ingest.check",
    "default_domain": "ingest.defaults", "input_fingerprint": "ingest.fingerprint",
    "user_fingerprint": "ingest.fingerprint", "INPUT_TIME_UNITS": "ingest.pipeline",
    "NeedsSpill": "ingest.pipeline", "iter_users": "ingest.pipeline",
    "read_users": "ingest.pipeline", "scan": "ingest.pipeline",
    "EARTH_RADIUS_M": "ingest.projection", "project": "ingest.projection",
    "Curve": "ingest.types", "IngestReport": "ingest.types", "Rejection": "ingest.types",
    "Stream": "ingest.types", "UserCurves": "ingest.types", "UserStreams": "ingest.types",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ingest' has no attribute {name!r}")


__all__ = [
    "EARTH_RADIUS_M",
    "INPUT_TIME_UNITS",
    "Curve",
    "IngestReport",
    "NeedsSpill",
    "Rejection",
    "Stream",
    "UserCurves",
    "UserStreams",
    "check_input",
    "default_domain",
    "input_fingerprint",
    "iter_users",
    "project",
    "read_users",
    "scan",
    "stream_keys",
    "user_fingerprint",
]
