"""Validated, streaming ingestion of curve and stream inputs (CSV, Parquet, DuckDB).

Plain functions, called by the Prefect tasks and by ``privpipe validate``:
`iter_users` streams validated users (`read_users`: straight when the
input is in order), `scan` summarises an input in one pass.
"""

from ingest.defaults import default_domain
from ingest.fingerprint import input_fingerprint, user_fingerprint
from ingest.pipeline import INPUT_TIME_UNITS, NeedsSpill, iter_users, read_users, scan
from ingest.projection import EARTH_RADIUS_M, project
from ingest.types import Curve, IngestReport, Rejection, Stream, UserCurves, UserStreams

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
    "default_domain",
    "input_fingerprint",
    "iter_users",
    "project",
    "read_users",
    "scan",
    "user_fingerprint",
]
