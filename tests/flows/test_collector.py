"""`flows.collector.fewer_collections`: thresholds raised and the heap frozen for a release,
then put back; every release runs in it."""

import gc
import threading

import pytest

from flows import release
from flows.collector import RELEASE_THRESHOLDS, fewer_collections


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    yield
    gc.set_threshold(*saved)
    gc.unfreeze()


def test_thresholds_are_raised_inside_and_restored_after_an_error(thresholds):
    kept = [[] for _ in range(10)]  # tracked containers: frozen with the heap found
    with pytest.raises(RuntimeError), fewer_collections():
        assert gc.get_threshold() == RELEASE_THRESHOLDS
        assert gc.get_freeze_count() >= len(kept)
        raise RuntimeError("a failed release")
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


class _Stop(Exception):
    pass


def test_a_release_runs_in_the_block_whatever_process_calls_it(thresholds, monkeypatch, tmp_path):
    """Not only the CLI's: a Prefect worker's flow-run process calls the flow directly."""
    seen = []

    def stage(*args, **kwargs):
        seen.append((gc.get_threshold(), gc.get_freeze_count() > 0))
        raise _Stop

    monkeypatch.setattr(release, "stage", stage)
    with pytest.raises(_Stop):
        release._release(None, input_path="in.csv", dom=None, parameters={}, release_id=None,
                         out_dir=str(tmp_path), ledger_path=str(tmp_path / "l.duckdb"),
                         chunk_users=None, table=None, scheduled_date="2026-12-07")
    assert seen == [(RELEASE_THRESHOLDS, True)]
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_nested_and_concurrent_blocks_restore_once_the_last_ends(thresholds):
    inner_started, outer_done = threading.Event(), threading.Event()
    seen = []

    def other_release():
        with fewer_collections():
            inner_started.set()
            outer_done.wait(5)
            seen.append(gc.get_threshold())  # the first block ended: still raised here
        seen.append(gc.get_threshold())

    with fewer_collections():
        worker = threading.Thread(target=other_release)
        worker.start()
        inner_started.wait(5)
        with fewer_collections():
            assert gc.get_threshold() == RELEASE_THRESHOLDS
    outer_done.set()
    worker.join(5)
    assert seen == [RELEASE_THRESHOLDS, (700, 10, 10)]
    assert gc.get_freeze_count() == 0


def test_a_callers_higher_threshold_is_kept(thresholds):
    gc.set_threshold(200_000, 10, 10)
    with fewer_collections():
        assert gc.get_threshold()[0] == 200_000
    assert gc.get_threshold() == (200_000, 10, 10)
