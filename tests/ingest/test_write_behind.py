"""Staging writes one behind the caller (`files.staging.WriteBehind`).

In order, one at a time, results in `done` in order; a write's error is
raised in the caller (the same object) by the next submit, by `finish` or at
the end of the ``with`` block, ahead of a later error of the caller but never
in place of a Ctrl-C; and the block never ends while a write still runs.
"""

import threading
import time

import pytest

from files.staging import WriteBehind

pytestmark = pytest.mark.timeout(60)


def _writers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("privpipe-stage-write")]


def test_writes_run_one_at_a_time_in_order_on_another_thread():
    log: list[tuple[str, int]] = []
    threads = set()

    def write(k):
        threads.add(threading.get_ident())
        log.append(("start", k))
        time.sleep(0.01)  # room for an overlap, were there one
        log.append(("end", k))
        return k * 10

    with WriteBehind([]) as writes:
        for k in range(5):
            writes.submit(write, k)
        assert writes.finish() == [0, 10, 20, 30, 40]
    assert log == [(e, k) for k in range(5) for e in ("start", "end")]
    assert threading.get_ident() not in threads and len(threads) == 1
    assert not _writers()


def test_the_caller_goes_on_while_a_write_runs_but_never_two_writes_ahead():
    release = threading.Event()
    started = threading.Event()

    def slow(k):
        started.set()
        release.wait()
        return k

    done: list[int] = []
    with WriteBehind(done) as writes:
        writes.submit(slow, 0)
        started.wait()
        assert done == []  # submit returned while write 0 still runs
        second = threading.Thread(target=writes.submit, args=(slow, 1))
        second.start()
        second.join(0.2)
        assert second.is_alive()  # the next submit waits for write 0
        release.set()
        second.join()
        assert done == [0]
    assert done == [0, 1]  # the block's end waited for write 1


def test_a_write_error_is_raised_by_the_next_submit_and_the_next_write_does_not_run():
    boom = OSError(28, "No space left on device")
    ran = []

    def write(k):
        if k == 1:
            raise boom
        ran.append(k)
        return k

    with pytest.raises(OSError) as err, WriteBehind([]) as writes:
        for k in range(4):
            writes.submit(write, k)
    assert err.value is boom
    assert ran == [0]
    assert not _writers()


def test_a_write_error_comes_before_a_later_error_of_the_caller():
    boom = OSError(5, "I/O error")

    def fail():
        raise boom

    with pytest.raises(OSError) as err, WriteBehind([]) as writes:
        writes.submit(fail)
        raise ValueError("a bad row read after the chunk was handed over")
    assert err.value is boom
    assert isinstance(err.value.__cause__, ValueError)


def test_a_ctrl_c_is_never_replaced_and_the_block_ends_after_the_write():
    end = []

    def write():
        time.sleep(0.05)
        end.append("written")
        raise OSError(5, "I/O error")

    with pytest.raises(KeyboardInterrupt), WriteBehind([]) as writes:
        writes.submit(write)
        raise KeyboardInterrupt
    assert end == ["written"]
    assert not _writers()


def test_a_write_that_ends_well_is_in_done_when_the_caller_fails():
    done: list[str] = []

    def write():
        time.sleep(0.05)
        return "chunk-00000.arrow"

    with pytest.raises(ValueError), WriteBehind(done) as writes:
        writes.submit(write)
        raise ValueError("stop")
    assert done == ["chunk-00000.arrow"]  # so the caller can remove it
