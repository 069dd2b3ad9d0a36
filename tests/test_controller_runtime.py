"""Controller loop: outcome handling, metrics, stop semantics.  No API server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from runnerpool.runtime.controller import Controller, Result, TerminalError
from runnerpool.runtime.workqueue import RateLimiter, RateLimitingQueue


def metric(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


class Recorder:
    """A reconcile that runs scripted steps per call and signals each call."""

    def __init__(self, *steps: Callable[[str], Result]) -> None:
        self.steps = list(steps)
        self.calls: list[str] = []
        self.cond = threading.Condition()

    def __call__(self, key: str) -> Result:
        step = self.steps[min(len(self.calls), len(self.steps) - 1)]
        try:
            return step(key)
        finally:
            with self.cond:
                self.calls.append(key)
                self.cond.notify_all()

    def wait_calls(self, n: int, timeout: float = 5.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= n, timeout), f"calls so far: {self.calls}"


def ok(key: str) -> Result:
    return Result()


def boom(key: str) -> Result:
    raise RuntimeError("github said no")


@pytest.fixture
def limiter() -> RateLimiter:
    return RateLimiter()


@pytest.fixture
def queue(limiter: RateLimiter) -> RateLimitingQueue:
    return RateLimitingQueue(limiter, name="t-controller")


def test_success_forgets_backoff(queue: RateLimitingQueue, limiter: RateLimiter) -> None:
    queue.add_rate_limited("ns/a")  # pretend earlier failures
    controller = Controller(queue, ok)
    before = metric("runnerpool_reconcile_total", {"result": "success"})
    controller.process("ns/a")
    assert limiter.num_requeues("ns/a") == 0
    assert metric("runnerpool_reconcile_total", {"result": "success"}) == before + 1


def test_error_logs_one_line_and_requeues_rate_limited(
    queue: RateLimitingQueue, limiter: RateLimiter, caplog: pytest.LogCaptureFixture
) -> None:
    reconcile = Recorder(boom, ok)
    controller = Controller(queue, reconcile, workers=1)
    errors = metric("runnerpool_reconcile_errors_total")
    error_total = metric("runnerpool_reconcile_total", {"result": "error"})
    count = metric("runnerpool_reconcile_duration_seconds_count")
    caplog.set_level(logging.ERROR, logger="runnerpool.runtime.controller")
    queue.add("ns/a")
    controller.start()
    try:
        reconcile.wait_calls(2)  # retried after the 5 ms backoff
    finally:
        assert controller.stop(timeout=5)
    assert reconcile.calls == ["ns/a", "ns/a"]
    lines = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 1
    assert "ns/a" in lines[0].getMessage()
    assert "github said no" in lines[0].getMessage()
    assert lines[0].exc_info is None, "no traceback at error level"
    assert "\n" not in lines[0].getMessage()
    assert metric("runnerpool_reconcile_errors_total") == errors + 1
    assert metric("runnerpool_reconcile_total", {"result": "error"}) == error_total + 1
    assert metric("runnerpool_reconcile_duration_seconds_count") == count + 2
    assert limiter.num_requeues("ns/a") == 0, "the successful retry forgot the backoff"


def test_requeue_after_is_a_plain_delayed_requeue(
    queue: RateLimitingQueue, caplog: pytest.LogCaptureFixture
) -> None:
    reconcile = Recorder(lambda key: Result(requeue_after=0.02), ok)
    controller = Controller(queue, reconcile, workers=1)
    requeues = metric("runnerpool_reconcile_total", {"result": "requeue"})
    errors = metric("runnerpool_reconcile_errors_total")
    caplog.set_level(logging.WARNING)
    queue.add_rate_limited("ns/a")  # a previous failure; requeue_after must reset it
    queue.add_rate_limited("ns/a")
    controller.start()
    try:
        reconcile.wait_calls(2)
    finally:
        assert controller.stop(timeout=5)
    assert reconcile.calls == ["ns/a", "ns/a"]
    assert not [r for r in caplog.records if r.name == "runnerpool.runtime.controller"]
    assert metric("runnerpool_reconcile_total", {"result": "requeue"}) == requeues + 1
    assert metric("runnerpool_reconcile_errors_total") == errors


def test_requeue_after_resets_backoff(queue: RateLimitingQueue, limiter: RateLimiter) -> None:
    controller = Controller(queue, lambda key: Result(requeue_after=30))
    for _ in range(5):
        queue.add_rate_limited("ns/a")
    controller.process("ns/a")
    assert limiter.num_requeues("ns/a") == 0


def test_terminal_error_is_counted_apart_and_never_retried(
    queue: RateLimitingQueue, limiter: RateLimiter, caplog: pytest.LogCaptureFixture
) -> None:
    def invalid(key: str) -> Result:
        raise TerminalError("fix the spec")

    controller = Controller(queue, invalid)
    terminal = metric("runnerpool_reconcile_total", {"result": "terminal"})
    success = metric("runnerpool_reconcile_total", {"result": "success"})
    errors = metric("runnerpool_reconcile_errors_total")
    queue.add_rate_limited("ns/a")  # an earlier failure's backoff: dropped too
    caplog.set_level(logging.WARNING, logger="runnerpool.runtime.controller")

    controller.process("ns/a")

    assert metric("runnerpool_reconcile_total", {"result": "terminal"}) == terminal + 1
    assert metric("runnerpool_reconcile_total", {"result": "success"}) == success, "not a success"
    assert metric("runnerpool_reconcile_errors_total") == errors, "not an error to retry"
    assert limiter.num_requeues("ns/a") == 0, "no backoff kept"
    assert [r.getMessage() for r in caplog.records] == [
        "reconcile ns/a cannot succeed until the object changes: fix the spec"
    ]


def test_stop_lets_in_flight_reconcile_finish(queue: RateLimitingQueue) -> None:
    entered = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    def slow(key: str) -> Result:
        entered.set()
        assert release.wait(5)
        finished.set()
        return Result()

    controller = Controller(queue, slow, workers=2)
    controller.start()
    queue.add("ns/a")
    queue.add("ns/b")
    assert entered.wait(5)
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(controller.stop(timeout=10)))
    stopper.start()
    # stop() must not return while the reconcile is still running.
    stopper.join(0.1)
    assert stopper.is_alive()
    release.set()
    stopper.join(5)
    assert stopped == [True]
    assert finished.is_set()
    assert queue.get(timeout=0) is None, "no new work after stop"


def test_stop_reports_timeout(queue: RateLimitingQueue) -> None:
    release = threading.Event()
    entered = threading.Event()

    def stuck(key: str) -> Result:
        entered.set()
        release.wait(5)
        return Result()

    controller = Controller(queue, stuck, workers=1)
    controller.start()
    queue.add("ns/a")
    assert entered.wait(5)
    assert controller.stop(timeout=0.05) is False
    release.set()
    assert controller.stop(timeout=5) is True


def test_many_keys_many_workers_each_reconciled(queue: RateLimitingQueue) -> None:
    keys = {f"ns/p{i}" for i in range(50)}
    reconcile = Recorder(ok)
    controller = Controller(queue, reconcile, workers=4)
    controller.start()
    for key in keys:
        queue.add(key)
    try:
        reconcile.wait_calls(len(keys))
    finally:
        controller.stop(timeout=5)
    assert set(reconcile.calls) == keys


def test_workers_must_be_positive(queue: RateLimitingQueue) -> None:
    with pytest.raises(ValueError, match="workers"):
        Controller(queue, ok, workers=0)
