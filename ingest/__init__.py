"""Validated, streaming ingestion of curve and stream inputs (CSV, Parquet, DuckDB)."""

from ingest.types import Curve, IngestReport, Rejection, Stream, UserCurves, UserStreams

__all__ = ["Curve", "IngestReport", "Rejection", "Stream", "UserCurves", "UserStreams"]
