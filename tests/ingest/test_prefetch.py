"""Read ahead (`ingest.prefetch`): same blocks, same order, same errors; an early stop cleans up."""

from __future__ import annotations

import threading

import pytest

from ingest.prefetch import prefetched


def _reader(n, log, fail=None):
    try:
        for i in range(n):
            log.append(("made", i))
            yield i
        if fail is not None:
            raise fail
    finally:
        log.append(("closed", threading.get_ident()))


def _readers_alive():
    return [t for t in threading.enumerate() if t.name == "privpipe-ingest-read"]


def test_the_items_come_in_order_then_the_readers_error_where_it_raised():
    log = []
    got = []
    with pytest.raises(ValueError, match="row 7"):
        for x in prefetched(_reader(50, log, ValueError("row 7"))):
            got.append(x)
    assert got == list(range(50))
    assert not _readers_alive()


@pytest.mark.parametrize("depth", [1, 3])
def test_at_most_depth_items_are_read_ahead(depth):
    log = []
    it = prefetched(_reader(100, log), depth=depth)
    assert next(it) == 0
    for _ in range(200):  # let the reader run as far as it may
        if sum(1 for e in log if e[0] == "made") >= depth + 2:
            break
        threading.Event().wait(0.005)
    # the item handed out, `depth` queued, and at most one made and waiting to be queued
    assert sum(1 for e in log if e[0] == "made") <= depth + 2
    it.close()


def test_a_caller_that_stops_early_stops_the_reader_and_closes_it_in_its_own_thread():
    log = []
    it = prefetched(_reader(10**6, log))
    assert [next(it), next(it)] == [0, 1]
    it.close()
    assert not _readers_alive()  # joined before the caller goes on (and closes its source)
    assert log[-1] == ("closed", threading.get_ident())
    assert sum(1 for e in log if e[0] == "made") < 10


def test_an_error_in_the_callers_loop_stops_the_reader():
    log = []

    def consume():
        for x in prefetched(_reader(10**6, log)):
            if x == 3:
                raise KeyError("stop")

    with pytest.raises(KeyError):
        consume()
    assert not _readers_alive() and log[-1][0] == "closed"
