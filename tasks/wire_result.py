"""Chunk answers on the privpipe wire (version 1): a worker's result, parsed and checked.

An answer is a `tasks.wire` envelope whose header is::

    {"wire": 1, "kind": ..., "index": <chunk number>,
     "tables": ["values", "segments", "curves"] | ["samples"],
     "cost_table": [<cost>, ...],                 each distinct cost once
     "costs": [[user_id, step, cost_table index, stream_id], ...],
     "error_bounds": [float, ...], "rms_bounds": [float, ...],
     "diagnostics": {name: [JSON values]}, "parts": [...]}

with one Arrow IPC stream per table, in the order of ``tables``. A cost is
``{"notion": "gp"|"cgp", "requested": "p/q", "items": [[step, notion, "p/q"], ...]}``
(a curve's `Cost`) or ``{"epsilon": "p/q", "w": int, "runs": [[start, stop,
"p/q"], ...]}`` (a stream's `WEventCost`); amounts are exact fractions.

`decode_result` reads an answer with json and pyarrow only and checks it
against the chunk the flow sent, before anything of it is used: each table's
exact schema (`expected_schemas`), its row count and its identifying columns
(user, curve or stream ids in payload order; a curve's output times are the
public grid the flow computes itself; a stream's steps are the chunk's), that
every released number is finite, and the lengths of the bounds. What it cannot
check from shape alone (the noisy values and the costs) is checked by the
flow's local re-execution of a secret sample (`tasks.recheck`) and by the
costs recomputed from the outputs (`ledger.recompute`).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from files.staging import repeat_ids
from mechanisms.cost import Cost, CostItem, StepRun, WEventCost
from mechanisms.curves import CurveBatch
from tasks.privatize import ChunkResult, CurveSpec
from tasks.stage import CurveChunk, StreamChunk
from tasks.wire import WireError, ipc_bytes, pack, read_table, unpack

__all__ = ["decode_result", "encode_result", "expected_schemas"]

_IDS = pa.dictionary(pa.int32(), pa.string())
_FRACTION = re.compile(r"-?\d{1,60}(/\d{1,60})?")
_TABLES = {"curves": ("values", "segments", "curves"), "streams": ("samples",)}


def expected_schemas(kind: str, value_columns: tuple[str, ...]) -> dict[str, pa.Schema]:
    """The exact schema of each output table of a chunk (`tasks.privatize`'s tables)."""
    if kind == "streams":
        return {"samples": pa.schema([("user_id", _IDS), ("stream_id", _IDS),
                                      ("step", pa.int64()), ("y", pa.float64())])}
    text, f64 = pa.string(), pa.float64()
    return {
        "values": pa.schema([("user_id", _IDS), ("curve_id", _IDS), ("t", f64),
                             *[(c, f64) for c in value_columns]]),
        "segments": pa.schema([("user_id", _IDS), ("curve_id", _IDS), ("segment", pa.int32()),
                               ("t_start", f64), ("t_end", f64), ("basis", text),
                               ("coefficients", pa.list_(f64))]),
        "curves": pa.schema([("user_id", text), ("curve_id", text), ("basis", text),
                             ("basis_params", text), ("outside", text), ("dim", pa.int64()),
                             ("duration", f64), ("error_bound", f64), ("cost", text)]),
    }


def _cost_json(cost: Cost | WEventCost) -> dict[str, Any]:
    if isinstance(cost, WEventCost):
        return {"epsilon": str(cost.epsilon), "w": cost.w,
                "runs": [[r.start, r.stop, str(r.epsilon)] for r in cost.runs]}
    return {"notion": cost.notion, "requested": str(cost.requested),
            "items": [[i.step, i.notion, str(i.amount)] for i in cost.items]}


def encode_result(kind: str, res: ChunkResult) -> bytes:
    """The answer of a worker that ran a chunk (see the module docstring)."""
    table_of: dict[int, int] = {}
    cost_table: list[dict[str, Any]] = []
    costs = []
    for user, step, cost, stream in res.costs:
        if id(cost) not in table_of:
            table_of[id(cost)] = len(cost_table)
            cost_table.append(_cost_json(cost))
        costs.append([user, step, table_of[id(cost)], stream])
    names = list(_TABLES[kind])
    header = {"kind": kind, "index": int(res.index), "tables": names, "cost_table": cost_table,
              "costs": costs, "error_bounds": [float(b) for b in res.error_bounds],
              "rms_bounds": [float(b) for b in res.rms_bounds],
              "diagnostics": {str(k): list(v) for k, v in res.diagnostics.items()}}
    return pack(header, [ipc_bytes(res.tables[n]) for n in names])


def _fraction(text: Any) -> Fraction:
    if not isinstance(text, str) or not _FRACTION.fullmatch(text):
        raise WireError("a cost amount is not an exact fraction 'p/q'")
    return Fraction(text)


def _cost(obj: Any) -> Cost | WEventCost:
    if not isinstance(obj, dict):
        raise WireError("a cost is not a JSON object")
    try:
        if "runs" in obj:
            if type(obj["w"]) is not int:
                raise WireError("a stream cost's w is not an integer")
            return WEventCost(_fraction(obj["epsilon"]), obj["w"], tuple(
                StepRun(int(a), int(b), _fraction(e)) for a, b, e in obj["runs"]))
        return Cost(str(obj["notion"]), _fraction(obj["requested"]), tuple(
            CostItem(str(s), str(n), _fraction(a)) for s, n, a in obj["items"]))
    except WireError:
        raise
    except (KeyError, TypeError, ValueError, AssertionError) as err:
        raise WireError(f"a cost is malformed ({type(err).__name__})") from None


def _costs(header: dict[str, Any]) -> list[tuple[str, str, Cost | WEventCost, str]]:
    table = header.get("cost_table")
    rows = header.get("costs")
    if not isinstance(table, list) or not isinstance(rows, list):
        raise WireError("cost_table and costs must be lists")
    made = [_cost(c) for c in table]
    out = []
    for row in rows:
        if (not isinstance(row, list) or len(row) != 4 or type(row[2]) is not int
                or not 0 <= row[2] < len(made)
                or not all(isinstance(row[i], str) for i in (0, 1, 3))):
            raise WireError("a cost row is not [user_id, step, cost index, stream_id]")
        out.append((row[0], row[1], made[row[2]], row[3]))
    return out


def _floats(header: dict[str, Any], name: str, n: int) -> list[float]:
    got = header.get(name)
    if (not isinstance(got, list) or len(got) != n
            or not all(type(x) is float and math.isfinite(x) for x in got)):
        raise WireError(f"{name}: not {n} finite numbers")
    return got


def _finite(table: pa.Table, names: tuple[str, ...], what: str) -> None:
    for name in names:
        col = table.column(name)
        if pa.types.is_list(col.type):
            if col.null_count:
                raise WireError(f"{what}: column {name!r} holds a null list")
            col = pc.list_flatten(col)
        if col.null_count or not np.isfinite(col.to_numpy()).all():
            raise WireError(f"{what}: column {name!r} holds a null, NaN or infinite value")


def _same_ids(table: pa.Table, name: str, ids: tuple[str, ...], counts: np.ndarray,
              what: str) -> None:
    col = table.column(name).combine_chunks()
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if not col.equals(repeat_ids(list(ids), counts)):
        raise WireError(f"{what}: column {name!r} is not the chunk's ids in payload order")


def _check_curves(tables: dict[str, pa.Table], chunk: CurveChunk, spec: CurveSpec,
                  value_columns: tuple[str, ...]) -> None:
    """Row counts, ids, output times and finiteness of a curve chunk's tables."""
    n = len(chunk.curve_ids)
    ones = np.ones(n, dtype=np.int64)
    curves, values, segments = tables["curves"], tables["values"], tables["segments"]
    if curves.num_rows != n:
        raise WireError(f"curves: {curves.num_rows} rows instead of {n}")
    _same_ids(curves, "user_id", chunk.user_ids, ones, "curves")
    _same_ids(curves, "curve_id", chunk.curve_ids, ones, "curves")
    _finite(curves, ("duration", "error_bound"), "curves")
    batch = CurveBatch.from_arrays(chunk.t, chunk.values, chunk.offsets)
    grid, offsets = ((batch.t, batch.offsets) if spec.evaluate_on == "input"
                     else spec.framing.frames(batch).grid())
    points = np.diff(offsets)
    if values.num_rows != int(points.sum()):
        raise WireError(f"values: {values.num_rows} rows instead of {int(points.sum())}")
    _same_ids(values, "user_id", chunk.user_ids, points, "values")
    _same_ids(values, "curve_id", chunk.curve_ids, points, "values")
    if not np.array_equal(values.column("t").to_numpy(), np.asarray(grid, dtype=np.float64)):
        raise WireError("values: the output times are not the chunk's public grid")
    _finite(values, value_columns, "values")
    _finite(segments, ("t_start", "t_end", "coefficients"), "segments")
    for name, ids in (("user_id", chunk.user_ids), ("curve_id", chunk.curve_ids)):
        col = segments.column(name).combine_chunks()
        if col.null_count or not set(col.dictionary_decode().unique().to_pylist()) <= set(ids):
            raise WireError(f"segments: column {name!r} names curves not in the chunk")


def _check_streams(tables: dict[str, pa.Table], chunk: StreamChunk) -> None:
    """Row count, ids, steps and finiteness of a stream chunk's samples."""
    samples = tables["samples"]
    counts = np.diff(chunk.offsets)
    if samples.num_rows != int(counts.sum()):
        raise WireError(f"samples: {samples.num_rows} rows instead of {int(counts.sum())}")
    _same_ids(samples, "user_id", chunk.user_ids, counts, "samples")
    _same_ids(samples, "stream_id", chunk.stream_ids, counts, "samples")
    if not np.array_equal(samples.column("step").to_numpy(),
                          np.asarray(chunk.steps, dtype=np.int64)):
        raise WireError("samples: the steps are not the chunk's")
    _finite(samples, ("y",), "samples")


def decode_result(body: bytes, chunk: CurveChunk | StreamChunk, spec: Any,
                  value_columns: tuple[str, ...] = ()) -> ChunkResult:
    """A worker's answer for `chunk`, read with json and pyarrow only, and checked.

    Raises:
        WireError: the answer is not a well-formed answer for this chunk.
    """
    kind = "streams" if isinstance(chunk, StreamChunk) else "curves"
    names = _TABLES[kind]
    header, parts = unpack(body, max_parts=len(names))
    if header.get("kind") != kind or header.get("index") != chunk.index:
        raise WireError("the answer is for another chunk or kind")
    if header.get("tables") != list(names) or len(parts) != len(names):
        raise WireError(f"the answer's tables are not {list(names)}")
    schemas = expected_schemas(kind, value_columns)
    tables = {n: read_table(p, schemas[n], n) for n, p in zip(names, parts, strict=True)}
    diagnostics = header.get("diagnostics")
    if not isinstance(diagnostics, dict) or not all(
            isinstance(v, list) for v in diagnostics.values()):
        raise WireError("diagnostics: not an object of lists")
    if kind == "curves":
        _check_curves(tables, chunk, spec, value_columns)
        n = len(chunk.curve_ids)
        bounds, rms = _floats(header, "error_bounds", n), _floats(header, "rms_bounds", n)
    else:
        _check_streams(tables, chunk)
        bounds, rms = _floats(header, "error_bounds", 1), _floats(header, "rms_bounds", 0)
    return ChunkResult(chunk.index, tables, _costs(header), bounds, diagnostics, rms)
