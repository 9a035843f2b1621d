"""flows.one_ahead: the next item made on a thread while the caller uses this one (no Prefect)."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from flows.one_ahead import one_ahead

WAIT = 10.0  # seconds a test waits for what must happen (never reached when it works)


def _maker(n: int, log: list[tuple[str, int, str]], fail_at: int | None = None,
           made: dict[int, threading.Event] | None = None, slow: float = 0.0):
    try:
        for i in range(n):
            log.append(("make", i, threading.current_thread().name))
            if fail_at == i:
                raise ValueError(f"item {i}")
            time.sleep(slow)
            if made is not None:
                made[i].set()
            yield i
    finally:
        log.append(("closed", -1, threading.current_thread().name))


def test_same_items_in_order_made_on_the_named_thread():
    log: list = []
    assert list(one_ahead(_maker(5, log), "privpipe-plan")) == [0, 1, 2, 3, 4]
    makers = {name for what, _, name in log if what == "make"}
    assert len(makers) == 1 and makers.pop().startswith("privpipe-plan")


def test_the_next_item_is_made_while_the_caller_uses_this_one():
    log: list = []
    made = {i: threading.Event() for i in range(4)}
    for i in one_ahead(_maker(4, log, made=made), "t"):
        if i < 3:  # serial making would never make item i + 1 while the caller waits here
            assert made[i + 1].wait(WAIT), f"item {i + 1} was not made during item {i}"


def test_at_most_one_item_ahead():
    log: list = []
    made = {i: threading.Event() for i in range(4)}
    it = one_ahead(_maker(4, log, made=made), "t")
    assert next(it) == 0
    assert made[1].wait(WAIT)
    time.sleep(0.2)  # a reader two ahead would have started item 2 by now
    assert [i for what, i, _ in log if what == "make"] == [0, 1]
    assert next(it) == 1
    assert made[2].wait(WAIT)
    it.close()


def test_an_exception_arrives_after_the_items_made_before_it():
    log: list = []
    got = []
    with pytest.raises(ValueError, match="item 2") as err:
        for i in one_ahead(_maker(5, log, fail_at=2), "t"):
            got.append(i)
    assert got == [0, 1]
    assert err.value.args == ("item 2",)
    assert [i for what, i, _ in log if what == "make"] == [0, 1, 2]


def test_an_early_stop_finishes_the_item_being_made_then_closes_in_the_callers_thread():
    log: list = []
    caller = threading.current_thread().name
    threads_before = threading.active_count()
    with pytest.raises(RuntimeError, match="caller"):
        for i in one_ahead(_maker(10, log, slow=0.3), "t"):
            if i == 0:
                raise RuntimeError("caller")
    # item 1 was being made when the caller stopped: it was finished, never item 2
    assert [i for what, i, _ in log if what == "make"] == [0, 1]
    assert log[-1] == ("closed", -1, caller)
    assert threading.active_count() == threads_before  # the thread was joined


def test_the_thread_runs_in_a_copy_of_the_callers_context():
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller's")

    def seen():
        for _ in range(3):
            yield var.get()

    assert list(one_ahead(seen(), "t")) == ["caller's"] * 3
