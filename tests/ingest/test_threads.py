"""Ingest on both cores: the threads give the users, problems and errors of one thread.

A read runs on three threads (`ingest.pipeline._converted`): DuckDB reads the
blocks, a second thread converts and validates them, the caller uses the
users; the release's staging writes each chunk on a fourth
(`files.staging.WriteBehind`). Whatever the block size, the users (with their
fingerprints) and every problem (file, row, column, rule, message) are those
of converting the blocks one after the other in the caller's thread; a thread
that raises surfaces as that same error in the caller, after the users of the
blocks before it, and leaves no thread behind (never a hang).
"""

import hashlib
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import ingest
import ingest.pipeline as pipeline
from ingest import Rejection, iter_users, read_users, scan
from ingest.batch import _Batch
from ingest.blocks import _blocks
from ingest.plan import _plan
from ingest.prefetch import prefetched
from ingest.source import open_source
from tasks import stage
from tasks.stage import stage_input_fn
from tests.ingest.conftest import write_csv
from tests.ingest.test_read_order import HEADER, _rows

pytestmark = pytest.mark.timeout(120)  # a hang fails the test instead of the whole run


def _bad_rows() -> list[list[object]]:
    """12 users of 2 curves; u03, u07 and u10 carry bad cells (text, missing t, disorder)."""
    rows = _rows()
    rows[3 * 10 + 2][3] = "oops"  # u03 c0: value not a number
    rows[7 * 10 + 6][2] = ""  # u07 c1: t missing
    rows[10 * 10 + 1][2], rows[10 * 10 + 2][2] = 2, 1  # u10 c0: t not increasing
    return rows


def _one_thread(path: Path, domain, batch_rows: int) -> list:
    """The users as the caller's thread alone makes them: block by block, no thread."""
    with open_source(path) as src:
        plan = _plan(src, domain, None)
        return [r for block in _blocks(src, plan, batch_rows, spill=True)
                for r in _Batch(block, plan).results(1000)]


def _described(results: list) -> list:
    """Each user: its id and fingerprint, or every problem as the report names it."""
    return [(r.user_id, [p.describe(show_values=False) for p in r.problems])
            if isinstance(r, Rejection) else (r.user_id, r.fingerprint) for r in results]


def _ledger_files(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.glob("ledger.duckdb*"))}


def _privpipe_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("privpipe-")]


@pytest.mark.parametrize("batch_rows", [3, 7, 25, 200_000])
def test_users_and_problems_are_those_of_one_thread(tmp_path, curves_domain, batch_rows):
    f = write_csv(tmp_path / "in.csv", HEADER, _bad_rows())
    want = _described(_one_thread(f, curves_domain, batch_rows))
    assert [u for u, _ in want if isinstance(_, list)] == ["u03", "u07", "u10"]
    assert "row 33, column 'value'" in str(want)  # file row 33 = u03's third row (header: 1)
    assert _described(iter_users(f, curves_domain, batch_rows=batch_rows)) == want
    report = scan(f, curves_domain, batch_rows=batch_rows)
    assert (report.rows, report.users, len(report.rejected)) == (120, 9, 3)
    assert not _privpipe_threads()


class _Crash(RuntimeError):
    pass


def _crash_on_block(monkeypatch, bad: int) -> list[int]:
    """Make the conversion of block number `bad` (from 0) raise `_Crash` in its thread."""
    seen: list[int] = []

    class Crashing(_Batch):
        def __init__(self, tbl, plan):
            seen.append(threading.get_ident())
            if len(seen) == bad + 1:
                raise _Crash(f"block {bad} crashed")
            super().__init__(tbl, plan)

    monkeypatch.setattr(pipeline, "_Batch", Crashing)
    return seen


@pytest.mark.parametrize("bad", [0, 2])
def test_a_block_that_raises_in_the_thread_is_that_error_after_the_blocks_before(
        tmp_path, curves_domain, monkeypatch, bad):
    f = write_csv(tmp_path / "in.csv", HEADER, _bad_rows())
    want = _described(_one_thread(f, curves_domain, 10))  # blocks of one user (10 rows)
    seen = _crash_on_block(monkeypatch, bad)
    got = []
    with pytest.raises(_Crash, match=f"block {bad} crashed"):
        for r in iter_users(f, curves_domain, batch_rows=10):
            got.append(r)
    assert _described(got) == want[:bad]
    assert threading.get_ident() not in seen  # it did run in the conversion thread
    assert not _privpipe_threads()


def test_a_crash_while_staging_is_that_error_and_no_thread_is_left(tmp_path, curves_domain,
                                                                  monkeypatch):
    f = write_csv(tmp_path / "in.csv", HEADER, _rows())
    real = ingest.read_users
    monkeypatch.setattr(ingest, "read_users", lambda *a, **k: real(*a, batch_rows=10, **k))
    _crash_on_block(monkeypatch, 5)
    with pytest.raises(_Crash, match="block 5 crashed"):
        stage_input_fn(str(f), curves_domain, str(tmp_path / "s"), chunk_users=2)
    assert not _privpipe_threads()


def test_a_failed_chunk_write_is_that_error_and_no_later_chunk_is_written(
        tmp_path, curves_domain, monkeypatch):
    f = write_csv(tmp_path / "in.csv", HEADER, _rows())
    real_flush = stage._flush
    boom = OSError(28, "No space left on device")
    written = []

    def flush(kind, buf, index, staging, domain):
        if index == 2:
            raise boom
        written.append(index)
        return real_flush(kind, buf, index, staging, domain)

    monkeypatch.setattr(stage, "_flush", flush)
    with pytest.raises(OSError) as err:
        stage_input_fn(str(f), curves_domain, str(tmp_path / "s"), chunk_users=2)
    assert err.value is boom
    assert written == [0, 1]  # chunk 3 waits for chunk 2, whose error stops the staging
    assert not _privpipe_threads()


def test_the_threads_run_in_the_callers_context(tmp_path, curves_domain):
    # numpy's error state is a context variable: a thread made without the caller's
    # context would warn (an error here) where the caller silenced numpy
    def overflowing():
        yield np.array([1e308]) * 10

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="ignore"):
            assert list(prefetched(overflowing()))[0][0] == np.inf
    assert not _privpipe_threads()


@pytest.mark.prefect
def test_a_crash_in_the_conversion_thread_fails_the_release_and_leaves_the_ledger_untouched(
        tmp_path, monkeypatch, prefect_api):
    from flows.release import release_curves
    from ledger import Ledger
    from schemas.policy import load_policy

    policy = tmp_path / "policy.toml"
    policy.write_text('[domains.d]\nkind = "curves"\npublic = { duration = true, points = true }'
                      '\nnotion = "gp"\ncap = "1"\ntime_unit = "s"\nvalue_columns = ["value"]\n'
                      'value_unit = "1"\n')
    ledger_path = tmp_path / "ledger.duckdb"
    Ledger.init(ledger_path).apply_policy(load_policy(policy))
    before = _ledger_files(tmp_path)
    f = write_csv(tmp_path / "in.csv", HEADER, _rows())
    real = ingest.read_users
    monkeypatch.setattr(ingest, "read_users", lambda *a, **k: real(*a, batch_rows=10, **k))
    _crash_on_block(monkeypatch, 3)
    with pytest.raises(_Crash, match="block 3 crashed"):
        release_curves(input_path=str(f), domain="d", epsilon="0.5", out_dir=str(tmp_path / "o"),
                       ledger_path=str(ledger_path), policy_path=str(policy))
    assert _ledger_files(tmp_path) == before  # not a byte of the ledger or its files
    assert Ledger(ledger_path).verify().ok
    assert not _privpipe_threads()
    assert not any((tmp_path / "o" / ".staging").glob("*/*")), "staging must be removed"


def test_read_users_runs_consume_in_the_callers_thread(tmp_path, curves_domain):
    f = write_csv(tmp_path / "in.csv", HEADER, _rows())
    where = read_users(f, curves_domain, lambda users: (threading.get_ident(), len(list(users))),
                       batch_rows=7)
    assert where == (threading.get_ident(), 12)


@pytest.mark.parametrize("seed", range(20))
def test_run_numbers_are_numpys_cumulative_sum(seed):
    from ingest.batch import _run_number

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    starts = rng.random(n) < rng.choice([0.0, 0.1, 0.5, 1.0])
    if seed % 2 and n:
        starts[0] = True  # as `_changes` marks it
    got = _run_number(starts)
    assert got.dtype == np.int64 and got.tolist() == (np.cumsum(starts) - 1).tolist()


def test_an_error_of_the_caller_stops_the_threads_before_the_source_closes(
        tmp_path, curves_domain, monkeypatch):
    # the error's traceback keeps the read's frames alive: the threads must not wait for it
    import ingest.summary as summary

    f = write_csv(tmp_path / "in.csv", HEADER, _rows())

    class Boom(Exception):
        pass

    def add(self, r):
        raise Boom(r.user_id)

    monkeypatch.setattr(summary._Summary, "add", add)
    with pytest.raises(Boom, match="u00") as err:
        scan(f, curves_domain, batch_rows=10)
    assert err.value.__traceback__ is not None
    assert not _privpipe_threads()
