"""flows.switch_interval: the chunk phase's short switch interval is set, shared and restored."""

from __future__ import annotations

import sys
import threading

import pytest

from flows.switch_interval import CHUNK_SWITCH_INTERVAL, short_switch_interval


@pytest.fixture(autouse=True)
def _default_interval():
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


def test_set_inside_and_restored_after():
    with short_switch_interval():
        assert sys.getswitchinterval() == pytest.approx(CHUNK_SWITCH_INTERVAL)
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_restored_when_the_block_raises():
    with pytest.raises(RuntimeError), short_switch_interval():
        raise RuntimeError("a chunk failed")
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_never_lengthens_a_shorter_interval():
    sys.setswitchinterval(0.0001)
    with short_switch_interval():
        assert sys.getswitchinterval() == pytest.approx(0.0001, abs=2e-6)
    assert sys.getswitchinterval() == pytest.approx(0.0001, abs=2e-6)


def test_overlapping_releases_restore_only_when_the_last_leaves():
    """Two releases in one process (threads): the first to leave must not restore it."""
    entered, leave_first, first_left = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with short_switch_interval():
            entered.set()
            leave_first.wait(5)
        first_left.set()

    t = threading.Thread(target=first)
    t.start()
    assert entered.wait(5)
    with short_switch_interval():
        leave_first.set()
        assert first_left.wait(5)
        t.join(5)
        seen["after the first left"] = sys.getswitchinterval()
    assert seen["after the first left"] == pytest.approx(CHUNK_SWITCH_INTERVAL)
    assert sys.getswitchinterval() == pytest.approx(0.005)
