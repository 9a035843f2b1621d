"""The bounded submit/settle window of a release's chunks (flows/chunk_window.py)."""

from __future__ import annotations

import threading
import time

import pytest

import flows.chunk_window as chunk_window
import flows.faults as faults
from flows.chunk_window import ChunkWindow
from tasks.privatize import MechanismRunError


class _Result:
    def __init__(self, index: int, costs: int) -> None:
        self.index, self.costs = index, [object()] * costs


class _Future:
    """A finished chunk task: its result is taken once, in the window's order."""

    def __init__(self, log: _Log, res: _Result | Exception) -> None:
        self.log, self.res = log, res

    def result(self) -> _Result:
        self.log.pending_at_take.append(self.log.submitted - len(self.log.taken))
        self.log.taken.append(self)
        if isinstance(self.res, Exception):
            raise self.res
        return self.res


class _Log:
    def __init__(self) -> None:
        self.submitted = 0
        self.taken: list[_Future] = []
        self.pending_at_take: list[int] = []
        self.events: list[tuple[str, object]] = []

    def submit(self, res: _Result | Exception) -> _Future:
        self.submitted += 1
        return _Future(self, res)


@pytest.fixture()
def log(monkeypatch) -> _Log:
    log = _Log()
    monkeypatch.setattr(faults, "fault_point", lambda name: log.events.append(("fault", name)))
    return log


def _window(log: _Log, in_flight: int) -> ChunkWindow:
    return ChunkWindow(lambda rs: log.events.append(("settle", [r.index for r in rs])),
                       lambda r: log.events.append(("collect", r.index)), in_flight=in_flight)


def _run_eight(window: ChunkWindow, log: _Log) -> ChunkWindow:
    """Submit chunks 0-7 of one user each, drain, settle the rest and close; return `window`."""
    for i in range(8):
        window.submit(log.submit(_Result(i, 1)))
    window.drain()
    window.settle_unsettled()
    window.close()
    return window


def _settles(log: _Log) -> list[list[int]]:
    return [e[1] for e in log.events if e[0] == "settle"]


@pytest.mark.parametrize("in_flight", [1, 2, 4])
def test_at_most_in_flight_pending_and_chunk_order(log, in_flight):
    window = _window(log, in_flight)
    for i in range(10):
        window.submit(log.submit(_Result(i, 1)))
        assert log.submitted - len(log.taken) <= in_flight - 1
    assert len(log.taken) == 10 - (in_flight - 1)
    window.drain()
    window.settle_unsettled()
    assert max(log.pending_at_take) == in_flight
    assert [e[1] for e in log.events if e[0] == "collect"] == list(range(10))
    assert [i for batch in _settles(log) for i in batch] == list(range(10))
    assert [r.index for r in window.results] == list(range(10))


def test_settle_batches_grow_with_what_is_settled_up_to_the_cap(log, monkeypatch):
    """First batch 2, then as many as already settled (2, 4), capped at 5; the rest at the end."""
    monkeypatch.setattr(chunk_window, "SETTLE_BATCH", 2)
    monkeypatch.setattr(chunk_window, "MAX_SETTLE_BATCH", 5)
    window = _window(log, 1)
    for i in range(14):
        window.submit(log.submit(_Result(i, 1)))
    window._wait_settled()  # the last batch may still be on the settle thread
    assert [len(b) for b in _settles(log)] == [2, 2, 4, 5]
    window.settle_unsettled()
    assert [len(b) for b in _settles(log)] == [2, 2, 4, 5, 1]
    assert (window.settles, window.settled) == (5, 14)


def test_batches_count_settlements_not_chunks(log, monkeypatch):
    """Chunks of 1 and 2 settlements: batches of 1, 2, 3 and 3 settlements (first 1, cap 3)."""
    monkeypatch.setattr(chunk_window, "SETTLE_BATCH", 1)
    monkeypatch.setattr(chunk_window, "MAX_SETTLE_BATCH", 3)
    window = _window(log, 1)
    for i in range(6):
        window.submit(log.submit(_Result(i, 1 + i % 2)))
    window.settle_unsettled()  # waits for the settle thread; nothing is left unsettled
    assert _settles(log) == [[0], [1], [2, 3], [4, 5]]


def test_settled_costs_are_freed_and_unsettled_kept(log, monkeypatch):
    monkeypatch.setattr(chunk_window, "SETTLE_BATCH", 3)
    window = _window(log, 1)
    for i in range(4):
        window.submit(log.submit(_Result(i, 1)))
    window._wait_settled()
    assert [len(r.costs) for r in window.results] == [0, 0, 0, 1]
    window.settle_unsettled()
    assert [len(r.costs) for r in window.results] == [0, 0, 0, 0]


def test_fault_points_around_the_first_settlement_only(log, monkeypatch):
    monkeypatch.setattr(chunk_window, "SETTLE_BATCH", 1)
    window = _window(log, 2)
    window.settle_unsettled()  # nothing taken: no transaction, no fault point
    assert log.events == []
    for i in range(3):
        window.submit(log.submit(_Result(i, 1)))
    window.drain()
    window.settle_unsettled()
    # the later batches settle on the settle thread: their order against collects of later
    # chunks is free, their order among themselves and after their own collects is not
    assert log.events[:4] == [("collect", 0), ("fault", "before_first_settle"),
                              ("settle", [0]), ("fault", "after_first_chunk")]
    assert [e for e in log.events if e[0] != "collect"][3:] == [("settle", [1]), ("settle", [2])]
    assert [e[1] for e in log.events if e[0] == "collect"] == [0, 1, 2]
    for i in (1, 2):
        assert log.events.index(("collect", i)) < log.events.index(("settle", [i]))


def test_a_failed_chunk_propagates_and_what_was_taken_can_still_be_settled(log):
    window = _window(log, 3)
    window.submit(log.submit(_Result(0, 1)))
    window.submit(log.submit(RuntimeError("chunk 1 failed")))
    window.submit(log.submit(_Result(2, 1)))  # takes chunk 0 (3 pending)
    with pytest.raises(RuntimeError, match="chunk 1 failed"):
        window.drain()
    window.settle_unsettled()
    assert _settles(log) == [[0]]
    assert [r.index for r in window.results] == [0]


def test_chunks_are_collected_off_the_flow_thread_and_settled_only_once_collected(log,
                                                                                  monkeypatch):
    """A slow collector: no chunk is settled before its collect (its claims check) ended."""
    monkeypatch.setattr(chunk_window, "SETTLE_BATCH", 1)
    done: list[int] = []
    threads: set[str] = set()

    def collect(r: _Result) -> None:
        threads.add(threading.current_thread().name)
        time.sleep(0.01)
        done.append(r.index)

    def settle(rs: list[_Result]) -> None:
        assert all(r.index in done for r in rs), "a chunk settled before it was collected"
        log.events.append(("settle", [r.index for r in rs]))

    _run_eight(ChunkWindow(settle, collect, in_flight=3), log)
    assert done == list(range(8))
    assert [i for batch in _settles(log) for i in batch] == list(range(8))
    assert threads and threading.current_thread().name not in threads


def test_at_most_in_flight_chunks_wait_to_be_collected(log):
    """The collector's queue is bounded: a blocked collect stops the flow taking more chunks."""
    release = threading.Event()
    started: list[int] = []

    def collect(r: _Result) -> None:
        started.append(r.index)
        release.wait(5)

    window = ChunkWindow(lambda rs: None, collect, in_flight=2)
    taker = threading.Thread(target=lambda: [window.submit(log.submit(_Result(i, 1)))
                                             for i in range(10)])
    taker.start()
    time.sleep(0.3)
    assert len(log.taken) <= 3, "results pile up behind a slow collector"
    release.set()
    taker.join(5)
    window.drain()
    window.close()
    assert started == list(range(10))


def test_a_failed_collect_stops_collecting_and_settles_only_what_came_before(log):
    """Chunk 2's claims fail: chunks 0-1 settle, 2 and later are neither collected nor settled."""
    collected: list[int] = []

    def collect(r: _Result) -> None:
        if r.index == 2:
            r.costs = []  # as check_claims does before it raises
            raise MechanismRunError("chunk 2", "chunk 2", ValueError("claimed costs differ"))
        collected.append(r.index)

    settled: list[list[int]] = []
    window = ChunkWindow(lambda rs: settled.append([r.index for r in rs if r.costs]), collect,
                         in_flight=2)
    for i in range(6):
        window.submit(log.submit(_Result(i, 1)))
    with pytest.raises(MechanismRunError):
        window.drain()
    window.settle_unsettled()
    window.close()
    assert collected == [0, 1]
    assert [i for batch in settled for i in batch] == [0, 1]
    assert all(not r.costs for r in window.results if r.index >= 2)


def test_close_ends_the_collector_thread(log):
    before = set(threading.enumerate())
    window = _window(log, 2)
    for i in range(3):
        window.submit(log.submit(_Result(i, 1)))
    window.drain()
    window.settle_unsettled()  # one batch, in the flow thread: no settle thread started
    assert [t.name for t in set(threading.enumerate()) - before] == ["privpipe-collect_0"]
    window.close()
    assert not set(threading.enumerate()) - before


def test_later_batches_settle_off_the_flow_thread_while_it_takes_chunks(log, monkeypatch):
    """The first settle is the flow thread's; later ones run on the settle thread, in order."""
    monkeypatch.setattr(chunk_window, "SETTLE_BATCH", 1)  # batches of 1, 1, then 2
    monkeypatch.setattr(chunk_window, "MAX_SETTLE_BATCH", 2)
    gate, threads, order = threading.Event(), [], []
    before = set(threading.enumerate())

    def settle(rs: list[_Result]) -> None:
        threads.append(threading.current_thread().name)
        if len(threads) == 2:
            gate.wait(5)  # the second batch blocks until the flow thread has taken more
        order.append([r.index for r in rs])

    window = ChunkWindow(settle, lambda r: None, in_flight=1)
    window.submit(log.submit(_Result(0, 1)))  # taken and settled in the flow thread
    window.submit(log.submit(_Result(1, 1)))  # handed to the settle thread, which blocks
    window.submit(log.submit(_Result(2, 1)))  # taken while batch [1] is still settling
    assert len(log.taken) == 3 and order == [[0]]
    gate.set()
    window.settle_unsettled()
    window.close()
    assert order == [[0], [1], [2]]
    assert not set(threading.enumerate()) - before, "close() left a thread running"
    assert threads[0] == threading.current_thread().name
    assert threads[1].startswith("privpipe-settle")  # [2]: the final settle, flow thread
    assert threads[2] == threading.current_thread().name
    assert all(not r.costs for r in window.results)


def test_a_failed_background_settle_is_raised_and_its_batch_settled_again(log, monkeypatch):
    """The ledger refuses batch [1]: the flow sees the error; the batch is not lost."""
    monkeypatch.setattr(chunk_window, "SETTLE_BATCH", 1)
    monkeypatch.setattr(chunk_window, "MAX_SETTLE_BATCH", 1)
    calls: list[list[int]] = []

    def settle(rs: list[_Result]) -> None:
        calls.append([r.index for r in rs])
        if len(calls) == 2:
            raise RuntimeError("the ledger is busy")

    window = ChunkWindow(settle, lambda r: None, in_flight=1)
    window.submit(log.submit(_Result(0, 1)))
    window.submit(log.submit(_Result(1, 1)))  # settles in the background, and fails
    with pytest.raises(RuntimeError, match="the ledger is busy"):
        window.submit(log.submit(_Result(2, 1)))  # the next batch waits for it: raised
    assert [len(r.costs) for r in window.results] == [0, 1, 1]
    assert (window.settles, window.settled) == (1, 1)
    window.settle_unsettled()  # what _fail does: the failed batch and the rest, once
    window.close()
    assert calls == [[0], [1], [1, 2]]
    assert all(not r.costs for r in window.results)


def test_a_background_batch_waits_for_its_collects(log, monkeypatch):
    """A slow collector: the settle thread settles a chunk only after its collect ended."""
    monkeypatch.setattr(chunk_window, "SETTLE_BATCH", 1)
    monkeypatch.setattr(chunk_window, "MAX_SETTLE_BATCH", 1)
    collected: list[int] = []

    def collect(r: _Result) -> None:
        time.sleep(0.05)
        collected.append(r.index)

    def settle(rs: list[_Result]) -> None:
        assert all(r.index in collected for r in rs), "settled before its collect ended"

    window = _run_eight(ChunkWindow(settle, collect, in_flight=4), log)
    assert collected == list(range(8)) and all(not r.costs for r in window.results)


def test_a_collect_failing_under_a_background_batch_settles_only_what_came_before(
        log, monkeypatch):
    """Chunk 3's claims fail while batch [2, 3] waits on the settle thread: 0-2 settle once."""
    monkeypatch.setattr(chunk_window, "SETTLE_BATCH", 2)
    monkeypatch.setattr(chunk_window, "MAX_SETTLE_BATCH", 2)

    def collect(r: _Result) -> None:
        if r.index == 3:
            time.sleep(0.05)  # the batch is on the settle thread before this fails
            r.costs = []
            raise MechanismRunError("chunk 3", "chunk 3", ValueError("claimed costs differ"))

    settled: list[int] = []
    window = ChunkWindow(lambda rs: settled.extend(r.index for r in rs if r.costs), collect,
                         in_flight=1)
    with pytest.raises(MechanismRunError):
        for i in range(8):
            window.submit(log.submit(_Result(i, 1)))
        window.drain()
    window.settle_unsettled()  # what _fail does
    window.close()
    assert sorted(settled) == [0, 1, 2] and len(settled) == 3
    assert all(not r.costs for r in window.results)
