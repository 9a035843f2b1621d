"""Chunk requests on the privpipe wire (version 1): what the flow sends a worker, and nothing else.

A request is a `tasks.wire` envelope whose header is::

    {"wire": 1, "kind": "curves" | "streams", "index": <chunk number>,
     "spec": {...public parameters...}, "value_columns": [...] (curves),
     "parts": [...]}

and whose parts are three Arrow IPC streams:

- curves: ``items`` (user_id string, curve_id string, points int64: the
  chunk's curves in payload order), ``samples`` (t float64, then one float64
  column per value column, the curves' samples concatenated) and ``seeds``
  (user_id string, seed fixed_size_binary(32): each admitted user's 256-bit
  noise seed, big-endian);
- streams: ``items`` (user_id, stream_id string, points int64), ``samples``
  (step int64, value float64) and ``segments`` (item int64, first_step
  int64, last_step int64, new bool, seed fixed_size_binary(32): each
  stream's seeded output ranges).

The spec is the public `CurveSpec` / `StreamSpec` as JSON (rebuilt, hence
re-validated, by the worker). A worker thus sees the admitted users' samples
and noise seeds of its own chunk, and the public parameters: never the
ledger, the noise key, other chunks or denied users.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from tasks.privatize import CurveFraming, CurveSpec, StreamSpec
from tasks.stage import CurveChunk, SeededSegment, StreamChunk
from tasks.wire import WireError, ipc_bytes, pack, read_table, unpack

__all__ = ["ChunkRequest", "decode_request", "encode_curve_request", "encode_stream_request"]

_SEED = pa.binary(32)
_CURVE_ITEMS = pa.schema([("user_id", pa.string()), ("curve_id", pa.string()),
                          ("points", pa.int64())])
_STREAM_ITEMS = pa.schema([("user_id", pa.string()), ("stream_id", pa.string()),
                           ("points", pa.int64())])
_CURVE_SEEDS = pa.schema([("user_id", pa.string()), ("seed", _SEED)])
_STREAM_SAMPLES = pa.schema([("step", pa.int64()), ("value", pa.float64())])
_SEGMENTS = pa.schema([("item", pa.int64()), ("first_step", pa.int64()),
                       ("last_step", pa.int64()), ("new", pa.bool_()), ("seed", _SEED)])


class ChunkRequest:
    """A decoded request: the chunk payload and what to run on it."""

    def __init__(self, kind: str, chunk: CurveChunk | StreamChunk, spec: CurveSpec | StreamSpec,
                 value_columns: tuple[str, ...]) -> None:
        self.kind, self.chunk, self.spec, self.value_columns = kind, chunk, spec, value_columns


def _curve_samples_schema(value_columns: tuple[str, ...]) -> pa.Schema:
    return pa.schema([("t", pa.float64()), *[(c, pa.float64()) for c in value_columns]])


def _seed_bytes(seed: int) -> bytes:
    return int(seed).to_bytes(32, "big")


def curve_spec_json(spec: CurveSpec) -> dict[str, Any]:
    """The public parameters of a curve spec as JSON."""
    f = spec.framing
    return {"mechanism": spec.mechanism, "epsilon": spec.epsilon, "rho": spec.rho,
            "options": spec.options, "beta": spec.beta, "evaluate_on": spec.evaluate_on,
            "framing": {"window": f.window, "points_public": f.points_public,
                        "grid_points": f.grid_points,
                        "sample_times_public": f.sample_times_public}}


def stream_spec_json(spec: StreamSpec) -> dict[str, Any]:
    """The public parameters of a stream spec as JSON."""
    return {"epsilon": spec.epsilon, "w": spec.w, "mechanism": spec.mechanism,
            "reconstruct": spec.reconstruct}


def encode_curve_request(chunk: CurveChunk, value_columns: tuple[str, ...],
                         spec: CurveSpec) -> bytes:
    """The request of a curve chunk (see the module docstring)."""
    items = pa.table({"user_id": pa.array(chunk.user_ids, pa.string()),
                      "curve_id": pa.array(chunk.curve_ids, pa.string()),
                      "points": pa.array(np.diff(chunk.offsets), pa.int64())},
                     schema=_CURVE_ITEMS)
    values = np.asarray(chunk.values, dtype=np.float64).reshape(-1, len(value_columns))
    samples = pa.table([pa.array(np.asarray(chunk.t, dtype=np.float64)),
                        *[pa.array(values[:, j]) for j in range(len(value_columns))]],
                       schema=_curve_samples_schema(value_columns))
    users = list(chunk.seeds)
    seeds = pa.table({"user_id": pa.array(users, pa.string()),
                      "seed": pa.array([_seed_bytes(chunk.seeds[u]) for u in users], _SEED)},
                     schema=_CURVE_SEEDS)
    header = {"kind": "curves", "index": int(chunk.index), "spec": curve_spec_json(spec),
              "value_columns": list(value_columns)}
    return pack(header, [ipc_bytes(items), ipc_bytes(samples), ipc_bytes(seeds)])


def encode_stream_request(chunk: StreamChunk, spec: StreamSpec) -> bytes:
    """The request of a stream chunk (see the module docstring)."""
    items = pa.table({"user_id": pa.array(chunk.user_ids, pa.string()),
                      "stream_id": pa.array(chunk.stream_ids, pa.string()),
                      "points": pa.array(np.diff(chunk.offsets), pa.int64())},
                     schema=_STREAM_ITEMS)
    samples = pa.table([pa.array(np.asarray(chunk.steps, dtype=np.int64)),
                        pa.array(np.asarray(chunk.values, dtype=np.float64))],
                       schema=_STREAM_SAMPLES)
    rows = [(i, s) for i, segs in enumerate(chunk.segments) for s in segs]
    segments = pa.table({
        "item": pa.array([i for i, _ in rows], pa.int64()),
        "first_step": pa.array([s.first_step for _, s in rows], pa.int64()),
        "last_step": pa.array([s.last_step for _, s in rows], pa.int64()),
        "new": pa.array([bool(s.new) for _, s in rows], pa.bool_()),
        "seed": pa.array([_seed_bytes(s.seed) for _, s in rows], _SEED)}, schema=_SEGMENTS)
    header = {"kind": "streams", "index": int(chunk.index), "spec": stream_spec_json(spec)}
    return pack(header, [ipc_bytes(items), ipc_bytes(samples), ipc_bytes(segments)])


def _offsets(points: pa.ChunkedArray, rows: int) -> np.ndarray:
    counts = points.to_numpy()
    if (counts < 0).any() or int(counts.sum()) != rows:
        raise WireError("items: point counts do not match the samples")
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _strings(table: pa.Table, name: str) -> tuple[str, ...]:
    col = table.column(name)
    if col.null_count:
        raise WireError(f"a null {name}")
    return tuple(col.to_pylist())


def _spec(kind: str, spec: Any) -> CurveSpec | StreamSpec:
    if not isinstance(spec, dict):
        raise WireError("the spec is not a JSON object")
    try:
        if kind == "streams":
            return StreamSpec(**spec)
        framing = CurveFraming(**spec.pop("framing", {}))
        return CurveSpec(**spec, framing=framing)
    except Exception as err:  # noqa: BLE001 - any bad spec is a bad request
        raise WireError(f"the spec is refused ({type(err).__name__}: {err})") from None


def _curve_chunk(header: dict[str, Any], parts: list[memoryview]) -> ChunkRequest:
    cols = header.get("value_columns")
    if not isinstance(cols, list) or not cols or not all(isinstance(c, str) for c in cols):
        raise WireError("value_columns is not a list of column names")
    columns = tuple(cols)
    items = read_table(parts[0], _CURVE_ITEMS, "items")
    samples = read_table(parts[1], _curve_samples_schema(columns), "samples")
    seeds = read_table(parts[2], _CURVE_SEEDS, "seeds")
    users = _strings(items, "user_id")
    seed_of = {u: int.from_bytes(s, "big") for u, s in zip(
        _strings(seeds, "user_id"), seeds.column("seed").to_pylist(), strict=True)}
    if set(seed_of) != set(users) or seeds.column("seed").null_count:
        raise WireError("seeds: not one seed for each user of the chunk")
    values = np.column_stack([samples.column(c).to_numpy() for c in columns]
                             ) if samples.num_rows else np.empty((0, len(columns)))
    chunk = CurveChunk(header["index"], users, _strings(items, "curve_id"),
                       samples.column("t").to_numpy(), values,
                       _offsets(items.column("points"), samples.num_rows),
                       {u: seed_of[u] for u in dict.fromkeys(users)})
    return ChunkRequest("curves", chunk, _spec("curves", header.get("spec")), columns)


def _stream_chunk(header: dict[str, Any], parts: list[memoryview]) -> ChunkRequest:
    items = read_table(parts[0], _STREAM_ITEMS, "items")
    samples = read_table(parts[1], _STREAM_SAMPLES, "samples")
    segs = read_table(parts[2], _SEGMENTS, "segments")
    if any(segs.column(n).null_count for n in segs.column_names):
        raise WireError("segments: a null field")
    per_item: list[list[SeededSegment]] = [[] for _ in range(items.num_rows)]
    for i, a, b, new, seed in zip(*(segs.column(n).to_pylist() for n in segs.column_names),
                                  strict=True):
        if not 0 <= i < len(per_item):
            raise WireError("segments: an item outside the chunk")
        per_item[i].append(SeededSegment(a, b, new, int.from_bytes(seed, "big")))
    chunk = StreamChunk(header["index"], _strings(items, "user_id"),
                        _strings(items, "stream_id"), samples.column("step").to_numpy(),
                        samples.column("value").to_numpy(),
                        _offsets(items.column("points"), samples.num_rows),
                        tuple(tuple(s) for s in per_item))
    return ChunkRequest("streams", chunk, _spec("streams", header.get("spec")), ())


def decode_request(body: bytes) -> ChunkRequest:
    """A chunk request read with json and pyarrow only.

    Raises:
        WireError: anything malformed (the worker answers 400).
    """
    header, parts = unpack(body, max_parts=3)
    kind, index = header.get("kind"), header.get("index")
    if kind not in ("curves", "streams") or type(index) is not int or len(parts) != 3:
        raise WireError("the header needs kind curves|streams, an integer index and 3 parts")
    return (_curve_chunk if kind == "curves" else _stream_chunk)(header, parts)
