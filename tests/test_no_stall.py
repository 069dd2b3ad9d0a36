"""No pool stalls behind a stale run of its own job (issue 22: "No stall").

Editing a pool's credential Secret (before 03ebf18, protecting it too: its resourceVersion keyed
the jobs) replaces the pool's token job and its scope's runner manager
(``PoolRef.credentials_version``), here milliseconds after
their first start, while that first run is still in flight. APScheduler skipped the
replacement ("maximum number of running instances reached": it counts instances per job id)
and the stale run, seeing it was stale, scheduled nothing: the pool waited for the 5-minute
safety net in ``WaitingForToken``. These tests run the real ``SecretUpdater`` and
``RunnerManagers`` on a running scheduler, with the first GitHub request held on an Event
while the job is replaced, and assert the replacement's work lands within a bound far below
the safety net - before the stale request is even answered.
"""

from __future__ import annotations

import base64
import random
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import pytest
from apscheduler.schedulers.base import BaseScheduler
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runnerpool.domain import PoolRef, Scope, utcnow
from runnerpool.github.credentials import ClientCache
from runnerpool.github.fake import FakeGitHubClient
from runnerpool.github.protocol import GitHubClient
from runnerpool.github.types import RegistrationToken, Runner
from runnerpool.naming import TOKEN_SECRET_KEY
from runnerpool.runners.leftovers import delete_leftover_runner
from runnerpool.runners.listing import ListingKey
from runnerpool.runners.manager import RunnerManagers
from runnerpool.settings import RunnerSettings, TokenSettings
from secret_updater import SecretUpdater
from tests.helpers import started_scheduler, wait_for
from tests.test_runner_listing import NS, Cache, Pods

#: Far below the safety net (5 min for tokens, 10 intervals for listings), above scheduler jitter.
PROMPT = 3.0
#: The sync interval of these tests' runner managers: short, so that "one interval" is a bound
#: a test can wait for, and the safety net (10 intervals) still well apart from it.
INTERVAL = 2.0
TOKEN_WAIT = TokenSettings().wait


class Gate:
    """Holds GitHub requests until released: the stale run stays in flight while the test acts."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._lock = threading.Lock()
        self.waiting = 0

    def pass_through(self) -> None:
        with self._lock:
            self.waiting += 1
        try:
            assert self._open.wait(30), "a GitHub request was held for 30 s"
        finally:
            with self._lock:
                self.waiting -= 1

    def open(self) -> None:
        self._open.set()

    def held(self) -> int:
        with self._lock:
            return self.waiting


@dataclass
class GatedGitHub(FakeGitHubClient):
    """The in-memory fake, whose requests wait at a gate chosen per request."""

    #: Gates for the next requests, in order; then ``always`` (if any) for the rest.
    gates: list[Gate] = field(default_factory=list)
    always: Gate | None = None

    def _gate(self) -> None:
        gate = self.gates.pop(0) if self.gates else self.always
        if gate is not None:
            gate.pass_through()

    def registration_token(self, scope: Scope) -> RegistrationToken:
        self.token_requests.append(scope)
        self._gate()
        return RegistrationToken(
            token=f"token-{len(self.token_requests)}", expires_at=utcnow() + timedelta(hours=1)
        )

    def list_runners(self, scope: Scope) -> list[Runner]:
        listed = super().list_runners(scope)  # as GitHub had them when asked
        self._gate()
        return listed


@dataclass
class TokenWorld:
    updater: SecretUpdater
    clients: ClientCache
    secrets: dict[tuple[str, str], dict[str, str]]
    patches: list[tuple[str, str, dict[str, Any]]]

    def tokens_written(self) -> list[str]:
        return [body["stringData"][TOKEN_SECRET_KEY] for _, _, body in self.patches]


def _token_world(scheduler: BaseScheduler, github: GatedGitHub) -> TokenWorld:
    """The credential Secret is read at each request: none, none of the jobs' requests pass."""
    secrets: dict[tuple[str, str], dict[str, str]] = {}
    patches: list[tuple[str, str, dict[str, Any]]] = []

    def factory(data: Mapping[str, str], base_url: str) -> GitHubClient:
        return github

    clients = ClientCache(lambda ns, name: secrets.get((ns, name)), factory=factory)
    updater = SecretUpdater(
        clients,
        lambda ns, name, body: patches.append((ns, name, body)),
        lambda ns, name: None,
        scheduler=scheduler,
        remove_leftover=delete_leftover_runner,
        rng=random.Random(7),
    )
    return TokenWorld(updater, clients, secrets, patches)


@pytest.fixture
def scheduler() -> Iterator[BaseScheduler]:
    scheduler = started_scheduler(4)
    yield scheduler
    scheduler.shutdown(wait=False)


POOL = PoolRef(
    namespace=NS,
    name="build",
    scope=Scope(organization="octo-org"),
    credential_secret_name="github-cred",
    credentials_version="1",
)


def test_a_token_job_replaced_while_its_first_request_hangs_fills_the_secret_at_once(
    scheduler: BaseScheduler,
) -> None:
    stale = Gate()
    github = GatedGitHub(gates=[stale])
    world = _token_world(scheduler, github)
    world.secrets[(NS, "github-cred")] = {"token": "ghp_x"}
    try:
        world.updater.start(POOL)
        wait_for(lambda: stale.held() == 1, message="the first token request to be in flight")
        # The credential Secret was edited: a new version, a new job.
        world.updater.start(replace(POOL, credentials_version="2"))

        wait_for(world.patches.__len__, timeout=PROMPT, message="the replaced job to fill the Secret")
        assert stale.held() == 1, "filled while the stale request still hangs"
        filled_by_replacement = world.tokens_written()
        job = scheduler.get_job(POOL.key)
        assert job is not None
        next_run = job.next_run_time

        stale.open()
        wait_for(lambda: stale.held() == 0, message="the stale request to return")
        wait_for(lambda: len(github.token_requests) == 2, message="both requests made")
        # The stale run writes nothing and leaves its successor's schedule alone.
        assert world.tokens_written() == filled_by_replacement
        job = scheduler.get_job(POOL.key)
        assert job is not None and job.next_run_time == next_run
    finally:
        stale.open()
        world.updater.stop_all()


def test_a_stale_run_that_starts_late_and_returns_early_leaves_its_successor_due() -> None:
    """One worker thread, held by another pool's request: the pool's first run waits in the
    executor's queue, its job is replaced meanwhile, and the stale run, once it starts, returns
    at once (the generation check at the top of ``SecretUpdater._run``). The replacement must
    still run as soon as a thread is free, not at the safety net."""
    scheduler = started_scheduler(1)
    busy = Gate()
    github = GatedGitHub(gates=[busy])
    world = _token_world(scheduler, github)
    world.secrets[(NS, "github-cred")] = {"token": "ghp_x"}
    other = replace(POOL, name="other")
    try:
        world.updater.start(other)
        wait_for(lambda: busy.held() == 1, message="the other pool's request to hold the only thread")
        world.updater.start(POOL)
        wait_for(lambda: _submitted(scheduler, POOL.key), message="the pool's first run to be queued")
        world.updater.start(replace(POOL, credentials_version="2"))
        wait_for(lambda: _submitted(scheduler, POOL.key), message="the replacement to be queued")
        busy.open()

        wait_for(
            lambda: any(name == POOL.token_secret for _, name, _ in world.patches),
            timeout=PROMPT,
            message="the replacement to fill the pool's Secret",
        )
        assert len(github.token_requests) == 2, "the other pool's and the replacement's, none stale"
    finally:
        busy.open()
        world.updater.stop_all()
        scheduler.shutdown(wait=False)


def _runs_in_flight(scheduler: BaseScheduler, job_id: str) -> int:
    """Runs of ``job_id`` the executor has not seen end (APScheduler's own count)."""
    executor = scheduler._lookup_executor("default")  # type: ignore[attr-defined]
    return int(executor._instances.get(job_id, 0))


def _submitted(scheduler: BaseScheduler, job_id: str) -> bool:
    job = scheduler.get_job(job_id)
    return job is None or job.next_run_time > utcnow()


def _managers(scheduler: BaseScheduler, clients: ClientCache, cache: Cache) -> RunnerManagers:
    return RunnerManagers(
        cache,
        clients,
        Pods(),  # type: ignore[arg-type]
        lambda key: None,
        settings=RunnerSettings(sync_interval=INTERVAL),
        scheduler=scheduler,
    )


def test_a_runner_manager_replaced_while_its_listing_hangs_lists_at_once(scheduler: BaseScheduler) -> None:
    cache = Cache()
    ref = replace(cache.add("build", org="octo-org"), credentials_version="1")
    stale = Gate()
    github = GatedGitHub(gates=[stale])
    world = _token_world(scheduler, github)
    world.secrets[(NS, ref.credential_secret_name)] = {"token": "ghp_x"}
    managers = _managers(scheduler, world.clients, cache)
    key = str(ListingKey.of(ref))
    try:
        managers.start(ref)
        wait_for(lambda: stale.held() == 1, message="the first listing to be in flight")
        # A runner registered meanwhile; its only pool's credentials changed: the scope's job
        # is removed and added again.
        runner = Runner(id=1, name="build-a", status="online", busy=False, labels=(f"{NS}/build",))
        github.runners[ref.scope] = [runner]
        managers.start(replace(ref, credentials_version="2"))

        counts = wait_for(
            lambda: managers.counts(NS, "build"), timeout=PROMPT, message="the replaced job's first listing"
        )
        assert stale.held() == 1, "listed while the stale listing still hangs"
        assert counts.online == 1
        job = scheduler.get_job(key)
        assert job is not None
        next_run = job.next_run_time
        assert next_run - utcnow() <= timedelta(seconds=INTERVAL), "next listing within one interval"

        stale.open()
        wait_for(lambda: _runs_in_flight(scheduler, key) == 0, message="the stale run to end")
        # The stale run ends without touching the live job's schedule (it used to set it anew),
        # the counts, or the shared listing (its older answer, without the runner).
        job = scheduler.get_job(key)
        assert job is not None and job.next_run_time == next_run
        assert managers.counts(NS, "build") == counts
        latest = managers.listing.latest(ListingKey.of(ref))
        assert latest is not None and [r.id for r in latest.runners] == [1]
    finally:
        stale.open()
        managers.stop_all()


def test_a_pool_joining_a_scope_whose_round_is_in_progress_is_listed_soon(scheduler: BaseScheduler) -> None:
    """The round read its pools before the new one joined: it ends with one more round soon
    (``kick_gap``), not a whole interval (or a budget-stretched one) later."""
    cache = Cache()
    first = cache.add("first", org="octo-org")
    second = cache.add("second", org="octo-org")
    listing = Gate()
    github = GatedGitHub(gates=[listing])
    world = _token_world(scheduler, github)
    world.secrets[(NS, first.credential_secret_name)] = {"token": "ghp_x"}
    managers = RunnerManagers(
        cache,
        world.clients,
        Pods(),  # type: ignore[arg-type]
        lambda key: None,
        settings=RunnerSettings(sync_interval=600, kick_gap=0.2),
        scheduler=scheduler,
    )
    try:
        managers.start(first)
        wait_for(lambda: listing.held() == 1, message="the scope's first round to be listing")
        managers.start(second)
        listing.open()

        wait_for(lambda: managers.counts(NS, "first"), message="the first pool's listing")
        wait_for(
            lambda: managers.counts(NS, "second"), timeout=PROMPT, message="the joining pool's first listing"
        )
    finally:
        listing.open()
        managers.stop_all()


# -- whatever the order of events ----------------------------------------------------------------

#: What the reconciler sees, each followed by the reconcile it brings (start both jobs with
#: the credential Secret's current resourceVersion, then check the token Secret), and "answer":
#: the GitHub requests in flight get their answers.
EVENTS = ("credential", "protect", "token-secret", "pool", "answer")


@dataclass
class Model:
    """The reconciler's side, reduced to what drives the two jobs."""

    tokens: TokenWorld
    managers: RunnerManagers
    scheduler: BaseScheduler
    ref: PoolRef
    github: GatedGitHub
    gate: Gate = field(default_factory=Gate)
    version: int = 0

    def apply(self, event: str) -> None:
        if event == "answer":
            self.gate.open()
            self.gate = Gate()
            return
        if event == "credential" and not self.version:
            self.tokens.secrets[(NS, "github-cred")] = {"token": "ghp_x"}
            self.version = 1
        elif event == "protect" and self.version:
            self.version += 1  # an edit of the Secret (its protection too, before 03ebf18): a new version
        self.reconcile()

    def reconcile(self) -> None:
        # Each request made from now on waits for the next "answer" (or the end).
        self.github.always = self.gate
        ref = replace(self.ref, credentials_version=str(self.version) if self.version else "missing")
        self.tokens.updater.start(ref)
        self.managers.start(ref)
        written = self.tokens.tokens_written()
        encoded = base64.b64encode(written[-1].encode()).decode() if written else None
        self.tokens.updater.check_secret(NS, ref.name, encoded, recreated=False)
        # The next event comes once the scheduler has submitted the runs due now: they are in
        # flight (held at the gate, if they reached GitHub) when it replaces their jobs.
        jobs = (ref.key, str(ListingKey.of(ref)))
        wait_for(
            lambda: all(_submitted(self.scheduler, job) for job in jobs),
            message="the due runs to be submitted",
        )


@settings(
    max_examples=15,
    deadline=timedelta(seconds=TOKEN_WAIT + INTERVAL + 5),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.lists(st.sampled_from(EVENTS), max_size=5),
    after=st.lists(st.sampled_from(EVENTS), max_size=3),
)
def test_whatever_the_order_of_events_a_pool_gets_its_token_and_first_listing(
    before: list[str], after: list[str]
) -> None:
    events = [*before, "credential", *after]
    scheduler = started_scheduler(4)
    github = GatedGitHub()
    cache = Cache()
    tokens = _token_world(scheduler, github)
    model = Model(
        tokens=tokens,
        managers=_managers(scheduler, tokens.clients, cache),
        scheduler=scheduler,
        ref=replace(cache.add("build", org="octo-org"), credential_secret_name="github-cred"),
        github=github,
    )
    try:
        for event in events:
            model.apply(event)
        model.gate.open()  # GitHub answers everything from here on
        github.always = None

        # Both bounds count from the last event; the first listing that can succeed is one
        # made with the credential Secret present, so any counts come from such a listing.
        wait_for(
            lambda: model.managers.counts(NS, "build"),
            timeout=INTERVAL,
            interval=0.02,
            message=f"the pool's first runner listing after {events}",
        )
        wait_for(
            lambda: len(tokens.patches) > 0 and tokens.updater.failure(NS, "build") is None,
            timeout=TOKEN_WAIT,
            interval=0.02,
            message=f"the pool's token, and no failure left for its conditions, after {events}",
        )
    finally:
        model.gate.open()
        model.tokens.updater.stop_all()
        model.managers.stop_all()
        scheduler.shutdown(wait=False)
