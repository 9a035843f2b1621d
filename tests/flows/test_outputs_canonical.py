"""Dictionary id columns are rebuilt from their rows alone (files.outputs._canonical).

The reference below is the first implementation (unify the chunks' dictionaries,
combine, then order the used ids by first row with a sort): the run-based
rebuild must give the same table, hence the same Parquet bytes, for any chunks.
"""

from __future__ import annotations

import io
import random

import numpy as np
import pyarrow as pa
import pytest

from files.outputs import RowGroupWriter, _canonical


def _reference(table: pa.Table) -> pa.Table:
    table = table.unify_dictionaries().combine_chunks()
    columns = []
    for col in table.columns:
        if pa.types.is_dictionary(col.type):
            arr = col.chunk(0)
            idx = arr.indices.to_numpy(zero_copy_only=False)
            used, first, inverse = np.unique(idx, return_index=True, return_inverse=True)
            order = np.argsort(first, kind="stable")
            rank = np.empty(order.size, dtype=np.int32)
            rank[order] = np.arange(order.size, dtype=np.int32)
            col = pa.DictionaryArray.from_arrays(
                pa.array(rank[inverse].astype(np.int32), pa.int32()),
                arr.dictionary.take(pa.array(used[order], pa.int64())))
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=table.schema)


def _chunk(rng: random.Random, pool: list[str]) -> pa.Table:
    """Runs of ids (sometimes not in runs), a dictionary with unused and shared entries."""
    words = rng.sample(pool, rng.randint(1, len(pool)))
    n = rng.randint(0, 30)
    if rng.random() < 0.7:
        idx = []
        while len(idx) < n:
            idx += [rng.randrange(len(words))] * rng.randint(1, 6)
        idx = idx[:n]
    else:
        idx = [rng.randrange(len(words)) for _ in range(n)]
    ids = pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), pa.array(words))
    return pa.table({"user_id": ids, "v": np.arange(n, dtype=np.float64)})


def test_rebuilt_dictionaries_equal_the_sorting_reference():
    rng = random.Random(3)
    pool = [f"u{i}" for i in range(12)] + ["", "ü" * 3, "a'; --"]
    for _ in range(400):
        table = pa.concat_tables([_chunk(rng, pool) for _ in range(rng.randint(1, 5))])
        if table.num_rows > 2 and rng.random() < 0.5:  # a row group cut out of the chunks
            a = rng.randrange(table.num_rows)
            table = table.slice(a, rng.randint(0, table.num_rows - a))
        got, want = _canonical(table), _reference(table)
        assert got.equals(want)
        assert got.column("user_id").chunk(0).dictionary.equals(
            want.column("user_id").chunk(0).dictionary)
        assert got.column("user_id").num_chunks == 1


def test_the_same_rows_in_other_chunks_write_the_same_bytes():
    rng = random.Random(5)
    pool = [f"user-{i:03d}" for i in range(40)]
    table = pa.concat_tables([_chunk(rng, pool) for _ in range(30)])
    ids = table.column("user_id").to_pylist()
    outs = []
    for cuts in ([table.num_rows], [7, 100, table.num_rows], [1] * 50 + [table.num_rows]):
        buf, w, start = io.BytesIO(), None, 0
        for stop in sorted(set(min(c + i, table.num_rows) for i, c in enumerate(cuts))):
            part = table.slice(start, stop - start)
            plain = pa.DictionaryArray.from_arrays(
                pa.array(range(part.num_rows), pa.int32()),
                pa.array(ids[start:stop], pa.string()))  # other dictionaries, same rows
            part = part.set_column(0, "user_id", plain)
            w = w or RowGroupWriter(buf, part.schema)
            w.write(part)
            start = stop
        w.close()
        outs.append(buf.getvalue())
    assert outs[0] == outs[1] == outs[2]


def test_a_null_id_is_refused():
    ids = pa.DictionaryArray.from_arrays(pa.array([0, None], pa.int32()), pa.array(["a"]))
    with pytest.raises(ValueError, match="null"):
        _canonical(pa.table({"user_id": ids}))
