"""The collector's settings while a release runs (`flows.heap`): set, shared, restored."""

from __future__ import annotations

import gc
import threading

import pytest

from flows import heap, release
from flows.heap import release_heap


@pytest.fixture
def default_collector():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_the_heap_is_frozen_and_collections_rarer_then_restored(default_collector):
    kept = [object() for _ in range(10)]  # tracked: frozen with the start-up heap
    with release_heap():
        assert gc.get_threshold() == (heap.YOUNG, heap.OLDER, heap.OLDER)
        assert gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_restored_when_the_release_raises(default_collector):
    with pytest.raises(KeyError), release_heap():
        raise KeyError("x")
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


def test_releases_at_once_share_the_setting_and_the_last_restores_it(default_collector):
    first_in, second_done, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def first():
        with release_heap():
            first_in.set()
            second_done.wait(10)
            seen.append(gc.get_threshold())  # the second ended: still the release's
        first_out.set()

    t = threading.Thread(target=first)
    t.start()
    first_in.wait(10)
    with release_heap():
        pass
    second_done.set()
    first_out.wait(10)
    t.join(10)
    assert seen == [(heap.YOUNG, heap.OLDER, heap.OLDER)]
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0


class _Stop(Exception):
    pass


def test_a_release_runs_its_stages_under_it(default_collector, monkeypatch, tmp_path):
    seen = []

    def stage(*args, **kwargs):
        seen.append((gc.get_threshold(), gc.get_freeze_count() > 0))
        raise _Stop

    monkeypatch.setattr(release, "stage", stage)
    with pytest.raises(_Stop):
        release._release(None, input_path="in.csv", dom=None, parameters={}, release_id=None,
                         out_dir=str(tmp_path), ledger_path=str(tmp_path / "l.duckdb"),
                         chunk_users=None, table=None, scheduled_date="2026-12-07")
    assert seen == [((heap.YOUNG, heap.OLDER, heap.OLDER), True)]
    assert gc.get_threshold() == (700, 10, 10)
