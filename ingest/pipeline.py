"""Streaming, validated ingestion: from an input file to per-user curves or streams.

One pass over the input, in bounded memory:

1. DuckDB opens the source (`ingest.source`) and casts each column to what
   the domain needs (numbers; ISO 8601 date/times become microseconds since
   the epoch, UTC unless the text carries an offset) in one scan in record
   order, whose rows are written to a private Arrow file (`_spill`) while the
   reader checks whether they already come in (user_id, curve_id or
   stream_id) order.
2. The rows are read back in (user_id, curve_id or stream_id, file row) order:
   as written when the input was in that order already (one parse of the
   file, no sort), else sorted by DuckDB, spilling to disk if needed. A
   caller that can start over (`read_users`, `scan`, the release's staging)
   first reads straight from the scan with no private file (``spill=False``),
   checking the order batch by batch, and reads again with it only when a
   row comes out of order (`NeedsSpill`). Arrow
   record batches are cut at user boundaries, so a user is never split
   between two batches (a batch holds whole users; a user larger than
   `batch_rows` makes one larger batch).
3. Each batch is converted to the domain's units (time from each curve's start,
   or absolute step indices; lon/lat to metres; stream values normalised by the
   declared range) and validated with the pandera schema of `schemas.samples`.
4. A user with any bad row is rejected as a whole, with every reason; the other
   users are yielded in sorted user-id order.

Sorting by file row within a curve (not by t) is what lets "t strictly
increasing" catch unsorted input with its row numbers; with ``sort = true`` in
the domain, rows of a curve are ordered by t in the batch instead.

One module per step: `ingest.plan` (the columns checked, the converting SQL),
`ingest.rows` (the scan in record order), `ingest.straight` (the read with no
copy, and `NeedsSpill`), `ingest.spill` (the private file, read back or
sorted), `ingest.blocks` (whole users per block, read ahead by a thread:
`ingest.prefetch`), `ingest.batch` (conversion,
validation, users), `ingest.summary` (what `scan` reports). This module holds
the public functions, the choice between the straight and the spilled read,
and the two threads a read runs on (`_converted`): one reads the blocks
(DuckDB), one converts and validates the block before, while the caller uses
the users of the block before that; the blocks stay in order, so users,
problems and fingerprints are those of one thread doing it all.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import pandas as pd
import pyarrow as pa

from ingest.batch import _Batch
from ingest.blocks import _blocks
from ingest.plan import INPUT_TIME_UNITS, _check_parameters, _Plan, _plan
from ingest.prefetch import prefetched
from ingest.source import OpenedSource, open_source
from ingest.straight import NeedsSpill
from ingest.summary import _Summary
from ingest.types import IngestReport, Rejection, UserCurves, UserStreams
from schemas.policy import Domain

__all__ = ["DEFAULT_MEMORY_LIMIT", "INPUT_TIME_UNITS", "NeedsSpill", "iter_users", "read_users",
           "scan"]

DEFAULT_MEMORY_LIMIT = "512MB"

T = TypeVar("T")


@dataclass(frozen=True)
class _Read:
    """How one read of an input goes: straight from the scan or spilled; typed CSV read or not."""

    spill: bool
    typed: bool = True


#: The first read of `read_users` and `scan`: straight from the scan, no private copy.
_STRAIGHT = _Read(spill=False)


def _read_after(stop: NeedsSpill) -> _Read:
    """The read that follows a straight read that stopped: spilled, typed if it may be.

    The spilled read skips the typed CSV read when a cell ended it in the
    straight read (it would end there again), so an input costs at most the two
    reads its spilled read alone costs when a cell is not a number.
    """
    return _Read(spill=True, typed=not stop.typed_read_ended)


def _two_reads(read: Callable[[_Read], T]) -> T:
    """``read(_STRAIGHT)``, or, if that read stopped (`NeedsSpill`), the read after it."""
    try:
        return read(_STRAIGHT)
    except NeedsSpill as stop:
        again = _read_after(stop)
    return read(again)


def _read_plan(src: OpenedSource, domain: Domain, input_time_unit: str | None,
               how: _Read) -> _Plan:
    """The source's plan for this read (without the typed CSV read when `how` skips it)."""
    plan = _plan(src, domain, input_time_unit)
    return plan if how.typed else replace(plan, typed_sql=None)


def iter_users(
    source: str | Path | pd.DataFrame,
    domain: Domain,
    *,
    table: str | None = None,
    batch_rows: int = 200_000,
    input_time_unit: str | None = None,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    max_problems_per_user: int = 1000,
    spill: bool = True,
) -> Iterator[UserCurves | UserStreams | Rejection]:
    """Stream the validated users of an input, in sorted user-id order.

    Args:
        source: CSV (optionally ``.gz``), Parquet or DuckDB file, or a DataFrame.
            Columns: ``user_id``, ``curve_id`` (curves) or ``stream_id``
            (streams), ``t``, and the domain's value columns (``lon``/``lat``
            columns for a projected domain). Other columns are ignored.
        domain: the policy domain that fixes units, projection and range.
        table: the table name inside a DuckDB file.
        batch_rows: rows per Arrow batch read from DuckDB (memory bound; a user
            is never split, so one user larger than this makes a larger batch).
        input_time_unit: unit of plain numbers in ``t`` (ns, us, ms, s, min, h,
            d); None means they are already in the domain's time unit. ISO 8601
            strings and date/time columns are always understood.
        memory_limit: DuckDB memory limit for reading and sorting (DuckDB uses it
            as a cache and spills beyond it, so it bounds memory, not the file).
        max_problems_per_user: problems listed per rejected user; beyond it the
            first problem of each further (column, rule) is still listed, and one
            "more problems" entry counts the rest, so every reason appears.
        spill: True: the scan's rows go to a private file first, which is read
            back as it is when it came in (user, key) order and sorted
            otherwise. False (a straight read): users are yielded as the scan
            reaches them, with no copy of the rows, and `NeedsSpill` is raised
            at the first row out of order (or that ends a CSV's typed read):
            for callers that can start again with ``spill=True`` (see
            `read_users`). Both give the same users, problems and fingerprints.

    Returns:
        An iterator (parameters are checked when this is called, the file is
        opened on the first ``next``) that yields `UserCurves` or `UserStreams`
        for accepted users, `Rejection` for users with any invalid row
        (``user_id == ""``: rows that carry no user id).

    Raises:
        ValidationError: file-level problems (missing or unreadable file,
            missing column, wrong dtype for a whole column, empty input), from
            the first ``next``.
        ParameterError: invalid arguments, from this call (before any file is read).
    """
    _check_parameters(domain, batch_rows, input_time_unit, max_problems_per_user)
    return _iter_users(source, domain, table, batch_rows, input_time_unit,
                       memory_limit, max_problems_per_user, _Read(spill=spill))


#: A block's row count and its users (accepted or rejected), in order.
_Converted = tuple[int, list[UserCurves | UserStreams | Rejection]]


def _converting(blocks: Generator[pa.Table, None, None], plan: _Plan, max_problems: int
                ) -> Generator[_Converted, None, None]:
    """Each block's rows and users (`_Batch`); `blocks` is closed when this ends."""
    try:
        for block in blocks:
            yield block.num_rows, list(_Batch(block, plan).results(max_problems))
    finally:
        blocks.close()


def _converted(src: OpenedSource, plan: _Plan, batch_rows: int, how: _Read,
               max_problems: int) -> Generator[_Converted, None, None]:
    """The blocks' rows and users, in order, made by two threads ahead of the caller.

    A thread reads the blocks (`_blocks`: DuckDB) one ahead of a thread that
    converts and validates them (`_Batch`), itself one ahead of the caller.
    An exception of either (a `ValidationError`, `NeedsSpill`, a bug) is
    raised here, after the users of the blocks before it; when the caller
    stops, both threads are stopped and joined before this returns.
    """
    blocks = prefetched(_blocks(src, plan, batch_rows, how.spill))
    return prefetched(_converting(blocks, plan, max_problems), name="privpipe-ingest-convert")


def _iter_users(source: str | Path | pd.DataFrame, domain: Domain, table: str | None,
                batch_rows: int, input_time_unit: str | None,
                memory_limit: str, max_problems: int, how: _Read
                ) -> Generator[UserCurves | UserStreams | Rejection, None, None]:
    """The users of one read of the input (see `iter_users`)."""
    with open_source(source, table=table, memory_limit=memory_limit) as src:
        plan = _read_plan(src, domain, input_time_unit, how)
        # the next blocks are read and validated while these users are used; the
        # threads are joined (closing) before the source closes, however this ends
        with closing(_converted(src, plan, batch_rows, how, max_problems)) as blocks:
            for _, users in blocks:
                yield from users


def read_users(
    source: str | Path | pd.DataFrame,
    domain: Domain,
    consume: Callable[[Iterator[UserCurves | UserStreams | Rejection]], T],
    *,
    table: str | None = None,
    batch_rows: int = 200_000,
    input_time_unit: str | None = None,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    max_problems_per_user: int = 1000,
) -> T:
    """``consume(users)`` over a straight read, or again over the spilled one.

    `consume` gets the users of `iter_users` with ``spill=False`` (the other
    arguments as there) and returns its result. If that read raises
    `NeedsSpill`, which passes through `consume` (it may clean up on the way),
    `consume` is called once more on a spilled read: so `consume` must start
    from nothing each time. An input already in (user, key) order (a sorted
    export, the usual case) is then parsed once with no private copy of its
    rows; any other costs the straight read up to its first row out of order,
    then the spilled read.

    Raises:
        ValidationError, ParameterError: as `iter_users`.
    """
    _check_parameters(domain, batch_rows, input_time_unit, max_problems_per_user)
    args = (source, domain, table, batch_rows, input_time_unit, memory_limit,
            max_problems_per_user)
    return _two_reads(lambda how: _consumed(consume, _iter_users(*args, how)))


def _consumed(consume: Callable[[Iterator[UserCurves | UserStreams | Rejection]], T],
              users: Generator[UserCurves | UserStreams | Rejection, None, None]) -> T:
    """``consume(users)``, then `users` closed: its threads joined, its source closed.

    Also when `consume` raises or returns early: the error reaches the caller
    with no thread of the read left running and the input file closed.
    """
    try:
        return consume(users)
    finally:
        users.close()


def scan(
    source: str | Path | pd.DataFrame,
    domain: Domain,
    *,
    table: str | None = None,
    batch_rows: int = 200_000,
    input_time_unit: str | None = None,
    memory_limit: str = DEFAULT_MEMORY_LIMIT,
    max_problems_per_user: int = 1000,
) -> IngestReport:
    """Validate a whole input in one streaming pass and summarise it.

    Same arguments as `iter_users` but `spill`: like `read_users`, an input
    in (user, key) order is read straight, any other one again through the
    private spill file. Per-user arrays are dropped as soon as a user is
    counted, so memory does not grow with the input.

    Returns:
        An `IngestReport` (counts, time span, value ranges, rejections,
        per-user and whole-input fingerprints).

    Raises:
        ValidationError: file-level problems (see `iter_users`).
        ParameterError: invalid arguments.
    """
    _check_parameters(domain, batch_rows, input_time_unit, max_problems_per_user)
    args = (source, domain, table, batch_rows, input_time_unit, memory_limit,
            max_problems_per_user)
    return _two_reads(lambda how: _scan(*args, how))


def _scan(source: str | Path | pd.DataFrame, domain: Domain, table: str | None,
          batch_rows: int, input_time_unit: str | None, memory_limit: str,
          max_problems_per_user: int, how: _Read) -> IngestReport:
    """The summary of one read of the input (see `scan`)."""
    summary = _Summary(domain)
    with open_source(source, table=table, memory_limit=memory_limit) as src:
        plan = _read_plan(src, domain, input_time_unit, how)
        with closing(_converted(src, plan, batch_rows, how, max_problems_per_user)) as blocks:
            for rows, users in blocks:
                summary.rows += rows
                for r in users:
                    summary.add(r)
        label = src.label
    return summary.report(label)

