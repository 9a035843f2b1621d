"""Staging files and release outputs: round trips, determinism, no partial outputs."""

import errno
import hashlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from files.outputs import ParquetAppender, parquet_writer
from files.staging import (
    group_spans,
    items_path,
    read_arrow,
    read_curve_chunk,
    read_stream_chunk,
    repeat_ids,
    repeat_ids_encoded,
    stage_curve_chunk,
    stage_stream_chunk,
    write_arrow,
)
from ingest import Curve, Stream, UserCurves, UserStreams


def merge_parquet(chunk_paths, out_path):
    """The reference: one Parquet writer, all the chunks' rows as one row group; row count."""
    table = pa.concat_tables([read_arrow(p) for p in chunk_paths]).combine_chunks()
    with open(out_path, "wb") as f:
        writer = parquet_writer(f, table.schema)
        writer.write_table(table, row_group_size=table.num_rows)
        writer.close()
    return table.num_rows


def _chunks(tmp_path, n=3):
    paths = []
    for i in range(n):
        rows = 5 + i
        table = pa.table({"user_id": repeat_ids([f"u{i}", f"v{i}"], [2, rows - 2]),
                          "t": pa.array(np.arange(rows, dtype=float) + i)})
        path = tmp_path / f"values-{i:05d}.arrow"
        write_arrow(table, path)
        paths.append(str(path))
    return paths


def test_appender_writes_the_bytes_of_merge_parquet(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    merged = merge_parquet(_chunks(tmp_path / "a"), tmp_path / "merged.parquet")
    app = ParquetAppender(tmp_path / "staging")
    for p in _chunks(tmp_path / "b"):
        app.add("values", p)
        assert not os.path.exists(p), "an appended chunk file is removed"
    assert not (tmp_path / "appended.parquet").exists()
    assert app.finish("values", tmp_path / "appended.parquet") == merged == 18
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest()
              for n in ("merged.parquet", "appended.parquet")]
    assert digest[0] == digest[1]
    assert pq.ParquetFile(tmp_path / "appended.parquet").num_row_groups == 1
    assert "values" not in app


def _row_group_rows(path) -> list[int]:
    meta = pq.ParquetFile(path).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


@pytest.mark.parametrize("coded", [False, True])
def test_row_groups_have_a_fixed_size_whatever_the_chunks_the_rows_came_in(tmp_path,
                                                                           monkeypatch, coded):
    import files.outputs as outputs

    monkeypatch.setattr(outputs, "ROW_GROUP_ROWS", 4)
    users = [f"u{i}" for i in range(6)]
    counts = [3, 1, 5, 2, 4, 3]  # 18 rows
    ids = repeat_ids_encoded if coded else repeat_ids
    t = np.arange(18, dtype=float)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    digests = set()
    for split in ([6], [1, 5], [2, 2, 2], [3, 3], [1] * 6):  # users per chunk
        app = ParquetAppender(tmp_path / "staging")
        first = 0
        for n in split:
            a, b = bounds[first], bounds[first + n]
            app.add_table("values", pa.table({
                "user_id": ids(users[first:first + n], counts[first:first + n]),
                "t": pa.array(t[a:b])}))
            first += n
        out = tmp_path / f"split-{len(digests)}-{'-'.join(map(str, split))}.parquet"
        assert app.finish("values", out) == 18
        assert _row_group_rows(out) == [4, 4, 4, 4, 2]
        assert pq.read_table(out).column("user_id").to_pylist() == [
            u for u, c in zip(users, counts, strict=True) for _ in range(c)]
        digests.add(hashlib.sha256(out.read_bytes()).hexdigest())
    assert len(digests) == 1, "the bytes follow the chunks the rows came in"


def _chunk_tables(i, rows):
    """Two outputs of chunk `i`, as a stream task and `samples_units` give them."""
    rng = np.random.default_rng(i)
    users = [f"u{i}-{k}" for k in range(3)]
    counts = [rows // 3, rows // 3, rows - 2 * (rows // 3)]
    ids = repeat_ids_encoded(users, counts)
    return {"samples": pa.table({"user_id": ids, "step": pa.array(np.arange(rows)),
                                 "y": pa.array(rng.random(rows))}),
            "samples_units": pa.table({"user_id": ids, "value": pa.array(rng.normal(size=rows))})}


def test_add_tables_writes_the_bytes_of_add_table_in_a_loop(tmp_path, monkeypatch):
    import threading

    import files.outputs as outputs

    monkeypatch.setattr(outputs, "ROW_GROUP_ROWS", 1000)  # row groups cut across chunks
    seen = set()
    write = outputs.RowGroupWriter.write

    def spy(self, table):
        seen.add(threading.current_thread().name.split("_")[0])
        write(self, table)

    monkeypatch.setattr(outputs.RowGroupWriter, "write", spy)
    digests = {}
    for how in ("loop", "parallel"):
        app = ParquetAppender(tmp_path / how / "staging")
        for i, rows in enumerate([700, 1500, 20, 2600]):
            tables = _chunk_tables(i, rows)
            if how == "loop":
                for name, table in tables.items():
                    app.add_table(name, table)
            else:
                app.add_tables(tables)
        digests[how] = {n: hashlib.sha256(_finished(app, n, tmp_path / how)).hexdigest()
                        for n in ("samples", "samples_units")}
        app.close()
    assert digests["parallel"] == digests["loop"]
    assert seen == {"MainThread", "privpipe-encode"}, seen


def test_write_batch_size_changes_no_byte(tmp_path, monkeypatch):
    """`WRITE_BATCH_ROWS` is a speed setting: Arrow's default batches write the same bytes.

    Columns of several data pages each (pages are cut by size, 1 MB), dictionary
    ids with statistics, a noisy float column and a dictionary-encoded int column,
    over row groups of `ROW_GROUP_ROWS`.
    """
    import files.outputs as outputs

    rows = 3 * outputs.ROW_GROUP_ROWS // 2 // 1000 * 1000
    rng = np.random.default_rng(4)
    users = [f"user-{k:06d}" for k in range(rows // 1000)]
    table = pa.table({"user_id": repeat_ids_encoded(users, [1000] * len(users)),
                      "step": pa.array(np.tile(np.arange(1000), len(users))),
                      "y": pa.array(rng.random(rows))})
    digests = []
    for batch in (outputs.WRITE_BATCH_ROWS, 1024):
        monkeypatch.setattr(outputs, "WRITE_BATCH_ROWS", batch)
        path = tmp_path / f"b{batch}.parquet"
        with open(path, "wb") as f:
            writer = outputs.RowGroupWriter(f, table.schema)
            writer.write(table)
            writer.close()
        digests.append(hashlib.sha256(path.read_bytes()).hexdigest())
    meta = pq.ParquetFile(tmp_path / "b1024.parquet").metadata
    assert meta.num_row_groups == 2
    assert meta.row_group(0).column(2).total_compressed_size > 2 * 2**20  # several pages
    assert digests[0] == digests[1]


def _finished(app, name, where):
    assert app.finish(name, where / f"{name}.parquet") == 4820
    return (where / f"{name}.parquet").read_bytes()


def test_curve_and_stream_chunks_round_trip_privately(tmp_path):
    users = [UserCurves("a", [Curve("c1", np.array([0.0, 1.0]), np.array([[1.0, 2.0], [3.0, 4.0]])),
                              Curve("c2", np.array([0.0, 2.0, 3.0]), np.ones((3, 2)))], ""),
             UserCurves("b'; --", [Curve("c1", np.array([0.0, 5.0]), np.zeros((2, 2)))], "")]
    path = tmp_path / "chunk-00000.arrow"
    stage_curve_chunk(users, path, ("x", "y"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    back = read_curve_chunk(path, ("x", "y"))
    assert [u.user_id for u in back] == ["a", "b'; --"]
    for u, v in zip(users, back, strict=True):
        assert [c.curve_id for c in u.curves] == [c.curve_id for c in v.curves]
        for c, d in zip(u.curves, v.curves, strict=True):
            np.testing.assert_array_equal(c.t, d.t)
            np.testing.assert_array_equal(c.values, d.values)
    streams = [UserStreams("m", [Stream("s0", np.array([3, 4, 5]), np.array([0.1, 0.2, 0.3]))],
                           "")]
    spath = tmp_path / "chunk-00001.arrow"
    stage_stream_chunk(streams, spath)
    (s,) = read_stream_chunk(spath)
    assert s.user_id == "m" and s.streams[0].stream_id == "s0"
    np.testing.assert_array_equal(s.streams[0].steps, [3, 4, 5])


def test_a_staged_chunk_is_numbers_beside_a_private_item_file(tmp_path):
    users = [UserCurves("a", [Curve("c1", np.array([0.0, 1.0]), np.ones((2, 2)))], ""),
             UserCurves("b", [Curve("c1", np.array([0.0, 2.0, 3.0]), np.zeros((3, 2)))], "")]
    path = tmp_path / "chunk-00000.arrow"
    stage_curve_chunk(users, path, ("x", "y"))
    items = items_path(path)
    assert items.name == "chunk-00000.items.arrow"
    assert stat.S_IMODE(items.stat().st_mode) == 0o600
    assert read_arrow(path).column_names == ["t", "x", "y"]  # no per-row id
    assert read_arrow(items).to_pylist() == [
        {"user_id": "a", "curve_id": "c1", "points": 2},
        {"user_id": "b", "curve_id": "c1", "points": 3}]
    # an item file that does not describe the samples is refused, not misread
    write_arrow(pa.table({"user_id": ["a", "b"], "curve_id": ["c1", "c1"],
                          "points": pa.array([2, 4], pa.int64())}), items)
    with pytest.raises(ValueError, match="do not cover its samples"):
        read_curve_chunk(path, ("x", "y"))


def test_dictionary_ids_are_written_as_the_plain_string_columns(tmp_path):
    import duckdb

    users, counts = ["b", "a'; --", "b", "ü" * 40], [3, 1, 2, 4]
    plain = pa.table({"user_id": repeat_ids(users, counts), "t": np.arange(10.0)})
    coded = pa.table({"user_id": repeat_ids_encoded(users, counts), "t": np.arange(10.0)})
    assert pa.types.is_dictionary(coded.schema.field("user_id").type)
    assert len(coded.column("user_id").combine_chunks().dictionary) == 3  # each id once
    paths = {}
    for name, table in (("plain", plain), ("coded", coded)):
        app = ParquetAppender(tmp_path / "staging" / name)
        app.add_table("values", table)
        app.add_table("values", table)  # a second row group, as a second chunk
        app.finish("values", tmp_path / f"{name}.parquet")
        paths[name] = tmp_path / f"{name}.parquet"
    back = {n: pq.read_table(p) for n, p in paths.items()}
    assert back["coded"].schema == back["plain"].schema  # string, not dictionary
    assert back["coded"].equals(back["plain"])
    assert back["coded"].column("user_id").to_pylist() == plain.column("user_id").to_pylist() * 2
    footer = {n: pq.ParquetFile(p).metadata.metadata for n, p in paths.items()}
    assert footer["coded"] == footer["plain"]
    assert pd_dtype(paths["coded"]) == pd_dtype(paths["plain"])
    con = duckdb.connect()
    assert con.execute(f"SELECT typeof(user_id) FROM '{paths['coded']}' LIMIT 1").fetchall() == [
        ("VARCHAR",)]


def pd_dtype(path):
    import pandas as pd

    return str(pd.read_parquet(path)["user_id"].dtype)


def test_group_spans():
    assert group_spans(["a", "a", "b", "b", "b"], ["1", "2", "2", "2", "3"]) == [
        (0, 1), (1, 2), (2, 4), (4, 5)]
    assert group_spans([], []) == []


# --------------------------------------------------------------------------- safe files


def _mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_new_files_are_private_whatever_the_umask_and_replace_a_planted_symlink(tmp_path):
    from files.safe_files import write_file

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    link = tmp_path / "report.md"
    link.symlink_to(victim)
    old = os.umask(0)
    try:
        write_file(link, b"report")
    finally:
        os.umask(old)
    assert victim.read_bytes() == b"precious", "wrote through the symlink"
    assert not link.is_symlink() and link.read_bytes() == b"report"
    assert _mode(link) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "victim"]


def test_new_file_appears_only_on_commit_and_abort_leaves_nothing(tmp_path):
    from files.safe_files import NewFile

    new = NewFile(tmp_path / "values.parquet")
    new.file.write(b"x" * 100_000)
    assert not (tmp_path / "values.parquet").exists()
    new.abort()
    assert list(tmp_path.iterdir()) == []
    with NewFile(tmp_path / "values.parquet") as fh:
        fh.write(b"y")
    assert (tmp_path / "values.parquet").read_bytes() == b"y"
    with pytest.raises(RuntimeError), NewFile(tmp_path / "other") as fh:
        fh.write(b"half")
        raise RuntimeError("a bug mid-write")
    assert [p.name for p in tmp_path.iterdir()] == ["values.parquet"]


class _FullDisk(io.FileIO):
    """A file on a disk with `room` bytes left (then ENOSPC)."""

    room = 10

    def write(self, b):  # noqa: D102
        if len(b) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        type(self).room -= len(b)
        return super().write(b)


@pytest.fixture()
def full_disk(monkeypatch):
    import files.safe_files as sf

    _FullDisk.room = 10
    monkeypatch.setattr(sf, "_open_file", lambda fd: io.BufferedWriter(_FullDisk(fd, "wb"), 16))


def test_full_disk_names_the_file_and_its_size_and_leaves_nothing(tmp_path, full_disk):
    from files.safe_files import write_file
    from schemas.errors import FileSystemError

    target = tmp_path / "out" / "chunk-00000.seeds.json"
    target.parent.mkdir()
    with pytest.raises(FileSystemError) as err:
        write_file(target, b"z" * 5000)
    text = str(err.value)
    assert str(target) in text and "No space left on device" in text, text
    assert "the file needs 5000 bytes" in text and "free there" in text, text
    assert "free space" in text and "rerun" in text, text
    assert err.value.exit_code == 2
    assert list(target.parent.iterdir()) == []


def test_full_disk_while_appending_parquet_names_the_output(tmp_path, full_disk):
    from schemas.errors import FileSystemError

    _FullDisk.room = 10**9
    chunks = _chunks(tmp_path, n=2)
    app = ParquetAppender(tmp_path / "staging")
    app.add("values", chunks[0])
    _FullDisk.room = 0
    with pytest.raises(FileSystemError, match=r"values\.parquet"):
        app.add("values", chunks[1])
        app.finish("values", tmp_path / "values.parquet")
    app.close()
    assert list((tmp_path / "staging").iterdir()) == []
    assert not (tmp_path / "values.parquet").exists()


def test_full_disk_while_encoding_in_parallel_names_the_output_and_leaves_nothing(
        tmp_path, full_disk, monkeypatch):
    import files.outputs as outputs
    from schemas.errors import FileSystemError

    monkeypatch.setattr(outputs, "ROW_GROUP_ROWS", 50)  # each add writes row groups
    _FullDisk.room = 10**9
    app = ParquetAppender(tmp_path / "staging")
    app.add_tables(_chunk_tables(0, 90))
    _FullDisk.room = 0
    with pytest.raises(FileSystemError, match=r"samples(_units)?\.parquet"):
        app.add_tables(_chunk_tables(1, 90))
    app.close()
    assert list((tmp_path / "staging").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["staging"]


def test_output_modes_follow_privpipe_umask(tmp_path, monkeypatch):
    from files.safe_files import operator_umask, set_output_modes, write_file

    (tmp_path / "r" / "plots").mkdir(parents=True)
    write_file(tmp_path / "r" / "report.md", b"r")
    write_file(tmp_path / "r" / "plots" / "a.png", b"p")
    for setting, fmode, dmode in ((None, 0o600, 0o700), ("027", 0o640, 0o750),
                                  ("0o002", 0o664, 0o775)):
        if setting is None:
            monkeypatch.delenv("PRIVPIPE_UMASK", raising=False)
        else:
            monkeypatch.setenv("PRIVPIPE_UMASK", setting)
        set_output_modes(tmp_path / "r")
        assert operator_umask() == (0o077 if setting is None else int(setting[-3:], 8))
        assert _mode(tmp_path / "r") == dmode and _mode(tmp_path / "r" / "plots") == dmode
        assert _mode(tmp_path / "r" / "report.md") == fmode
        assert _mode(tmp_path / "r" / "plots" / "a.png") == fmode


@pytest.mark.parametrize("bad", ["999", "abc", "-1", "0o1000", "7777"])
def test_bad_umask_setting_is_a_parameter_error(bad, monkeypatch):
    from files.safe_files import operator_umask
    from schemas.errors import ParameterError

    monkeypatch.setenv("PRIVPIPE_UMASK", bad)
    with pytest.raises(ParameterError, match="PRIVPIPE_UMASK"):
        operator_umask()


def test_tree_digests_hashed_on_threads_are_each_files_own_and_leave_no_descriptor(tmp_path):
    """`tree_sha256`: every file's SHA-256 by relative path, in walk order; no fd left open."""
    from files.safe_files import tree_sha256

    root = tmp_path / "r"
    (root / "plots" / "deep").mkdir(parents=True)
    rng = np.random.default_rng(2)
    files = {"a.parquet": rng.bytes(3 << 20), "b.parquet": rng.bytes(5 << 20), "m.json": b"{}",
             "plots/p.png": rng.bytes(999), "plots/deep/e": b""}
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    open_fds = len(os.listdir("/proc/self/fd"))
    got = tree_sha256(root, skip=("m.json",))
    assert len(os.listdir("/proc/self/fd")) == open_fds
    want = {rel: hashlib.sha256(data).hexdigest() for rel, data in sorted(files.items())
            if rel != "m.json"}
    assert list(got.items()) == list(want.items())


@pytest.mark.parametrize("planted", ["symlink", "fifo", "dir-symlink"])
def test_walks_refuse_symlinks_and_special_files_anywhere(planted, tmp_path):
    from files.safe_files import set_output_modes, tree_sha256
    from schemas.errors import OutputIntegrityError

    root = tmp_path / "r"
    (root / "plots").mkdir(parents=True)
    (root / "a.parquet").write_bytes(b"a")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "secret").write_bytes(b"s")
    os.chmod(victim / "secret", 0o600)
    where = root / "plots" / "x"
    if planted == "symlink":
        where.symlink_to(victim / "secret")
    elif planted == "fifo":
        os.mkfifo(where)
    else:
        where.symlink_to(victim)
    for walk in (tree_sha256, set_output_modes):
        with pytest.raises(OutputIntegrityError, match=r"plots/x is"):
            walk(root)
    assert _mode(victim / "secret") == 0o600 and _mode(victim) != 0o777


def test_rename_new_never_replaces_anything(tmp_path):
    from files.safe_files import rename_new

    src = tmp_path / "build"
    src.mkdir()
    (src / "f").write_bytes(b"new")
    for kind in ("file", "empty dir", "symlink", "dangling symlink"):
        dst = tmp_path / f"dst-{kind.replace(' ', '-')}"
        if kind == "file":
            dst.write_bytes(b"old")
        elif kind == "empty dir":
            dst.mkdir()
        elif kind == "symlink":
            dst.symlink_to(tmp_path)
        else:
            dst.symlink_to(tmp_path / "nowhere")
        with pytest.raises(FileExistsError):
            rename_new(src, dst)
        assert (src / "f").read_bytes() == b"new"
    rename_new(src, tmp_path / "published")
    assert (tmp_path / "published" / "f").read_bytes() == b"new" and not src.exists()


# --------------------------------------------------------------------------- staging dirs


def test_staging_is_private_and_locked_and_close_removes_it(tmp_path):
    from files.staging_dir import StagingDir

    old = os.umask(0)
    try:
        with StagingDir.create(tmp_path / "out") as st:
            assert _mode(tmp_path / "out" / ".staging") == 0o700
            assert _mode(st.path) == 0o700
            stage_stream_chunk([UserStreams("m", [Stream("s", np.array([1]), np.array([.5]))],
                                            "")], st.path / "chunk-00000.arrow")
            assert _mode(st.path / "chunk-00000.arrow") == 0o600
            path = st.path
    finally:
        os.umask(old)
    assert not path.exists()


def test_sweep_removes_what_no_live_release_holds_and_keeps_what_one_does(tmp_path):
    from files.staging_dir import StagingDir

    out = tmp_path / "out"
    live = StagingDir.create(out)            # held by this process (another open file)
    (live.path / "chunk-00000.arrow").write_bytes(b"raw")
    root = out / ".staging"
    pid_one = root / ("0" * 32)               # an old-style owner.pid naming pid 1
    pid_one.mkdir()
    (pid_one / "owner.pid").write_text("1")
    unlocked = root / ("1" * 32)              # nobody holds its lock: its owner died
    unlocked.mkdir()
    (unlocked / "seeds.json").write_bytes(b"{}")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_bytes(b"k")
    (root / "planted").symlink_to(victim)     # never followed: the link goes, not its target
    fresh = StagingDir.create(out)
    try:
        assert live.path.exists() and (live.path / "chunk-00000.arrow").exists()
        assert not pid_one.exists() and not unlocked.exists()
        assert not (root / "planted").exists() and (victim / "keep").exists()
    finally:
        fresh.close()
        live.close()
    assert list(root.iterdir()) == []


def test_staging_root_that_is_a_symlink_or_foreign_is_refused(tmp_path):
    from files.staging_dir import StagingDir
    from schemas.errors import FileSystemError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".staging").symlink_to(elsewhere)
    with pytest.raises(FileSystemError, match=r"\.staging is a symlink"):
        StagingDir.create(tmp_path / "out")
    assert list(elsewhere.iterdir()) == []


def test_reaper_removes_the_staging_of_a_sigkilled_process(tmp_path):
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from files.staging_dir import StagingDir
        st = StagingDir.create(Path({str(out)!r}))
        (st.path / "chunk-00000.arrow").write_bytes(b"raw")
        print(st.path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    path = Path(proc.stdout.strip())
    assert path.parent == out / ".staging"
    deadline = time.monotonic() + 20
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not path.exists(), "the reaper did not remove the killed process's staging"


# --------------------------------------------------------------------------- release dirs


def test_release_build_seals_publishes_once_and_checks_what_is_published(tmp_path):
    from files.release_dir import ReleaseBuild, check_published
    from schemas.errors import OutputIntegrityError, ParameterError

    out = tmp_path / "out"
    out.mkdir()
    build = ReleaseBuild(tmp_path / "staging", out, "rid-1")
    for bad in ("../x", "/abs", "plots/../../x", ".hidden"):
        with pytest.raises(ParameterError, match="not a safe name"):
            build.file(bad)
    with build.file("plots/map.png") as fh:
        fh.write(b"png")
    with build.file("values.parquet") as fh:
        fh.write(b"pq")
    manifest = build.seal({"release_id": "rid-1"})
    assert manifest["sha256"] == {"plots/map.png": hashlib.sha256(b"png").hexdigest(),
                                  "values.parquet": hashlib.sha256(b"pq").hexdigest()}
    assert not (out / "rid-1").exists(), "nothing is visible before publish"
    assert build.publish(manifest) == out / "rid-1"
    check_published(out / "rid-1", manifest)
    assert json.loads((out / "rid-1" / "manifest.json").read_text()) == manifest
    # a second build of the same release finds the first published: kept, not replaced
    again = ReleaseBuild(tmp_path / "staging2", out, "rid-1")
    with again.file("values.parquet") as fh:
        fh.write(b"pq")
    with again.file("plots/map.png") as fh:
        fh.write(b"png")
    inode = (out / "rid-1" / "values.parquet").stat().st_ino
    assert again.publish(again.seal({"release_id": "rid-1"})) == out / "rid-1"
    assert (out / "rid-1" / "values.parquet").stat().st_ino == inode
    # a different build of it is refused, naming the file
    other = ReleaseBuild(tmp_path / "staging3", out, "rid-1")
    with other.file("values.parquet") as fh:
        fh.write(b"other noise")
    with pytest.raises(OutputIntegrityError, match=r"rid-1/manifest\.json differs"):
        other.publish(other.seal({"release_id": "rid-1"}))


def test_append_log_is_private_and_never_follows_a_symlink(tmp_path):
    from files.safe_files import open_append

    log = tmp_path / "server.log"
    old = os.umask(0)
    try:
        with open_append(log) as fh:
            fh.write(b"one\n")
        with open_append(log) as fh:
            fh.write(b"two\n")
    finally:
        os.umask(old)
    assert log.read_bytes() == b"one\ntwo\n" and _mode(log) == 0o600
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "planted.log").symlink_to(victim)
    with pytest.raises(OSError) as err:
        open_append(tmp_path / "planted.log")
    assert err.value.errno == errno.ELOOP
    assert victim.read_bytes() == b"precious"


def _chunk_outputs(tmp_path, monkeypatch, stash):
    """A stream release's `ChunkOutputs` over a real appender; claims, units and kind faked."""
    from types import SimpleNamespace

    from flows import release_stages

    tables = _chunk_tables(0, 900)
    monkeypatch.setattr(release_stages, "check_claims", lambda run, res: None)
    monkeypatch.setattr(release_stages, "samples_units",
                        lambda samples, dom, parameters: tables["samples_units"])
    kind = SimpleNamespace(streamed=("samples",), stash=stash)
    run = SimpleNamespace(kind=kind, dom=None, parameters=None)
    app = ParquetAppender(tmp_path / "staging")
    from tasks.privatize import ChunkResult

    res = ChunkResult(0, {"samples": tables["samples"]}, [], [], {}, [])
    return release_stages.ChunkOutputs(run, app), app, res


def test_a_chunk_is_stashed_while_its_files_are_encoded(tmp_path, monkeypatch):
    """The kind's stash (a stream release's population sums) overlaps the encoding."""
    import threading

    encoding, stashed = threading.Event(), threading.Event()
    add_table = ParquetAppender.add_table

    def slow_write(self, name, table):
        encoding.set()
        assert stashed.wait(30), "the stash did not run while the file was encoded"
        add_table(self, name, table)

    def stash(res, run):
        assert encoding.wait(30), "no file was being encoded during the stash"
        stashed.set()

    monkeypatch.setattr(ParquetAppender, "add_table", slow_write)
    outputs, app, res = _chunk_outputs(tmp_path, monkeypatch, stash)
    outputs.add(res)
    assert stashed.is_set()
    for name in ("samples", "samples_units"):
        assert app.finish(name, tmp_path / f"{name}.parquet") == 900
    app.close()


def test_a_failed_stash_waits_for_the_writes_then_raises(tmp_path, monkeypatch):
    import threading

    done = []
    add_table = ParquetAppender.add_table

    def slow_write(self, name, table):
        threading.Event().wait(0.3)
        add_table(self, name, table)
        done.append(name)

    def stash(res, run):
        raise RuntimeError("stash failed")

    monkeypatch.setattr(ParquetAppender, "add_table", slow_write)
    outputs, app, res = _chunk_outputs(tmp_path, monkeypatch, stash)
    with pytest.raises(RuntimeError, match="stash failed"):
        outputs.add(res)
    assert sorted(done) == ["samples", "samples_units"]  # ended before the error left `add`
    app.close()


def test_a_failed_write_is_raised_once_the_chunk_is_stashed(tmp_path, monkeypatch):
    stashed = []
    add_table = ParquetAppender.add_table

    def failing_write(self, name, table):
        if name == "samples_units":
            raise OSError(errno.ENOSPC, "No space left on device")
        add_table(self, name, table)

    monkeypatch.setattr(ParquetAppender, "add_table", failing_write)
    outputs, app, res = _chunk_outputs(tmp_path, monkeypatch, lambda res, run: stashed.append(1))
    with pytest.raises(OSError, match="No space left"):
        outputs.add(res)
    assert stashed == [1]
    assert res.tables  # a failed collect keeps its outputs (nothing marks it written)
    app.close()
