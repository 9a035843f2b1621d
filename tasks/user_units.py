"""Release outputs in the user's own units: lon/lat geometry, streams in the declared range.

Curve domains with a projection release x/y metres (the metric of the
guarantee); this module maps them back to WGS84 longitude/latitude with the
inverse of the domain's public projection (`ingest.projection.unproject`).
Stream releases are randomized on [0, 1]-normalised values; this module maps
the private reports and the CPR reconstruction back to the declared value
range (``low + v * (high - low)``) and the steps to the domain's time unit.
Both are post-processing of released outputs with public parameters: they
cost no budget and read no raw data.

Files (next to the release's own outputs, read one row group at a time, so
memory is bounded by a row group, and written in row groups of
`files.outputs.ROW_GROUP_ROWS` rows like every release output):

- ``values_lonlat.parquet``: user_id, curve_id, t, lon, lat (degrees).
- ``curves_lonlat.parquet``: GeoParquet 1.1, one WKB LineString (lon, lat,
  OGC:CRS84) per curve, with user_id, curve_id, points, duration.
- ``curves_lonlat.geojson``: the same lines as GeoJSON, for small releases
  (at most `GEOJSON_MAX_POINTS` points).
- ``samples_units.parquet``: user_id, stream_id, step, t (when a step has a
  duration) and value: the unbiased estimate of each sample (the mechanism's
  registered ``estimate``, e.g. Square Wave's), in
  the domain's value unit (noisy: it often falls outside the declared range).
- ``reconstruction_units.parquet``: the CPR reconstruction as value_hat, in
  the domain's value unit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from files.outputs import ParquetAppender, RowGroupWriter
from files.report_files import new_file, save_text
from ingest.projection import unproject
from mechanisms import registry
from mechanisms.cost import epsilon_per_step, float_at_most
from mechanisms.registry import StreamMechanism
from schemas.policy import Domain
from schemas.units import domain_record, lonlat_supported, stream_time, to_value_range

#: Above this many points a release gets GeoParquet only (GeoJSON is ~40 bytes a point).
GEOJSON_MAX_POINTS = 50_000

_GEO_META = {"version": "1.1.0", "primary_column": "geometry",
             "columns": {"geometry": {"encoding": "WKB", "geometry_types": ["LineString"]}}}


def _row_groups(path: Path) -> Iterator[pa.Table]:
    pf = pq.ParquetFile(path)
    for i in range(pf.metadata.num_row_groups):
        yield pf.read_row_group(i)


def _whole_curves(path: Path) -> Iterator[pa.Table]:
    """The rows of `path` in pieces that each hold whole curves (a curve can span row groups)."""
    carry: pa.Table | None = None
    for table in _row_groups(path):
        if carry is not None:
            table = pa.concat_tables([carry, table]).combine_chunks()
        if table.num_rows == 0:
            carry = table
            continue
        starts, _ = _runs(table)
        last = int(starts[-1])
        if last:
            yield table.slice(0, last)
        carry = table.slice(last)
    if carry is not None and carry.num_rows:
        yield carry


def _runs(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Start and stop row of each (user_id, curve_id) run of a row group."""
    users = np.asarray(table.column("user_id").to_pylist(), dtype=object)
    items = np.asarray(table.column(table.column_names[1]).to_pylist(), dtype=object)
    n = len(users)
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = (users[1:] != users[:-1]) | (items[1:] != items[:-1])
    starts = np.flatnonzero(new)
    return starts, np.append(starts[1:], n)


def _wkb_linestring(lon: np.ndarray, lat: np.ndarray) -> bytes:
    head = np.array([1], np.uint8).tobytes() + np.array([2, len(lon)], "<u4").tobytes()
    return head + np.column_stack([lon, lat]).astype("<f8").tobytes()


def _lonlat_tables(table: pa.Table, dom: Domain) -> tuple[pa.Table, pa.Table, list[dict]]:
    x_col, y_col = dom.value_columns
    lon, lat = unproject(table.column(x_col).to_numpy(), table.column(y_col).to_numpy(),
                         projection=dom.projection or "", ref_lat=dom.ref_lat)
    points = pa.table({"user_id": table.column("user_id"), "curve_id": table.column("curve_id"),
                       "t": table.column("t"), "lon": pa.array(lon), "lat": pa.array(lat)})
    starts, stops = _runs(table)
    t = table.column("t").to_numpy()
    users = table.column("user_id").take(pa.array(starts))
    curves = table.column("curve_id").take(pa.array(starts))
    wkb = [_wkb_linestring(lon[a:b], lat[a:b]) for a, b in zip(starts, stops, strict=True)]
    lines = pa.table({"user_id": users, "curve_id": curves,
                      "points": pa.array((stops - starts).astype(np.int64)),
                      "duration": pa.array(t[stops - 1] - t[starts]),
                      "geometry": pa.array(wkb, pa.binary())})
    features = [{"type": "Feature",
                 "properties": {"user_id": u, "curve_id": c, "duration": float(t[b - 1] - t[a])},
                 "geometry": {"type": "LineString",
                              "coordinates": np.column_stack([lon[a:b], lat[a:b]]).tolist()}}
                for u, c, a, b in zip(users.to_pylist(), curves.to_pylist(), starts, stops,
                                      strict=True)]
    return points, lines, features


def _write_curves_lonlat(rdir: Path, dom: Domain, values: Path) -> dict[str, str]:
    total = pq.ParquetFile(values).metadata.num_rows
    features: list[dict] | None = [] if total <= GEOJSON_MAX_POINTS else None
    with (new_file(rdir / "values_lonlat.parquet") as f_points,
          new_file(rdir / "curves_lonlat.parquet") as f_lines):
        w_points = w_lines = None
        geo = {b"geo": json.dumps(_GEO_META, sort_keys=True).encode()}
        for table in _whole_curves(values):
            points, lines, feats = _lonlat_tables(table, dom)
            lines = lines.replace_schema_metadata(geo)
            if w_points is None:
                w_points = RowGroupWriter(f_points, points.schema)
                w_lines = RowGroupWriter(f_lines, lines.schema)
            w_points.write(points)
            w_lines.write(lines)
            if features is not None:
                features.extend(feats)
        if w_points is None or w_lines is None:
            raise ValueError(f"{values} has no row: nothing to map to lon/lat")
        w_points.close()
        w_lines.close()
    files = {"values_lonlat": "values_lonlat.parquet", "curves_lonlat": "curves_lonlat.parquet"}
    if features is not None:
        save_text(rdir / "curves_lonlat.geojson",
                   json.dumps({"type": "FeatureCollection", "features": features},
                              separators=(",", ":")) + "\n")
        files["curves_geojson"] = "curves_lonlat.geojson"
    return files


def _units_table(table: pa.Table, column: str, new: str, definition: dict[str, Any],
                 debias: tuple[StreamMechanism, Fraction] | None) -> pa.Table:
    """Rows of a stream output in the user's units (row by row: any slice of rows maps alone).

    `debias` is the release's registry entry and exact ε/w: its `estimate` maps
    each report to the unbiased estimate of its input.
    """
    unit = str(definition.get("value_unit", ""))
    steps = table.column("step").to_numpy()
    cols: dict[str, Any] = {"user_id": table.column("user_id"),
                            "stream_id": table.column("stream_id"),
                            "step": table.column("step")}
    t = stream_time(steps, definition)
    if t is not None:
        cols["t"] = pa.array(t)
    v = table.column(column).to_numpy()
    if debias is not None:
        entry, eps_step = debias
        v = entry.estimator(v, epsilon_per_step=float_at_most(eps_step))
    cols[new] = pa.array(to_value_range(v, definition["value_range"]))
    part = pa.table(cols)
    fields = [f.with_metadata({"unit": unit}) if f.name == new else f for f in part.schema]
    return part.cast(pa.schema(fields))


def samples_units(samples: pa.Table, dom: Domain, parameters: dict[str, Any]) -> pa.Table | None:
    """A chunk's released reports as ``samples_units`` rows (None: the domain has no range).

    What `write_user_unit_outputs` writes from ``samples.parquet``, for the
    rows of one chunk: the release appends it as each chunk finishes
    (`flows.release_stages.ChunkOutputs`), so the file is encoded while the
    mechanism runs and the samples are not read back. Post-processing of
    released reports with public parameters: no budget.
    """
    if dom.kind != "streams" or dom.value_range is None:
        return None
    return _units_table(samples, "y", "value", domain_record(dom)["definition"],
                        _debias(parameters))


def _debias(parameters: dict[str, Any]) -> tuple[StreamMechanism, Fraction]:
    """The release's registry entry and exact ε/w (the reports' estimator and its parameter)."""
    entry = registry.stream(str(parameters.get("mechanism", "square_wave")))
    return entry, epsilon_per_step(Fraction(str(parameters["epsilon"])), int(parameters["w"]))


def _write_stream_units(src: Path, out: Path, column: str, new: str,
                        definition: dict[str, Any],
                        debias: tuple[StreamMechanism, Fraction] | None) -> None:
    """Scale one stream output to the declared range (reports first de-biased if `debias`)."""
    with new_file(out) as fh:
        writer = None
        for table in _row_groups(src):
            part = _units_table(table, column, new, definition, debias)
            if writer is None:
                writer = RowGroupWriter(fh, part.schema)
            writer.write(part)
        if writer is None:
            raise ValueError(f"{src} has no row group: nothing to scale")
        writer.close()


def write_user_unit_outputs(rdir: str | Path, dom: Domain, files: dict[str, str],
                            parameters: dict[str, Any],
                            appended: ParquetAppender | None = None) -> dict[str, str]:
    """Write the release's outputs in the user's units; return {output name: file name}.

    Curves of a projected domain get lon/lat files; streams get the unbiased
    estimate of each private report (the registry entry's ``estimate`` of the
    release's mechanism, with the release's public ε/w) and the reconstruction,
    in the declared value range. An output already appended chunk by chunk
    (``samples_units`` in `appended`, see `samples_units`) is finished from
    there, the same bytes, instead of read back and scaled.
    Nothing for other domains or for outputs the release did not write (e.g.
    every user denied). Post-processing only: no budget.
    """
    out = Path(rdir)
    written: dict[str, str] = {}
    if dom.kind == "curves" and "values" in files and lonlat_supported(dom.projection,
                                                                         dom.ref_lat):
        written.update(_write_curves_lonlat(out, dom, out / files["values"]))
    if dom.kind == "streams" and dom.value_range is not None:
        definition = domain_record(dom)["definition"]
        for name, column, new, debias in (("samples", "y", "value", _debias(parameters)),
                                          ("reconstruction", "value_hat", "value_hat", None)):
            if name not in files:
                continue
            target = out / f"{name}_units.parquet"
            if appended is not None and f"{name}_units" in appended:
                appended.finish(f"{name}_units", target)
            else:
                _write_stream_units(out / files[name], target, column, new, definition, debias)
            written[f"{name}_units"] = f"{name}_units.parquet"
    return written
