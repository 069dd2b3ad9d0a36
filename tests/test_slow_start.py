"""The slow-start rule of a pool's pod creates (``runnerpool.pods.slow_start``), without a cluster."""

from __future__ import annotations

import threading

import pytest

from runnerpool.pods.slow_start import SlowStart, batches


def test_batches_double_from_one_up_to_the_cap_and_end_with_what_is_left() -> None:
    assert list(batches(10, cap=64)) == [1, 2, 4, 3]
    assert list(batches(500, cap=16)) == [1, 2, 4, 8] + [16] * 30 + [5]
    assert sum(batches(500, cap=16)) == 500
    assert list(batches(3, cap=1)) == [1, 1, 1]
    assert list(batches(1, cap=16)) == [1], "a one-replica pool: one create, no batch"
    assert list(batches(0, cap=16)) == []


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        list(batches(5, cap=0))
    with pytest.raises(ValueError):
        SlowStart(0)


class _RefusedError(Exception):
    pass


class _RefusedAt:
    """A create that counts its calls and fails the ``n``-th."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.calls += 1
            mine = self.calls
        if mine == self.n:
            raise _RefusedError("exceeded quota")


def test_a_failure_ends_its_batch_and_no_later_batch_is_sent() -> None:
    """The fifth create fails; it is in the third batch (creates 4 to 7), which still ends."""
    create = _RefusedAt(5)

    done = SlowStart(16).run(100, create)

    assert create.calls == 7
    assert done.made == 6
    assert [str(f) for f in done.failures] == ["exceeded quota"]


def test_every_create_of_a_batch_is_in_flight_at_once() -> None:
    """Creates 2-3 and 4-7 each wait at a barrier for all of their batch: one after the
    other, they would break it."""
    one, two, four = (threading.Barrier(n, timeout=10) for n in (1, 2, 4))
    barriers = [one, two, two, four, four, four, four]
    calls = 0
    lock = threading.Lock()

    def create() -> None:
        nonlocal calls
        with lock:
            mine = calls
            calls += 1
        barriers[mine].wait()

    done = SlowStart(4).run(7, create)

    assert (done.made, done.failures) == (7, ())


def test_once_the_batches_reach_the_cap_a_slow_create_does_not_hold_the_others() -> None:
    """Cap 2: the second create waits until the fifth is sent. Batches of two would wait for
    it (and time out); the window sends the third, fourth and fifth beside it."""
    fifth_sent = threading.Event()
    calls = 0
    lock = threading.Lock()

    def create() -> None:
        nonlocal calls
        with lock:
            calls += 1
            mine = calls
        if mine == 5:
            fifth_sent.set()
        if mine == 2 and not fifth_sent.wait(timeout=10):
            raise _RefusedError("held by its batch")

    done = SlowStart(2).run(5, create)

    assert (done.made, done.failures) == (5, ())


def test_no_create_is_sent_after_a_failure_in_the_window() -> None:
    create = _RefusedAt(40)

    done = SlowStart(4).run(500, create)

    assert len(done.failures) == 1
    assert create.calls <= 40 + 3, "at most the creates already in flight beside it"
    assert done.made == create.calls - 1
