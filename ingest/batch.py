"""One block of whole users: converted to the domain's units, validated, turned into users.

`_Batch` converts each row (time from each curve's start, or absolute step
indices; lon/lat to metres; stream values normalised by the declared range),
names the problems found while converting, screens every row with numpy and
validates the flagged users with the pandera schema of `schemas.samples`; then
`results` yields each user, accepted or rejected as a whole with every reason.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pandera.errors as pa_errors
import pyarrow as pa
import pyarrow.compute as pc

from ingest.fingerprint import user_fingerprint
from ingest.plan import _Plan
from ingest.projection import project
from ingest.types import Curve, Rejection, Stream, UserCurves, UserStreams
from schemas import samples as S
from schemas.errors import Problem
from schemas.policy import Domain
from schemas.problems import dedupe, message_for, problems_from_schema_errors

RULE_REQUIRED = "required"
RULE_NUMBER = "number"
RULE_T_FORMAT = "t format"

_NUMBER, _DATETIME = 1, 2

#: one conversion-time problem kind: (rows, column, rule, message, raw text column or None)
_Flag = tuple[np.ndarray, str, str, str, object]


_SCHEMAS: dict[tuple, object] = {}


def _schema(d: Domain):
    """The pandera schema of a domain's samples (built once per distinct shape)."""
    if d.kind == "curves":
        lon_lat = (d.lon_column, d.lat_column) if d.projection else None
        key: tuple = ("curves", tuple(d.value_columns), lon_lat, d.projection == "mercator",
                      d.window)
        if key not in _SCHEMAS:
            _SCHEMAS[key] = S.curve_samples_schema(d.value_columns, lon_lat=lon_lat,
                                                   mercator=d.projection == "mercator",
                                                   window=d.window)
    else:
        vr = None if d.value_range is None else tuple(d.value_range)
        key = ("streams", vr, d.time_unit == "step")
        if key not in _SCHEMAS:
            _SCHEMAS[key] = S.stream_samples_schema(vr, integer_steps=d.time_unit == "step")
    return _SCHEMAS[key]


def _float(col: pa.ChunkedArray) -> np.ndarray:
    """The column as float64 (null: NaN)."""
    return col.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _isnull(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Whether each cell is null (no Arrow pass when none or all are: the usual columns)."""
    nulls = col.null_count
    if nulls == 0 or nulls == len(col):
        return np.full(len(col), nulls > 0)
    return pc.is_null(col).to_numpy(zero_copy_only=False)


def _changes(col: pa.Array) -> np.ndarray:
    """Row i's value differs from row i - 1's (row 0: True; null equals null)."""
    n = len(col)
    out = np.ones(n, dtype=bool)
    if n > 1:
        a, b = col.slice(1), col.slice(0, n - 1)
        differ = pc.fill_null(pc.not_equal(a, b), True)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        out[1:] = pc.and_not(differ, both_null).to_numpy(zero_copy_only=False)
    return out


def _run_number(starts: np.ndarray) -> np.ndarray:
    """Per row, the number of the run it belongs to: ``np.cumsum(starts) - 1``, faster.

    `starts` marks the first row of each run (rows before the first mark get
    -1). numpy's cumulative sum of a boolean array casts element by element
    (about 7 ns a row, 1.5 ms per 200,000-row block, several per block);
    repeating each run's number over its length costs a tenth of that.
    """
    firsts = np.flatnonzero(starts)
    lengths = np.diff(firsts, append=len(starts))
    runs = np.repeat(np.arange(firsts.size, dtype=np.int64), lengths)
    lead = int(firsts[0]) if firsts.size else len(starts)
    return np.concatenate([np.full(lead, -1, dtype=np.int64), runs]) if lead else runs


def _missing_or_empty(col: pa.Array) -> np.ndarray:
    """Ids that fail "required", "non-empty id" or "id without control characters"."""
    bad = pc.or_(pc.equal(col, ""), pc.match_substring_regex(col, S.CONTROL_CHARACTERS))
    return pc.fill_null(bad, True).to_numpy(zero_copy_only=False)


def _missing_or_empty_runs(col: pa.Array, starts: np.ndarray) -> np.ndarray:
    """`_missing_or_empty` of every row, checked once per run of equal ids.

    `starts` marks where `col` changes (`_changes`, or a finer cut): every row
    of a run holds its first row's id (null equals null), so its first row's
    verdict is every row's. One regex per user instead of one per sample.
    """
    firsts = np.flatnonzero(starts)
    verdict = _missing_or_empty(col.take(pa.array(firsts, pa.int64())))
    return verdict[_run_number(starts)]


def _text(col: pa.Array, rows: np.ndarray) -> np.ndarray:
    """The ids at positions `rows` as an object array (None for null)."""
    return col.take(pa.array(rows, pa.int64())).to_numpy(zero_copy_only=False)


class _Batch:
    """One block of whole users, converted and validated."""

    def __init__(self, tbl: pa.Table, plan: _Plan):
        self.plan = plan
        self.n = tbl.num_rows
        self.row = tbl.column("_row").to_numpy(zero_copy_only=False).astype(np.int64)
        self.problems: list[Problem] = []
        flags = self._read_ids(tbl)
        flags += self._read_time(tbl)
        flags += self._read_values(tbl)
        self._flag_rows(flags)
        self._sort_by_t()
        self._validate()

    def _read_ids(self, tbl: pa.Table) -> list[_Flag]:
        """The ids, their runs (users, groups), and the rows with a missing id."""
        plan = self.plan
        # Ids stay Arrow arrays (no Python string per row): runs and masks come from
        # Arrow compute; Python strings are made once per user and per group.
        self.user_col = tbl.column("_user").combine_chunks()
        self.key_col = tbl.column("_key").combine_chunks()
        user_null = _isnull(self.user_col)
        key_null = _isnull(self.key_col)
        self.ustart = _changes(self.user_col)
        gstart = self.ustart | _changes(self.key_col)
        self.gstart = gstart
        self.gid = _run_number(gstart)
        self.gstarts = np.flatnonzero(gstart)
        self.bad_ids = (_missing_or_empty_runs(self.user_col, self.ustart)
                        | _missing_or_empty_runs(self.key_col, gstart))
        return [
            (user_null, "user_id", RULE_REQUIRED, message_for(RULE_REQUIRED), None),
            (key_null, plan.key, RULE_REQUIRED, message_for(RULE_REQUIRED), None),
        ]

    def _read_time(self, tbl: pa.Table) -> list[_Flag]:
        """Each row's time kind, then the time converted per group; the rows it flags."""
        d, n = self.plan.domain, self.n
        t_num = _float(tbl.column("_t_num"))
        num_ok = ~_isnull(tbl.column("_t_num"))
        t_us_col = tbl.column("_t_us")
        us_ok = ~_isnull(t_us_col)
        t_us = pc.fill_null(t_us_col, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        t_raw = tbl.column("_t_raw")
        t_bad = ~_isnull(t_raw)
        kind = np.where(num_ok, _NUMBER, np.where(us_ok, _DATETIME, 0))
        gkind = self._group_kind(kind)
        mixed = (kind > 0) & (kind != gkind)
        t_missing = (kind == 0) & ~t_bad
        self.t, self.start_of_group = self._convert_time(t_num, t_us, kind, gkind)
        if d.kind == "streams" and d.time_unit == "step":
            dt_in_step = kind == _DATETIME
        else:
            dt_in_step = np.zeros(n, dtype=bool)
        return [
            (t_missing, "t", RULE_REQUIRED, message_for(RULE_REQUIRED), None),
            (t_bad, "t", RULE_T_FORMAT,
             "t is neither a number nor an ISO 8601 date/time", t_raw),
            (dt_in_step, "t", S.RULE_INTEGER_STEP,
             "time_unit \"step\" needs integer step indices, not date/times", None),
            (mixed, "t", RULE_T_FORMAT,
             "t mixes plain numbers and date/times within one curve or stream", None),
        ]

    def _group_kind(self, kind: np.ndarray) -> np.ndarray:
        """Per row, its group's time kind: that of the group's first row with a time at all."""
        n = self.n
        first_kind = np.zeros(len(self.gstarts), dtype=np.int64)
        if n:
            known = kind > 0
            idx = np.where(known, np.arange(n), n)
            first_idx = np.minimum.reduceat(idx, self.gstarts)
            first_kind = np.where(first_idx < n, kind[np.minimum(first_idx, n - 1)], 0)
        return first_kind[self.gid] if n else np.zeros(0, np.int64)

    def _read_values(self, tbl: pa.Table) -> list[_Flag]:
        """The input value columns as floats; the rows with a missing or non-number value."""
        plan = self.plan
        self.v = np.empty((self.n, len(plan.inputs)), dtype=np.float64)
        flags: list[_Flag] = []
        for i, c in enumerate(plan.inputs):
            col, raw = tbl.column(f"_v{i}"), tbl.column(f"_raw{i}")
            self.v[:, i] = _float(col)
            bad = ~_isnull(raw)
            flags.append((_isnull(col) & ~bad, c, RULE_REQUIRED, message_for(RULE_REQUIRED), None))
            flags.append((bad, c, RULE_NUMBER, "not a number", raw))
        return flags

    def _flag_rows(self, flags: list[_Flag]) -> None:
        """Record the conversion-time problems (specific causes; pandera adds the rest)."""
        for mask, column, rule, message, raw in flags:
            for j in np.flatnonzero(mask):
                value = None
                if raw is not None:
                    value = raw[int(j)].as_py()
                    value = value if value is None or len(value) <= 80 else value[:77] + "..."
                self.problems.append(Problem(
                    self.plan.label, int(self.row[j]), column, rule, message,
                    user_id=self.user_col[int(j)].as_py(), value=value))

    def _sort_by_t(self) -> None:
        """Order each group's rows by t when the domain asks (``sort = true``).

        Rows never leave their group, so group ids and group starts stay valid
        position by position; ids are constant within a group: only row, t and
        v move.
        """
        n = self.n
        if self.plan.domain.sort and n:
            order = np.lexsort((np.arange(n), self.t, self.gid))
            if np.any(order != np.arange(n)):
                for name in ("row", "t", "v"):
                    setattr(self, name, getattr(self, name)[order])

    def _convert_time(self, t_num: np.ndarray, t_us: np.ndarray, kind: np.ndarray,
                      gkind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(time per row in domain units, each curve's start or NaN) from the row kinds."""
        d, n = self.plan.domain, self.n
        starts = self.gstarts
        out = np.full(n, np.nan)
        start = np.full(len(starts), np.nan)
        if n == 0:
            return out, start
        spu = d.seconds_per_unit
        is_num = (kind == _NUMBER) & (gkind == _NUMBER)
        is_dt = (kind == _DATETIME) & (gkind == _DATETIME)
        num = t_num * self.plan.number_factor
        if d.kind == "curves":
            fin = is_num & np.isfinite(num)
            g0 = np.minimum.reduceat(np.where(fin, num, np.inf), starts)
            o = g0[self.gid]
            with np.errstate(invalid="ignore"):
                out = np.where(is_num, num - o, out)
            start = np.where(np.isfinite(g0), g0, start)
            big = np.iinfo(np.int64).max
            g0us = np.minimum.reduceat(np.where(is_dt, t_us, big), starts)
            has = g0us != big
            dt_rel = (t_us - g0us[self.gid]) / 1e6 / spu
            out = np.where(is_dt, dt_rel, out)
            start = np.where(has, g0us / 1e6 / spu, start)
            return out, start
        # streams: absolute step indices
        if d.time_unit == "step":
            out = np.where(is_num, t_num, out)
            return out, start
        step = float(d.step)
        with np.errstate(invalid="ignore", over="ignore"):
            out = np.where(is_num, np.floor(num / step), out)
        step_us = step * spu * 1e6
        if step_us == round(step_us) and step_us >= 1:
            steps_dt = (t_us // int(round(step_us))).astype(np.float64)
        else:
            steps_dt = np.floor(t_us / step_us)
        out = np.where(is_dt, steps_dt, out)
        return out, start

    def _frame(self, rows: np.ndarray) -> pd.DataFrame:
        """The pandera frame of the rows at positions `rows` (file rows as index)."""
        plan = self.plan
        users, keys = _text(self.user_col, rows), _text(self.key_col, rows)
        cols: dict[str, object] = {
            "user_id": pd.array(np.where(np.equal(users, None), "", users), dtype="str"),
            plan.key: pd.array(np.where(np.equal(keys, None), "", keys), dtype="str"),
            "t": self.t[rows],
        }
        for i, c in enumerate(plan.inputs):
            cols[c] = self.v[rows, i]
        return pd.DataFrame(cols, index=pd.Index(self.row[rows], name=S.ROW_INDEX))

    def _suspects(self) -> np.ndarray:
        """Positions of the rows of every user with a row the numpy screen flags."""
        d, plan = self.plan.domain, self.plan
        same = ~self.gstart
        if d.kind == "curves":
            cols = {c: self.v[:, i] for i, c in enumerate(plan.inputs)}
            lon_lat = (d.lon_column, d.lat_column) if d.projection else None
            flagged = S.curve_rows_failing(self.t, cols, same=same, bad_ids=self.bad_ids,
                                           lon_lat=lon_lat, mercator=d.projection == "mercator",
                                           window=d.window)
        else:
            flagged = S.stream_rows_failing(self.t, self.v[:, 0], same=same,
                                            bad_ids=self.bad_ids, value_range=d.value_range,
                                            integer_steps=d.time_unit == "step")
        if not flagged.any():
            return np.zeros(0, dtype=np.int64)
        uid = _run_number(self.ustart)
        bad_user = np.zeros(int(uid[-1]) + 1, dtype=bool)
        bad_user[uid[flagged]] = True
        return np.flatnonzero(bad_user[uid])

    def _validate(self) -> None:
        """Validate the batch: numpy screen of every row, then pandera on the flagged users.

        A numpy screen checks every row rule over the whole batch; pandera then
        validates the rows of the users it flags (and names each problem: row,
        column, rule), or no rows at all (the schema and dtype checks only). The
        screen flags every row pandera would reject (`schemas.samples`), and a
        user's rows are contiguous and checked together, so the problems are the
        same as validating the whole batch with pandera, at a fraction of the cost.
        """
        if self.n == 0:
            return
        d = self.plan.domain

        def range_text(rule: str, column: str) -> str | None:
            if rule == S.RULE_VALUE_RANGE and d.value_range is not None:
                lo, hi = d.value_range
                return f"domain {d.name!r} declares value_range [{lo:g}, {hi:g}] {d.value_unit}"
            return None

        rows = self._suspects()
        if not rows.size and self.plan.schema_checked:
            # no row to name, and the schema and dtype checks passed on an earlier
            # batch: the frame of every batch is built the same way
            self.problems = dedupe(self.problems)
            return
        try:
            _schema(d).validate(self._frame(rows), lazy=True)
            found: list[Problem] = []
            if not rows.size:
                self.plan.schema_checked.append(True)
        except pa_errors.SchemaErrors as err:
            user_of = dict(zip(self.row[rows].tolist(), _text(self.user_col, rows).tolist(),
                               strict=True))
            found = problems_from_schema_errors(err, file=self.plan.label,
                                                user_of_row=user_of.get, range_text=range_text)
        self.problems = dedupe([*self.problems, *found])

    # ------------------------------------------------------------------ results

    def results(self, max_problems: int = 1000
                ) -> Iterator[UserCurves | UserStreams | Rejection]:
        """Yield each user of the block, in order: accepted objects or rejections."""
        n = self.n
        if n == 0:
            return
        plan, d = self.plan, self.plan.domain
        by_user: dict[object, list[Problem]] = {}
        for p in self.problems:
            by_user.setdefault(p.user_id, []).append(p)
        values = self.v
        if d.kind == "curves" and d.projection:
            values = self._projected()
        elif d.kind == "streams" and d.value_range is not None:
            lo, hi = d.value_range
            values = (self.v - lo) / (hi - lo)
        ustarts = np.flatnonzero(self.ustart)
        ubounds = np.append(ustarts, n)
        gbounds = np.append(self.gstarts, n)
        # Group i (a curve or stream) is rows gbounds[i]:gbounds[i + 1]; user u's groups
        # are first_group[u]:last_group[u]. Python ints and lists: one lookup per group.
        first_group = np.searchsorted(gbounds, ubounds[:-1]).tolist()
        last_group = np.searchsorted(gbounds, ubounds[1:]).tolist()
        bounds = gbounds.tolist()
        user_ids = _text(self.user_col, ustarts).tolist()
        group_keys = _text(self.key_col, self.gstarts).tolist()
        columns = tuple(d.value_columns)
        if d.kind == "curves":
            starts = [float(s) if np.isfinite(s) else None for s in self.start_of_group]
        else:
            with np.errstate(invalid="ignore"):  # a rejected user's missing t (NaN)
                steps = self.t.astype(np.int64)
            values = values[:, 0]
        for ui, user in enumerate(user_ids):
            probs = by_user.get(user)
            if user is None or probs:
                ps = sorted(probs or [], key=lambda p: (p.row or 0, p.column or "", p.rule))
                yield Rejection(user_id="" if user is None else user,
                                problems=_capped(ps, max_problems, plan.label))
                continue
            groups = range(first_group[ui], last_group[ui])
            if d.kind == "curves":
                curves = [Curve(curve_id=group_keys[g], t=self.t[bounds[g]:bounds[g + 1]].copy(),
                                values=values[bounds[g]:bounds[g + 1]].copy(), start=starts[g])
                          for g in groups]
                yield UserCurves(user_id=user, curves=curves,
                                 fingerprint=user_fingerprint(user, curves, columns))
            else:
                streams = [Stream(stream_id=group_keys[g], steps=steps[bounds[g]:bounds[g + 1]],
                                  values=values[bounds[g]:bounds[g + 1]].copy())
                           for g in groups]
                yield UserStreams(user_id=user, streams=streams,
                                  fingerprint=user_fingerprint(user, streams, columns))

    def _projected(self) -> np.ndarray:
        """lon/lat projected to metres in the domain's fixed frame."""
        d = self.plan.domain
        lon, lat = self.v[:, 0], self.v[:, 1]
        # One fixed, public frame for the whole domain (the policy's projection and
        # ref_lat), independent of the data, so L2 in metres is the same metric
        # for every pair of curves.
        with np.errstate(invalid="ignore", divide="ignore"):
            x, y = project(lon, lat, projection=d.projection, ref_lat=d.ref_lat)
        return np.column_stack([x, y])


def _capped(problems: list[Problem], cap: int, label: str) -> list[Problem]:
    """The first `cap` problems, the first of every further (column, rule), and a count."""
    if len(problems) <= cap:
        return problems
    kept = problems[:cap]
    reasons = {(p.column, p.rule) for p in kept}
    for p in problems[cap:]:
        if (p.column, p.rule) not in reasons:
            reasons.add((p.column, p.rule))
            kept.append(p)
    more = len(problems) - len(kept)
    kept.append(Problem(label, None, None, "more problems",
                        f"{more} more problems of the kinds listed above are not shown",
                        user_id=problems[0].user_id))
    return kept

