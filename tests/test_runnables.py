"""One start path, one stop path: SIGTERM, a lost Lease and a failed start all stop the same way."""

from __future__ import annotations

import threading
from collections.abc import Callable

from prometheus_client import REGISTRY

from runnerpool.runtime.runnables import Runnable, Supervisor
from tests.helpers import wait_for


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def part(self, name: str, *, leader_only: bool = False, fail: bool = False) -> Runnable:
        def start() -> None:
            self.add(f"start {name}")
            if fail:
                raise RuntimeError("boom")

        return Runnable(name, start, lambda timeout: self.add(f"stop {name}"), leader_only=leader_only)

    def add(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)


class FakeElector:
    """Wins the Lease when told to, loses it when told to; like LeaderElector, ``stop`` ends
    ``run`` and calls ``on_stopped`` if it was leading."""

    def __init__(self, on_started: Callable[[], None], on_stopped: Callable[[], None]) -> None:
        self.on_started, self.on_stopped = on_started, on_stopped
        self.win = threading.Event()
        self.ended = threading.Event()
        self.released: bool | None = None

    def run(self) -> None:
        while not self.ended.is_set():
            if self.win.wait(0.01):
                self.win.clear()
                self.on_started()
        self.on_stopped()

    def stop(self, release: bool = True, timeout: float | None = None) -> bool:
        self.released = release
        self.ended.set()
        return True


def _in_thread(manager: Supervisor) -> threading.Thread:
    thread = threading.Thread(target=manager.run, daemon=True)
    thread.start()
    return thread


def test_a_stop_before_start_up_starts_nothing() -> None:
    log = Log()
    manager = Supervisor([log.part("caches"), log.part("workers", leader_only=True)])
    manager.stop()  # SIGTERM while the interpreter was still importing
    manager.run()
    assert log.lines == []


def test_without_election_everything_starts_in_order_and_stops_in_reverse() -> None:
    log = Log()
    manager = Supervisor(
        [
            log.part("metrics"),
            log.part("caches"),
            log.part("tokens", leader_only=True),
            log.part("workers", leader_only=True),
        ]
    )
    thread = _in_thread(manager)
    wait_for(lambda: manager.leading, message="the leader-only parts to start")
    manager.stop()
    thread.join(10)
    assert log.lines == [
        "start metrics",
        "start caches",
        "start tokens",
        "start workers",
        "stop workers",
        "stop tokens",
        "stop caches",
        "stop metrics",
    ]


def test_a_lost_lease_stops_the_leader_parts_first_then_everything() -> None:
    log = Log()
    electors: list[FakeElector] = []

    def elector(on_started: Callable[[], None], on_stopped: Callable[[], None]) -> FakeElector:
        electors.append(FakeElector(on_started, on_stopped))
        return electors[0]

    manager = Supervisor([log.part("caches"), log.part("workers", leader_only=True)], elector=elector)
    thread = _in_thread(manager)
    wait_for(lambda: electors, message="the elector to be built after the always-on parts")
    assert log.lines == ["start caches"], "nothing leader-only before the Lease"
    electors[0].win.set()
    wait_for(lambda: manager.leading, message="leading")
    electors[0].ended.set()  # the Lease is lost: the elector calls on_stopped
    thread.join(10)
    assert not thread.is_alive(), "a lost Lease ends the process"
    assert log.lines == ["start caches", "start workers", "stop workers", "stop caches"]
    assert electors[0].released is True


def test_a_lost_lease_bars_every_leader_part_at_once_not_after_the_workers_drained() -> None:
    """The workers' stop waits for a reconcile in flight (a slow API or GitHub call); in the
    usual order the runner managers, stopped after them, went on deregistering runners and
    deleting pods beside the new leader all that while."""
    managers_stopped, workers_stopping = threading.Event(), threading.Event()

    def stop_workers(timeout: float) -> None:
        workers_stopping.set()
        managers_stopped.wait(5)  # still draining when the managers are told

    supervisor = Supervisor(
        [
            Runnable(
                "runner managers", lambda: None, lambda timeout: managers_stopped.set(), leader_only=True
            ),
            Runnable("workers", lambda: None, stop_workers, leader_only=True),
        ],
        elector=None,
    )
    supervisor._start_leading()
    lost = threading.Thread(target=supervisor._lost_lease, daemon=True)
    lost.start()
    assert workers_stopping.wait(5)
    assert managers_stopped.wait(1), "the runner managers acted on while the workers drained"
    lost.join(5)
    assert not supervisor.leading and supervisor.stopping.is_set()


def test_a_part_that_fails_to_start_stops_what_started() -> None:
    log = Log()
    manager = Supervisor([log.part("caches"), log.part("probes", fail=True), log.part("webhook")])
    manager.run()
    assert log.lines == ["start caches", "start probes", "stop probes", "stop caches"]


def _leader_gauge() -> float | None:
    return REGISTRY.get_sample_value("runnerpool_leader")


def test_the_leader_gauge_is_1_only_while_the_leader_parts_run() -> None:
    """What the "no leader" alert reads: 0 on a standby, 1 once leading, 0 after the Lease."""
    electors: list[FakeElector] = []

    def elector(on_started: Callable[[], None], on_stopped: Callable[[], None]) -> FakeElector:
        electors.append(FakeElector(on_started, on_stopped))
        return electors[0]

    log = Log()
    manager = Supervisor([log.part("caches"), log.part("workers", leader_only=True)], elector=elector)
    thread = _in_thread(manager)
    wait_for(lambda: electors, message="the elector to be built")
    assert _leader_gauge() == 0, "a standby does not lead"
    electors[0].win.set()
    wait_for(lambda: _leader_gauge() == 1, message="the gauge to say leading")
    assert log.lines == ["start caches", "start workers"], "1 once the leader-only parts run"
    electors[0].ended.set()
    thread.join(10)
    assert _leader_gauge() == 0, "0 once the Lease is lost"


def test_without_election_the_only_replica_leads() -> None:
    manager = Supervisor([Log().part("workers", leader_only=True)])
    thread = _in_thread(manager)
    wait_for(lambda: _leader_gauge() == 1, message="the gauge to say leading")
    manager.stop()
    thread.join(10)
    assert _leader_gauge() == 0
