"""`flows.collector.fewer_collections`: thresholds raised for a release, then put back."""

import gc
import threading

import pytest

from flows.collector import RELEASE_THRESHOLDS, fewer_collections


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_thresholds_are_raised_inside_and_restored_after_an_error(thresholds):
    with pytest.raises(RuntimeError), fewer_collections():
        assert gc.get_threshold() == RELEASE_THRESHOLDS
        raise RuntimeError("a failed release")
    assert gc.get_threshold() == (700, 10, 10)


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


def test_a_callers_higher_threshold_is_kept(thresholds):
    gc.set_threshold(200_000, 10, 10)
    with fewer_collections():
        assert gc.get_threshold()[0] == 200_000
    assert gc.get_threshold() == (200_000, 10, 10)
