"""The pure parts of the local re-execution check (tasks/recheck.py)."""

from __future__ import annotations

import hashlib
import hmac
import json

import numpy as np
import pyarrow as pa
import pytest

from schemas.errors import ParameterError
from tasks.privatize import (
    ChunkResult,
    CurveSpec,
    StreamSpec,
    privatize_curve_chunk,
    privatize_stream_chunk,
)
from tasks.recheck import (
    CheckedFuture,
    RemoteResultMismatch,
    check_rate,
    compare,
    curve_subchunk,
    sample_key,
    sample_users,
    stream_subchunk,
    user_rows,
)
from tasks.stage import CurveChunk, SeededSegment, StreamChunk

USERS = [f"u{i}" for i in range(10)]


@pytest.mark.parametrize(("rate", "k"), [(0.0, 1), (0.01, 1), (0.1, 1), (0.11, 2), (0.25, 3),
                                         (0.5, 5), (1.0, 10)])
def test_sample_size_is_ceil_rate_n_and_at_least_one(rate, k):
    assert len(sample_users(b"k" * 32, USERS, rate)) == k


def test_sample_is_the_smallest_hmacs_in_chunk_order_and_repeats():
    key = b"secret"
    ranked = sorted(USERS, key=lambda u: hmac.new(key, u.encode(), hashlib.sha256).digest())
    want = [u for u in USERS if u in set(ranked[:3])]
    assert sample_users(key, USERS + USERS[:2], 0.3) == want  # repeated ids count once
    assert sample_users(key, USERS, 0.3) == want
    assert sample_users(key, [], 0.5) == []


def test_sample_depends_on_the_key():
    picks = {tuple(sample_users(bytes([i]) * 32, USERS, 0.1)) for i in range(40)}
    assert len(picks) > 5  # 40 keys: one user each, spread over the ten


def test_sample_key_is_hmac_of_the_noise_key_over_label_release_chunk():
    key = b"n" * 32
    msg = json.dumps(["privpipe recheck sample v1", "r1", 3]).encode()
    assert sample_key(key, "r1", 3) == hmac.new(key, msg, hashlib.sha256).digest()
    assert len({sample_key(key, "r1", 3), sample_key(key, "r1", 4), sample_key(key, "r2", 3),
                sample_key(b"m" * 32, "r1", 3)}) == 4


@pytest.mark.parametrize("bad", [-0.01, 1.5, "nan", "inf", "x", None, ""])
def test_bad_rates_are_refused_naming_the_option(bad):
    with pytest.raises(ParameterError, match="PRIVPIPE_RECHECK_RATE"):
        check_rate(bad)


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("1", 1.0), ("0.05", 0.05)])
def test_good_rates(text, value):
    assert check_rate(text) == value


def _curve_chunk() -> CurveChunk:
    """Four users: u0 and u2 with two curves, u1 and u3 with one; smooth 1-D curves."""
    users, curves, t, v, offsets = [], [], [], [], [0]
    for u, n_curves in (("u0", 2), ("u1", 1), ("u2", 2), ("u3", 1)):
        for c in range(n_curves):
            n = 40 + 8 * c
            tt = np.linspace(0.0, 10.0, n)
            users.append(u)
            curves.append(f"c{c}")
            t.append(tt)
            v.append(np.sin(tt + int(u[1])) + c)
            offsets.append(offsets[-1] + n)
    seeds = {u: 1000 + i for i, u in enumerate(dict.fromkeys(users))}
    return CurveChunk(7, tuple(users), tuple(curves), np.concatenate(t),
                      np.concatenate(v)[:, None], np.array(offsets, dtype=np.int64), seeds)


def test_curve_subchunk_takes_the_users_rows_by_hand():
    chunk = _curve_chunk()
    sub = curve_subchunk(chunk, ["u2", "u1"])
    assert sub.user_ids == ("u1", "u2", "u2") and sub.curve_ids == ("c0", "c0", "c1")
    assert sub.offsets.tolist() == [0, 40, 80, 128]
    np.testing.assert_array_equal(sub.t, chunk.t[88:216])  # u0's curves hold rows 0-87
    np.testing.assert_array_equal(sub.values, chunk.values[88:216])
    assert sub.seeds == {"u1": 1001, "u2": 1002} and sub.index == 7


def _stream_chunk() -> StreamChunk:
    users, streams, steps, values, offsets, segments = [], [], [], [], [0], []
    for i, u in enumerate(("m0", "m1", "m2")):
        st = np.arange(5 * i, 5 * i + 30, dtype=np.int64)
        users.append(u)
        streams.append("s0")
        steps.append(st)
        values.append((np.sin(st / 3.0) + 1) / 2)
        offsets.append(offsets[-1] + st.size)
        segments.append((SeededSegment(int(st[0]), int(st[-1]), True, 77 + i),))
    return StreamChunk(2, tuple(users), tuple(streams), np.concatenate(steps),
                       np.concatenate(values), np.array(offsets, dtype=np.int64),
                       tuple(segments))


def test_stream_subchunk_takes_the_users_rows_by_hand():
    chunk = _stream_chunk()
    sub = stream_subchunk(chunk, ["m1"])
    assert sub.user_ids == ("m1",) and sub.offsets.tolist() == [0, 30]
    assert sub.steps.tolist() == list(range(5, 35)) and sub.segments == chunk.segments[1:2]


SPEC = CurveSpec("privfuncseg", "1", None)


def _curve_compare(remote: ChunkResult, sample: list[str]) -> list[str]:
    chunk = _curve_chunk()
    local = privatize_curve_chunk(curve_subchunk(chunk, sample), ("x",), SPEC)
    return compare(remote, local, index=chunk.index, chunk_users=chunk.user_ids, sample=sample,
                   per_item=[u in sample for u in chunk.user_ids])


def _remote() -> ChunkResult:
    return privatize_curve_chunk(_curve_chunk(), ("x",), SPEC)


@pytest.mark.parametrize("sample", [["u0"], ["u1", "u3"], ["u0", "u1", "u2", "u3"]])
def test_an_honest_chunk_matches_its_local_sub_chunk(sample):
    """Per-user independence: a sub-chunk re-run gives the sampled users' bytes exactly."""
    assert _curve_compare(_remote(), sample) == []


def _shift_user(res: ChunkResult, user: str) -> ChunkResult:
    values = res.tables["values"]
    mine = np.array([u == user for u in values.column("user_id").to_pylist()])
    x = values.column("x").to_numpy() + np.where(mine, 2.0**-30, 0.0)
    res.tables["values"] = values.set_column(values.column_names.index("x"), "x", pa.array(x))
    return res


def test_a_sampled_users_changed_bit_is_found_and_named():
    problems = _curve_compare(_shift_user(_remote(), "u2"), ["u1", "u2"])
    assert problems == ["table 'values': the rows of the sampled users differ for 'u2'"]


def test_an_unsampled_users_change_is_not_seen_by_that_sample():
    """What the rate buys: only the sampled users' rows are re-executed."""
    assert _curve_compare(_shift_user(_remote(), "u3"), ["u1", "u2"]) == []


def test_rows_of_a_user_not_in_the_chunk_are_refused():
    res = _remote()
    curves = res.tables["curves"]
    ids = curves.column("user_id").to_pylist()
    ids[-1] = "intruder"
    res.tables["curves"] = curves.set_column(0, "user_id", pa.array(ids, pa.string()))
    assert _curve_compare(res, ["u0"]) == [
        "table 'curves' has rows of 1 user(s) not in the chunk"]


def test_rows_without_a_user_are_refused_also_in_a_dictionary_column():
    res = _remote()
    values = res.tables["values"]
    ids = values.column("user_id").combine_chunks()
    assert pa.types.is_dictionary(ids.type)  # as the task writes it
    nulled = pa.DictionaryArray.from_arrays(
        pa.array(ids.indices.to_pylist()[:-1] + [None], pa.int32()), ids.dictionary)
    res.tables["values"] = values.set_column(0, "user_id", nulled)
    assert _curve_compare(res, ["u0"]) == [
        "table 'values' has rows of 1 user(s) not in the chunk"]


def test_changed_costs_and_bounds_of_sampled_users_are_found():
    res = _remote()
    res.costs = [(u, s, c if u != "u1" else None, x) for u, s, c, x in res.costs]
    res.error_bounds = [b * (2 if i == 0 else 1) for i, b in enumerate(res.error_bounds)]
    assert _curve_compare(res, ["u1"]) == ["the costs of the sampled users"]
    assert _curve_compare(res, ["u0"]) == ["the error bounds of the sampled users"]


def test_a_result_of_another_shape_is_refused():
    res = _remote()
    assert _curve_compare("424242", ["u0"]) == ["a str instead of a chunk result"]  # type: ignore[arg-type]
    res.tables.pop("segments")
    assert "tables ['curves', 'values'] instead of" in _curve_compare(res, ["u0"])[0]
    other = _remote()
    other.index = 8
    assert _curve_compare(other, ["u0"]) == ["chunk index 8"]


def test_an_honest_stream_chunk_matches_and_raw_values_do_not():
    chunk, spec = _stream_chunk(), StreamSpec("1", 4)
    remote = privatize_stream_chunk(chunk, spec)
    local = privatize_stream_chunk(stream_subchunk(chunk, ["m1"]), spec)
    kw = dict(index=2, chunk_users=chunk.user_ids, sample=["m1"], per_item=None)
    assert compare(remote, local, **kw) == []
    samples = remote.tables["samples"]
    remote.tables["samples"] = samples.set_column(3, "y", pa.array(chunk.values))
    assert compare(remote, local, **kw) == [
        "table 'samples': the rows of the sampled users differ for 'm1'"]


def test_user_rows_decodes_dictionary_columns():
    ids = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array(["a", "b"]))
    rows = user_rows(pa.table({"user_id": ids, "v": [1.0, 2.0, 3.0]}), ["a"])
    assert rows.column("user_id").type == pa.string()
    assert rows.to_pydict() == {"user_id": ["a", "a"], "v": [1.0, 3.0]}


class _Done:
    def __init__(self, res: object) -> None:
        self.res = res

    def result(self) -> object:
        return self.res


def test_checked_future_returns_an_honest_result_and_names_the_worker_of_a_bad_one():
    chunk = _curve_chunk()

    def checked(res: ChunkResult) -> CheckedFuture:
        return CheckedFuture(_Done(res), index=7, chunk_users=chunk.user_ids, sample=["u0"],
                             subchunk=curve_subchunk(chunk, ["u0"]),
                             local=lambda sub: privatize_curve_chunk(sub, ("x",), SPEC),
                             per_item=True, worker_of=lambda f: "tcp://10.0.0.9:4000")

    honest = _remote()
    assert checked(honest).result() is honest
    with pytest.raises(RemoteResultMismatch, match=r"chunk 7 from worker tcp://10\.0\.0\.9:4000"
                       ) as exc:
        checked(_shift_user(_remote(), "u0")).result()
    assert exc.value.exit_code == 4 and exc.value.worker == "tcp://10.0.0.9:4000"
    odd = _remote()
    odd.costs = None  # type: ignore[assignment]
    with pytest.raises(RemoteResultMismatch, match=r"a malformed result \(TypeError\)"):
        checked(odd).result()
