"""The summary `scan` builds of an input, one user at a time (memory does not grow)."""

from __future__ import annotations

import numpy as np

from ingest.fingerprint import input_fingerprint
from ingest.types import Curve, IngestReport, Rejection, Stream, UserCurves, UserStreams
from schemas.errors import Problem
from schemas.policy import Domain


class _Summary:
    """Counts, time span, value ranges, rejections and fingerprints of the users seen so far."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self.users = self.items = self.points = self.rows = 0
        self.t_lo, self.t_hi = np.inf, -np.inf
        ncols = len(domain.value_columns)
        self.v_lo, self.v_hi = np.full(ncols, np.inf), np.full(ncols, -np.inf)
        self.rejected: list[Rejection] = []
        self.file_problems: list[Problem] = []
        self.fps: dict[str, str] = {}

    def add(self, r: UserCurves | UserStreams | Rejection) -> None:
        """Count one user (its arrays are not kept), or keep its rejection."""
        if isinstance(r, Rejection):
            if r.user_id == "" and all(p.user_id is None for p in r.problems):
                self.file_problems.extend(r.problems)
            else:
                self.rejected.append(r)
            return
        self.users += 1
        self.fps[r.user_id] = r.fingerprint
        parts = r.curves if isinstance(r, UserCurves) else r.streams
        for it in parts:
            self._add_item(it)

    def _add_item(self, it: Curve | Stream) -> None:
        """Count one curve or stream: points, time span, value ranges in the input's units."""
        domain = self.domain
        self.items += 1
        tt = it.t if isinstance(it, Curve) else it.steps
        self.points += len(tt)
        self.t_lo, self.t_hi = min(self.t_lo, float(tt[0])), max(self.t_hi, float(tt[-1]))
        if isinstance(it, Curve):
            raw = it.values
        elif domain.value_range is not None:
            lo, hi = domain.value_range
            raw = (it.values * (hi - lo) + lo)[:, None]
        else:
            raw = it.values[:, None]
        self.v_lo = np.minimum(self.v_lo, raw.min(axis=0))
        self.v_hi = np.maximum(self.v_hi, raw.max(axis=0))

    def report(self, label: str) -> IngestReport:
        """The `IngestReport` of the input named `label`."""
        domain, users = self.domain, self.users
        return IngestReport(
            source=label, kind=domain.kind, domain=domain.name, rows=self.rows, users=users,
            curves_or_streams=self.items, points=self.points,
            t_span=(self.t_lo, self.t_hi) if users else None,
            value_ranges=({c: (float(self.v_lo[i]), float(self.v_hi[i]))
                           for i, c in enumerate(domain.value_columns)} if users else {}),
            rejected=self.rejected, file_problems=self.file_problems,
            fingerprint=input_fingerprint(self.fps, (r.user_id for r in self.rejected)),
            user_fingerprints=self.fps, time_unit=domain.time_unit,
        )
