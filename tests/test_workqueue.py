"""Work queue semantics, mostly on a fake clock; threads only for the concurrency property."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from prometheus_client import REGISTRY

from runnerpool.runtime.workqueue import RateLimiter, RateLimitingQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def depth(name: str) -> float | None:
    """Keys ready to be handed out, as the queue's depth gauge reports them."""
    value: float | None = REGISTRY.get_sample_value("runnerpool_workqueue_depth", {"name": name})
    return value


def drain(q: RateLimitingQueue) -> list[str]:
    out = []
    while (key := q.get(timeout=0)) is not None:
        out.append(key)
        q.done(key)
    return out


def test_fifo_and_dedup_of_pending_keys() -> None:
    q = RateLimitingQueue(name="t-dedup")
    for key in ["a", "b", "a", "c", "b"]:
        q.add(key)
    assert depth("t-dedup") == 3
    assert drain(q) == ["a", "b", "c"]
    assert depth("t-dedup") == 0


def test_key_added_while_processing_is_requeued_after_done() -> None:
    q = RateLimitingQueue(name="t-processing")
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")
    q.add("a")
    # Not handed out again while a worker holds it...
    assert depth("t-processing") == 0
    assert q.get(timeout=0) is None
    q.done("a")
    # ...but exactly once more afterwards.
    assert depth("t-processing") == 1
    assert q.get(timeout=0) == "a"
    q.done("a")
    assert q.get(timeout=0) is None


def test_done_without_readd_does_not_requeue() -> None:
    q = RateLimitingQueue(name="t-done")
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.done("a")
    assert depth("t-done") == 0


def test_add_after_waits_for_the_clock(clock: FakeClock) -> None:
    q = RateLimitingQueue(clock=clock, name="t-after")
    q.add_after("a", 10)
    assert q.get(timeout=0) is None
    clock.advance(9.99)
    assert q.get(timeout=0) is None
    clock.advance(0.02)
    assert q.get(timeout=0) == "a"


def test_add_after_keeps_the_earliest_time(clock: FakeClock) -> None:
    q = RateLimitingQueue(clock=clock, name="t-earliest")
    q.add_after("a", 5)
    q.add_after("a", 10)  # later than already scheduled: no-op
    q.add_after("b", 10)
    q.add_after("b", 3)  # earlier: moves b forward
    clock.advance(3)
    assert drain(q) == ["b"]
    clock.advance(2)
    assert drain(q) == ["a"]
    clock.advance(100)
    assert drain(q) == [], "superseded schedules must not fire again"


def test_add_after_of_pending_key_is_noop(clock: FakeClock) -> None:
    q = RateLimitingQueue(clock=clock, name="t-pending")
    q.add("a")
    q.add_after("a", 5)
    assert drain(q) == ["a"]
    clock.advance(10)
    assert drain(q) == []


def test_add_after_zero_is_immediate(clock: FakeClock) -> None:
    q = RateLimitingQueue(clock=clock, name="t-zero")
    q.add_after("a", 0)
    assert q.get(timeout=0) == "a"


def test_due_key_already_pending_is_merged(clock: FakeClock) -> None:
    q = RateLimitingQueue(clock=clock, name="t-merge")
    q.add_after("a", 1)
    clock.advance(1)
    q.add("a")
    assert drain(q) == ["a"]


def test_rate_limited_backoff_doubles_and_forget_resets(clock: FakeClock) -> None:
    limiter = RateLimiter(base_delay=0.005, max_delay=0.04, clock=clock)
    delays = [limiter.when("a") for _ in range(6)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.04, 0.04])
    assert limiter.num_requeues("a") == 6
    assert limiter.when("b") == pytest.approx(0.005), "backoff is per key"
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


def test_backoff_exponent_does_not_overflow(clock: FakeClock) -> None:
    limiter = RateLimiter(max_delay=1000.0, overall_burst=10_000, clock=clock)
    for _ in range(2000):
        delay = limiter.when("a")
    assert delay == 1000.0


def test_overall_token_bucket_dominates_when_exhausted(clock: FakeClock) -> None:
    limiter = RateLimiter(base_delay=0.005, overall_qps=2.0, overall_burst=2, clock=clock)
    # Two tokens in the bucket: the per-key backoff (5 ms) applies.
    assert limiter.when("a") == pytest.approx(0.005)
    assert limiter.when("b") == pytest.approx(0.005)
    # Bucket empty: each further key waits for its own token, 0.5 s apart.
    assert limiter.when("c") == pytest.approx(0.5)
    assert limiter.when("d") == pytest.approx(1.0)
    clock.advance(10)  # refills, capped at burst
    assert limiter.when("e") == pytest.approx(0.005)
    assert limiter.when("f") == pytest.approx(0.005)
    assert limiter.when("g") == pytest.approx(0.5)


def test_add_rate_limited_goes_through_the_delay(clock: FakeClock) -> None:
    limiter = RateLimiter(1.0, 8.0, clock=clock)
    q = RateLimitingQueue(limiter, clock=clock, name="t-ratelimited")
    q.add_rate_limited("a")
    assert limiter.num_requeues("a") == 1
    assert q.get(timeout=0) is None
    clock.advance(1)
    assert q.get(timeout=0) == "a"
    q.add_rate_limited("a")  # while processing: scheduled 2 s out
    q.done("a")
    clock.advance(1.5)
    assert q.get(timeout=0) is None
    clock.advance(0.5)
    assert q.get(timeout=0) == "a"
    q.done("a")
    q.forget("a")
    assert limiter.num_requeues("a") == 0


def test_get_blocks_until_add() -> None:
    q = RateLimitingQueue(name="t-block")
    got: list[str | None] = []
    waiting = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
    waiting.start()
    q.add("a")
    waiting.join(5)
    assert got == ["a"]


def test_get_wakes_when_delayed_key_is_due() -> None:
    q = RateLimitingQueue(name="t-wake")
    started = time.monotonic()
    q.add_after("a", 0.05)
    assert q.get(timeout=5) == "a"
    assert time.monotonic() - started >= 0.05


def test_blocked_getter_notices_an_earlier_add_after() -> None:
    q = RateLimitingQueue(name="t-earlier")
    q.add_after("late", 60)
    got: list[str | None] = []
    waiting = threading.Thread(target=lambda: got.append(q.get(timeout=10)))
    waiting.start()
    q.add_after("soon", 0.01)
    waiting.join(5)
    assert got == ["soon"]


def test_get_times_out() -> None:
    q = RateLimitingQueue(name="t-timeout")
    assert q.get(timeout=0.01) is None


def test_shutdown_wakes_getters_and_stops_handing_out() -> None:
    q = RateLimitingQueue(name="t-shutdown")
    results: list[str | None] = []
    getters = [threading.Thread(target=lambda: results.append(q.get())) for _ in range(3)]
    for t in getters:
        t.start()
    q.shutdown()
    for t in getters:
        t.join(5)
        assert not t.is_alive()
    assert results == [None, None, None]
    q.add("a")
    q.add_after("b", 0.001)
    q.add_rate_limited("c")
    assert q.get(timeout=0) is None
    # Still shut down once the delayed add is due: nothing is handed out later either.
    assert q.get(timeout=0.05) is None


def test_shutdown_with_pending_keys_returns_none() -> None:
    q = RateLimitingQueue(name="t-shutdown-pending")
    q.add("a")
    q.shutdown()
    assert q.get() is None


def test_never_hands_out_a_key_twice_at_once() -> None:
    q = RateLimitingQueue(name="t-concurrent")
    keys = [f"ns/pool-{i}" for i in range(5)]
    active: set[str] = set()
    lock = threading.Lock()
    overlaps: list[str] = []
    processed: Counter[str] = Counter()
    progress = threading.Condition()

    def worker() -> None:
        while (key := q.get()) is not None:
            with lock:
                if key in active:
                    overlaps.append(key)
                active.add(key)
            # Let other workers run: they would grab the same key now if the queue allowed it.
            time.sleep(0)
            with lock:
                active.discard(key)
                processed[key] += 1
            q.done(key)
            with progress:
                progress.notify_all()

    workers = [threading.Thread(target=worker) for _ in range(8)]
    for t in workers:
        t.start()

    def produce() -> None:
        for i in range(5000):
            q.add(keys[i % len(keys)])

    producers = [threading.Thread(target=produce) for _ in range(3)]
    for t in producers:
        t.start()
    for t in producers:
        t.join(30)
    with progress:
        assert progress.wait_for(lambda: depth("t-concurrent") == 0, timeout=30)
    q.shutdown()
    for t in workers:
        t.join(10)
        assert not t.is_alive()
    assert not overlaps
    assert set(processed) == set(keys), "every key is processed at least once"
    assert sum(processed.values()) < 15000, "pending adds are merged"


def test_metrics() -> None:
    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name, {"name": "t-metrics"}) or 0.0

    q = RateLimitingQueue(name="t-metrics")
    adds = sample("runnerpool_workqueue_adds_total")
    retries = sample("runnerpool_workqueue_retries_total")
    q.add("a")
    q.add("a")  # merged: not counted
    q.add("b")
    assert sample("runnerpool_workqueue_depth") == 2
    assert sample("runnerpool_workqueue_adds_total") == adds + 2
    assert q.get(timeout=0) == "a"
    assert sample("runnerpool_workqueue_depth") == 1
    q.add_rate_limited("a")
    assert sample("runnerpool_workqueue_retries_total") == retries + 1


def test_spacing_folds_the_adds_after_a_pass_into_one_pass_at_its_end(clock: FakeClock) -> None:
    q = RateLimitingQueue(clock=clock, name="t-spacing", spacing=0.25)
    q.add("pool")
    assert q.get(timeout=0) == "pool"
    q.add("pool")  # an event during the pass
    q.done("pool")
    clock.advance(0.1)
    for _ in range(5):  # a burst of events right after it
        q.add("pool")
    q.add("other")
    assert drain(q) == ["other"], "another key is not held back"
    clock.advance(0.149)
    assert q.get(timeout=0) is None
    clock.advance(0.001)
    assert drain(q) == ["pool"], "the seven adds made one pass, at the end of the spacing"
    assert drain(q) == []


def test_spacing_leaves_an_isolated_add_and_a_later_requeue_alone(clock: FakeClock) -> None:
    q = RateLimitingQueue(clock=clock, name="t-spacing-alone", spacing=0.25)
    q.add("pool")
    assert drain(q) == ["pool"]
    clock.advance(0.25)
    q.add("pool")
    assert drain(q) == ["pool"], "once the spacing is over an add is handed out at once"
    q.add_after("pool", 10)
    clock.advance(10)
    assert drain(q) == ["pool"], "a requeue longer than the spacing keeps its own time"


def test_spacing_zero_hands_a_key_out_again_at_once(clock: FakeClock) -> None:
    q = RateLimitingQueue(clock=clock, name="t-spacing-zero")
    q.add("pool")
    assert drain(q) == ["pool"]
    q.add("pool")
    assert drain(q) == ["pool"]
    with pytest.raises(ValueError, match="spacing"):
        RateLimitingQueue(clock=clock, name="t-spacing-bad", spacing=-1)
