"""The validated, converted objects that ingestion hands to the rest of privpipe.

Everything here is already checked: finite numbers, strictly increasing time,
at least two points per curve, values inside the declared range (streams), and
in the domain's units. Fingerprints are SHA-256 hex digests of the canonical
data (see `ingest.fingerprint`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schemas.errors import Problem


@dataclass
class Curve:
    """One validated curve of a user.

    Attributes:
        curve_id: the curve's id (text).
        t: float64 times in the domain's time unit, measured from the curve's
            start, strictly increasing, so ``t[0] == 0``.
        values: float64 array of shape (N, n): one column per value column of
            the domain (x, y in metres for a projected domain).
        start: the curve's start on the input's own clock, in the domain's time
            unit (for date/time inputs: domain units since 1970-01-01 UTC), or
            None when unknown.
    """

    curve_id: str
    t: np.ndarray
    values: np.ndarray
    start: float | None = None


@dataclass
class UserCurves:
    """All curves of one user, with the fingerprint of their canonical data."""

    user_id: str
    curves: list[Curve]
    fingerprint: str


@dataclass
class Stream:
    """One validated stream of a user.

    Attributes:
        stream_id: the stream's id (text).
        steps: int64 absolute step indices, strictly increasing.
        values: float64 values normalised to [0, 1] by the domain's declared
            value range (raw values when the domain declares no range, which
            only the default validation domain does).
    """

    stream_id: str
    steps: np.ndarray
    values: np.ndarray


@dataclass
class UserStreams:
    """All streams of one user, with the fingerprint of their canonical data."""

    user_id: str
    streams: list[Stream]
    fingerprint: str


@dataclass
class Rejection:
    """A user rejected as a whole, with every reason.

    ``user_id == ""`` collects rows that carry no user id at all.
    """

    user_id: str
    problems: list[Problem]


@dataclass
class IngestReport:
    """Summary of one streaming validation pass (no per-user arrays are kept).

    ``t_span`` and ``value_ranges`` are aggregates of the data: fine for the
    local ``validate`` command, never for logs or release reports.

    Attributes:
        source: the input's name (path, or path::table).
        kind: ``"curves"`` or ``"streams"``.
        domain: the domain name the input was validated against.
        rows: data rows read.
        users: accepted users.
        curves_or_streams: accepted curves (or streams).
        points: accepted samples.
        t_span: (min, max) of the converted time over accepted data: curve time
            from each curve's start, or absolute step indices for streams.
        value_ranges: per value column, (min, max) in the domain's value unit
            (metres for projected domains; stream values before normalisation).
        rejected: rejected users with their problems.
        file_problems: problems that belong to no user (rows without a user id).
        fingerprint: SHA-256 over the sorted per-user fingerprints.
        user_fingerprints: per accepted user, the fingerprint of their data.
        time_unit: the domain's time unit.
    """

    source: str
    kind: str
    domain: str
    rows: int
    users: int
    curves_or_streams: int
    points: int
    t_span: tuple[float, float] | None
    value_ranges: dict[str, tuple[float, float]]
    rejected: list[Rejection]
    file_problems: list[Problem]
    fingerprint: str
    user_fingerprints: dict[str, str] = field(default_factory=dict)
    time_unit: str = ""

    @property
    def valid(self) -> bool:
        """True when no user was rejected and no row was left without a user."""
        return not self.rejected and not self.file_problems

    @property
    def problems(self) -> list[Problem]:
        """Every problem, file-level first, then by user."""
        out = list(self.file_problems)
        for r in self.rejected:
            out.extend(r.problems)
        return out
